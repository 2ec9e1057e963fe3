"""Nothing lost: whole tagged lines from every rank, per-rank logs, metrics."""

import json
import re

import pytest

from tests.container.conftest import REPO

pytestmark = pytest.mark.container

JOBS = REPO / "bench" / "probe"
HOSTS = ["algo-1", "algo-2", "algo-3"]
LINE = re.compile(r"^algo-1 \| \[(algo-\d) rank (\d+)\] R(\d+) L(\d+) (x*) END(\d+)$")
LOSS = '[{"Name": "loss", "Regex": "loss=([0-9.]+)"}]'


def test_every_line_of_every_rank_arrives_whole_and_in_order(run_job):
    count = 3000
    run = run_job(
        source_dir=JOBS,
        entry_point="print_lines.py",
        hyperparameters={"lines": str(count)},
        settings={"metric_definitions": LOSS},
    )
    assert run.codes() == dict.fromkeys(HOSTS, 0)
    seen: dict[int, list[int]] = {rank: [] for rank in range(6)}
    torn = 0
    for line in run.output.splitlines():
        if " END" not in line and not re.search(r"\] R\d+ L", line):
            continue
        match = LINE.match(line)
        if match is None or match.group(3) != match.group(2) or match.group(4) != match.group(6):
            torn += 1
            continue
        seen[int(match.group(2))].append(int(match.group(4)))
        host = HOSTS[int(match.group(2)) // 2]
        assert match.group(1) == host
    assert torn == 0
    for rank, indexes in seen.items():
        assert indexes == list(range(count)), f"rank {rank}: {len(indexes)} lines"
    assert max(len(line) for line in run.output.splitlines()) > 8000  # long lines survived
    # carriage-return progress bars: each update is a line of its own
    assert run.output.count("[algo-3 rank 5] progress 50%") == count // 50
    for rank in range(6):
        host = HOSTS[rank // 2]
        log = run.job.output_dir / host / "output" / "data" / "logs" / host / f"rank-{rank}.log"
        lines = log.read_text().splitlines()
        assert sum(1 for text in lines if text.startswith(f"R{rank} L")) == count
    # metrics: rank 0 only by default (30 loss lines), in the leader's metrics.jsonl
    data = run.job.output_dir / "algo-1" / "output" / "data"
    records = [json.loads(text) for text in (data / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == count // 100
    assert {(r["name"], r["rank"], r["host"]) for r in records} == {("loss", 0, "algo-1")}
    assert "metric loss: last=0.000345 min=0.000345 max=1 count=30" in run.output
    job = json.loads((data / "job.json").read_text())
    assert job["exit_code"] == 0 and job["world_size"] == 6 and len(job["ranks"]) == 6


def test_shown_ranks_can_be_limited(run_job):
    run = run_job(
        source_dir=JOBS,
        entry_point="print_lines.py",
        hyperparameters={"lines": "20"},
        settings={"log_ranks": "0,5"},
    )
    assert run.codes() == dict.fromkeys(HOSTS, 0)
    shown = {int(rank) for rank in re.findall(r"\[algo-\d rank (\d+)\] R", run.output)}
    assert shown == {0, 5}
    # hidden ranks still have their full log
    log = run.job.output_dir / "algo-2" / "output" / "data" / "logs" / "algo-2" / "rank-2.log"
    assert len([text for text in log.read_text().splitlines() if text.startswith("R2 L")]) == 20


def test_an_invalid_metric_regex_is_a_configuration_error_on_every_host(run_job):
    run = run_job(settings={"metric_definitions": '[{"Name": "loss", "Regex": "loss=([0-9"}]'})
    assert run.codes() == dict.fromkeys(HOSTS, 78)
    for host in HOSTS:
        assert (
            "Configuration error in ringleader_metric_definitions: item 0 (loss): invalid regex"
            in run.failure(host)
        )
