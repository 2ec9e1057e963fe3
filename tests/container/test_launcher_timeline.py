"""The launcher's timeline from a real 3-host job: every phase of every host in job.json, in
order, the Chrome trace beside it, and the report's Gantt chart in a real browser."""

import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from ringleader.core import timeline as phases
from ringleader.core.jobfile import read_job_file
from ringleader.core.results import TRACE_FILE
from ringleader.tools.cli import main
from tests.report.test_report_browser import near, screenshot

pytestmark = pytest.mark.container

EVERY_HOST = (
    phases.ENTRY,
    phases.CONFIG,
    phases.SSHD,
    phases.WRAPPER_STARTED,
    phases.FIRST_RANK,
    phases.FIRST_OUTPUT,
    phases.LAST_RANK_ENDED,
    phases.EXITED,
)
LEADER = (*EVERY_HOST, phases.WORKERS_UP, phases.LAUNCHED, phases.VERDICT)
WORKER = (
    *EVERY_HOST,
    phases.CONNECTED,
    phases.SSH_CHECKED,
    phases.MPI_DAEMON_UP,
    phases.VERDICT_RECEIVED,
)
CONFIG_ORANGE = (0xF2, 0x8E, 0x2B)  # PHASE_COLORS[1]: the "configuration read" bars


def in_order(found: list[str]) -> bool:
    positions = [phases.PHASES.index(phase) for phase in found]
    return positions == sorted(positions)


def test_every_phase_of_every_host_and_the_gantt_chart(run_job, tmp_path: Path) -> None:
    run = run_job()
    assert run.result is not None and run.result.exit_code == 0, run.output
    data = run.job.output_dir / "algo-1" / "output" / "data"
    summary = read_job_file(data / "job.json")
    assert summary.problems == ()
    for host, expected in (("algo-1", LEADER), ("algo-2", WORKER), ("algo-3", WORKER)):
        found = [mark.phase for mark in summary.timeline if mark.host == host]
        assert set(expected) <= set(found), (host, found)
        # Phases reached by the host itself come in the documented order (the leader's view
        # of a worker, its ssh check, may come before or after the worker's own steps).
        own = [phase for phase in found if phase in EVERY_HOST or phase == phases.MPI_DAEMON_UP]
        assert in_order(own), (host, found)
    leader = [mark.phase for mark in summary.timeline if mark.host == "algo-1"]
    assert in_order([p for p in leader if p in LEADER]), leader
    assert "[ringleader algo-1]" in run.output and "startup " in run.output
    assert "slowest host algo-" in run.output
    trace = json.loads((data / TRACE_FILE).read_text())
    processes = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert processes == {"algo-1", "algo-2", "algo-3"}

    job = tmp_path / "job"
    shutil.copytree(run.job.output_dir, job)
    assert main(["report", str(job)]) == 0
    index = job / "report" / "index.html"
    page = index.read_text()
    assert "Launcher timeline" in page and "launcher.png" in page
    png = screenshot(index, tmp_path)
    with Image.open(png) as image:
        colors = image.convert("RGB").getcolors(maxcolors=image.size[0] * image.size[1])
    assert colors is not None
    orange = sum(count for count, pixel in colors if near(pixel, CONFIG_ORANGE, 8))
    assert orange > 200, f"the launcher's Gantt chart did not load ({orange} orange pixels)"
