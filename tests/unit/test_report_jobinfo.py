"""job.json and the failure/success files as the job's outcome; rank status wording."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ringleader.core.jobfile import JobFileError, read_job_file
from ringleader.core.jobfile import parse_job_file as parse_job
from ringleader.core.outcome import Outcome
from ringleader.core.records import RankRecord
from ringleader.core.results import write_job_summary
from ringleader.tools.report.jobinfo import (
    decide_outcome,
    duration,
    is_root_cause,
    short_status,
    status,
)


def rank(n: int, host: str, code: int = 0, **extra: Any) -> dict[str, Any]:
    record = {
        "rank": n,
        "host": host,
        "exit_code": code,
        "signal": None,
        "started_at": 100.0 + n,
        "ended_at": 110.0,
        "terminated": False,
        "stderr_tail": [],
    }
    record.update(extra)
    return record


def job(**fields: Any) -> str:
    data = {
        "exit_code": 3,
        "failure": "Rank 1 on host algo-2 exited with code 3\nboom\n",
        "hosts": ["algo-1", "algo-2"],
        "world_size": 2,
        "root_cause": rank(1, "algo-2", 3, stderr_tail=["boom"]),
        "ranks": [rank(1, "algo-2", 3, stderr_tail=["boom"]), rank(0, "algo-1", 143, signal=15)],
    }
    data.update(fields)
    return json.dumps(data)


def test_job_json_is_read_into_rank_records() -> None:
    info = parse_job(job())
    assert info.exit_code == 3 and info.world_size == 2 and info.hosts == ("algo-1", "algo-2")
    assert [r.rank for r in info.ranks] == [0, 1]  # sorted by rank
    assert info.root_cause is not None and info.root_cause.stderr_tail == ("boom",)
    assert is_root_cause(info.ranks[1], info.root_cause)
    assert not is_root_cause(info.ranks[0], info.root_cause)
    assert duration(info.ranks[0]) == 10.0 and info.problems == ()


def test_a_broken_rank_record_is_reported_not_fatal() -> None:
    info = parse_job(job(ranks=[rank(0, "algo-1"), {"rank": 1}, "junk"], root_cause={"rank": 1}))
    assert [r.rank for r in info.ranks] == [0]
    assert info.root_cause is None and len(info.problems) == 3


def test_success_job_json() -> None:
    info = parse_job(job(exit_code=0, failure=None, root_cause=None, ranks=[rank(0, "algo-1")]))
    outcome = decide_outcome(info, [], 1)
    assert outcome.succeeded and outcome.failure is None
    assert outcome.headline == "succeeded (exit code 0)"


@pytest.mark.parametrize(
    "text",
    ["", "[]", "{", json.dumps({"failure": None}), job(exit_code="3"), job(ranks={"a": 1})],
)
def test_an_unreadable_job_json_is_an_error(text: str) -> None:
    with pytest.raises(JobFileError):
        parse_job(text)


def test_outcome_prefers_job_json_then_failure_then_success() -> None:
    info = parse_job(job(failure=None))
    from_job = decide_outcome(info, ["from the failure file"], 0)
    assert from_job.source == "job.json" and from_job.failure == "from the failure file"
    assert from_job.headline == "failed with exit code 3"
    bare = decide_outcome(info, [], 0)
    assert bare.failure == "The job failed with exit code 3."
    from_file = decide_outcome(None, ["Rank 4 failed\n"], 1)
    assert from_file.source == "failure" and not from_file.succeeded
    assert from_file.headline == "failed"
    success = decide_outcome(None, [], 1)
    assert success.succeeded and success.headline == "succeeded"
    unknown = decide_outcome(None, [], 0)
    assert not unknown.known and unknown.headline == "outcome unknown"


def record(code: int, signal: int | None = None, terminated: bool = False) -> RankRecord:
    return RankRecord(0, "algo-1", code, signal, 1.0, 2.0, terminated, ())


def test_status_wording() -> None:
    assert status(record(0)) == "ok"
    assert status(record(3)) == "exit 3"
    assert status(record(137, 9)) == "killed by SIGKILL"
    assert status(record(143, 15, terminated=True)) == "killed by SIGTERM (was told to stop)"
    assert short_status(record(143, 15, terminated=True)) == "SIGTERM, stopped"
    assert short_status(record(3)) == "exit 3"


def test_what_the_leader_writes_is_what_the_report_reads(tmp_path: Path) -> None:
    """The contract of ringleader.core.jobfile's writer and reader, through a real file."""
    records = [
        RankRecord(0, "algo-1", 143, 15, 10.0, 20.5, True, ("Horovod has been shut down.",)),
        RankRecord(1, "algo-2", 3, None, 10.1, 19.0, False, ("ValueError: nan",)),
    ]
    outcome = Outcome(3, "Rank 1 on host algo-2 exited with code 3\n", records[1])
    path = tmp_path / "data" / "job.json"
    write_job_summary(path, outcome, records, ["algo-1", "algo-2"], 2)
    info = read_job_file(path)
    assert info.ranks == tuple(records) and info.root_cause == records[1]
    assert (info.exit_code, info.failure, info.world_size) == (3, outcome.failure, 2)
    assert info.hosts == ("algo-1", "algo-2") and info.problems == ()
