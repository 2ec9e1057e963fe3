"""`ringleader report` of a hung job: the leader's data/hang/stacks.json, grouped by stack, in
the printed summary and on the page; jobs without one are reported as before."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path, PurePosixPath

import pytest

from ringleader.tools import cli as ringleader_cli
from ringleader.tools.report.discover import classify
from tests.unit.test_hang_verdict import report as hang_report

FIXTURE = Path(__file__).parents[1] / "report" / "fixtures" / "local-job"
LEADER_HANG = "algo-1/output/data/hang/stacks.json"


def job_with(tmp_path: Path, stacks_json: str | None) -> Path:
    """The recorded 3-host job, with the leader's stacks.json when given."""
    job = tmp_path / "local-job"
    shutil.copytree(FIXTURE, job)
    if stacks_json is not None:
        (job / LEADER_HANG).parent.mkdir(parents=True)
        (job / LEADER_HANG).write_text(stacks_json)
    return job


def run_report(job: Path) -> tuple[int, str, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = ringleader_cli.main(["report", str(job)])
    return code, out.getvalue(), (job / "report" / "index.html").read_text()


@pytest.fixture(scope="module")
def hung(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, str]:
    stacks_json = json.dumps(hang_report().to_json(), indent=1)
    return run_report(job_with(tmp_path_factory.mktemp("hung"), stacks_json))


def test_the_leaders_stacks_are_found_first() -> None:
    files = classify(
        PurePosixPath(p)
        for p in (
            "algo-2/output/data/hang/stacks.json",
            "algo-2/output/data/hang/algo-2.rank-2.txt",
            LEADER_HANG,
            "algo-1/output/data/job.json",
            "algo-1/output/data/stacks.json",  # not in hang/
        )
    )
    assert [str(p) for p in files.hangs] == [LEADER_HANG, "algo-2/output/data/hang/stacks.json"]
    # SageMaker's output.tar.gz holds the data folder's contents.
    assert classify([PurePosixPath("hang/stacks.json")]).hangs == (
        PurePosixPath("hang/stacks.json"),
    )


def test_the_summary_prints_the_stacks_grouped(hung: tuple[int, str, str]) -> None:
    code, out, _ = hung
    assert code == 0
    expected = [f"Stacks of every rank (hang, {LEADER_HANG}):"]
    expected += [f"  {line}" for line in hang_report().summary_lines()]
    lines = out.splitlines()
    at = lines.index(expected[0])
    assert lines[at : at + len(expected)] == expected
    assert "  4 ranks (0-3 on algo-1, algo-2), via py-spy (0, 1), faulthandler (2, 3):" in lines


def test_the_page_shows_the_stacks_grouped_and_each_ranks_whole_dump(
    hung: tuple[int, str, str],
) -> None:
    html = hung[2]
    assert '<a href="#hang">Stacks</a>' in html
    section = html[html.index('<section id="hang">') :]
    section = section[: section.index("</section>")]
    summary = hang_report().summary_lines()
    assert "<strong>Rank 4 on host algo-3 is in load_batch_forever (train.py:13), not" in section
    assert "\n4 ranks (0-3 on algo-1, algo-2), via py-spy (0, 1), faulthandler (2, 3):\n" in (
        section
    )
    assert "    &lt;module&gt; (train.py:39)\n" in section  # escaped
    assert summary[3] == "Evidence from rank 0 on host algo-1:" and summary[3] in section
    assert section.count("<details>") == 5  # ranks 0-4; rank 5 sent none
    assert "rank 4 on algo-3: every process and thread" in section
    assert "load_batch_forever (/tmp/hangrec/code/train.py:13)" in section
    assert LEADER_HANG in html


def test_a_broken_stacks_file_is_a_warning(tmp_path: Path) -> None:
    code, out, html = run_report(job_with(tmp_path, '{"reason": "hang"'))
    assert code == 0 and "Stacks of every rank" not in out
    assert f"{LEADER_HANG}: skipped: " in html and 'id="hang"' not in html


def test_a_job_without_a_hang_is_reported_as_before(tmp_path: Path) -> None:
    code, out, html = run_report(job_with(tmp_path, None))
    assert code == 0 and "Stacks" not in out
    assert 'id="hang"' not in html and "#hang" not in html
