"""job.json: one writer and one reader in ringleader.core.jobfile, and the file format."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ringleader.core.health import FAILED, OK, CheckResult
from ringleader.core.jobfile import (
    JobFileError,
    JobSummary,
    job_file_text,
    parse_job_file,
    read_job_file,
    write_job_file,
)
from ringleader.core.outcome import Outcome
from ringleader.core.progress import StatusSample
from ringleader.core.records import RankRecord
from ringleader.core.results import write_job_summary

FIXTURE = Path(__file__).parents[1] / "report" / "fixtures" / "local-job"
RECORDS = (
    RankRecord(1, "algo-2", 3, None, 10.1, 19.0, False, ("ValueError: nan",)),
    RankRecord(0, "algo-1", 143, 15, 10.0, 20.5, True, ("Horovod has been shut down.",)),
)


def summary() -> JobSummary:
    failure = "Rank 1 on host algo-2 exited with code 3\n"
    return JobSummary(3, failure, ("algo-1", "algo-2"), 2, RECORDS[0], RECORDS)


def test_the_file_format_is_fixed() -> None:
    """Key order, indentation and the final newline: what tools and older reports read."""
    expected = {
        "exit_code": 3,
        "failure": "Rank 1 on host algo-2 exited with code 3\n",
        "hosts": ["algo-1", "algo-2"],
        "world_size": 2,
        "root_cause": RECORDS[0].to_json(),
        "ranks": [record.to_json() for record in RECORDS],
        "timeline": [],
        "attempts": [],
        "health": {},
        "progress": [],
        "stragglers": [],
    }
    assert job_file_text(summary()) == json.dumps(expected, indent=2) + "\n"
    success = JobSummary(0, None, ("algo-1",), 1, None, ())
    assert json.loads(job_file_text(success))["root_cause"] is None


def test_the_leader_writes_the_outcome(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    outcome = Outcome(3, "Rank 1 on host algo-2 exited with code 3\n", RECORDS[0])
    write_job_summary(path, outcome, list(RECORDS), ["algo-1", "algo-2"], 2)
    assert path.read_text() == job_file_text(summary())


def test_written_then_read_back(tmp_path: Path) -> None:
    path = tmp_path / "data" / "job.json"  # the directory is created
    write_job_file(path, summary())
    read = read_job_file(path)
    assert read.ranks == (RECORDS[1], RECORDS[0])  # sorted by rank when read
    assert read.progress == ()
    assert read.root_cause == RECORDS[0] and read.problems == ()
    assert (read.exit_code, read.world_size, read.hosts) == (3, 2, ("algo-1", "algo-2"))
    assert sorted(p.name for p in path.parent.iterdir()) == ["job.json"]  # no temporary left


def test_the_report_fixture_is_read() -> None:
    read = read_job_file(FIXTURE / "algo-1" / "output" / "data" / "job.json")
    assert read.exit_code == 3 and read.world_size == 6 and read.problems == ()
    assert read.root_cause is not None and (read.root_cause.rank, read.root_cause.host) == (
        4,
        "algo-3",
    )


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("{", "not JSON"),
        ("[]", "not a JSON object"),
        ('{"exit_code": "3"}', "exit_code"),
        ('{"exit_code": true}', "exit_code"),
        ('{"exit_code": 3, "ranks": {"a": 1}}', "ranks"),
    ],
)
def test_errors_name_the_field(text: str, field: str) -> None:
    with pytest.raises(JobFileError, match=field):
        parse_job_file(text)


def test_missing_optional_fields_get_values() -> None:
    read = parse_job_file('{"exit_code": 0, "failure": "", "hosts": "x"}')
    assert read == JobSummary(0, None, (), 0, None, ())


def test_every_hosts_health_checks_are_kept_and_read_back(tmp_path: Path) -> None:
    shm = CheckResult("/dev/shm", FAILED, "1.0 MiB in all, at least 64.0 MiB wanted")
    disk = CheckResult("free disk /opt/ml/output", OK, "40.0 GiB free")
    health = {"algo-1": (disk,), "algo-2": (disk, shm)}
    path = tmp_path / "job.json"
    write_job_file(
        path, JobSummary(71, "Host algo-2 ...\n", ("algo-1", "algo-2"), 2, None, (), health=health)
    )
    read = read_job_file(path)
    assert dict(read.health) == health and read.unhealthy == ("algo-2",)
    data = json.loads(path.read_text())
    data["health"]["algo-1"] = [{"name": "x"}]
    garbled = parse_job_file(json.dumps(data))
    assert "algo-1" not in garbled.health
    assert garbled.problems == ("a host's health checks cannot be read: 'algo-1'",)


def test_the_status_lines_numbers_are_read_back(tmp_path: Path) -> None:
    said = (StatusSample(10.0, 40, 100, None, None, {0: 40, 1: 41}),)
    path = tmp_path / "job.json"
    write_job_file(path, replace(summary(), progress=said))
    assert read_job_file(path).progress == said
    text = path.read_text().replace('"step": 40', '"step": "forty"')
    assert parse_job_file(text).problems[-1].startswith("a status cannot be read: ")
