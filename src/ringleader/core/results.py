"""The job's result files: /opt/ml/output/failure or /opt/ml/output/success, and job.json."""

import contextlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from ringleader.core import paths
from ringleader.core.attempts import AttemptRecord
from ringleader.core.files import write_atomically
from ringleader.core.health import Report
from ringleader.core.jobfile import JobSummary, write_job_file
from ringleader.core.outcome import Outcome
from ringleader.core.progress import StatusSample
from ringleader.core.records import RankRecord
from ringleader.core.straggler import Straggler
from ringleader.core.timeline import Mark, chrome_trace

TRACE_FILE = "launcher_trace.json"  # beside job.json: opens in Perfetto / chrome://tracing


def write_result(exit_code: int, failure: str | None, output_dir: Path = paths.OUTPUT_DIR) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    failure_file = output_dir / paths.FAILURE_FILE.name
    success_file = output_dir / paths.SUCCESS_FILE.name
    if exit_code == 0:
        with contextlib.suppress(FileNotFoundError):
            failure_file.unlink()
        success_file.write_text("")
        return
    with contextlib.suppress(FileNotFoundError):
        success_file.unlink()
    write_atomically(failure_file, failure or f"The job failed with exit code {exit_code}.\n")


def write_job_summary(
    path: Path,
    outcome: Outcome,
    records: Sequence[RankRecord],
    hosts: Sequence[str],
    world_size: int,
    timeline: Sequence[Mark] = (),
    attempts: Sequence[AttemptRecord] = (),
    health: Mapping[str, Report] | None = None,
    progress: Sequence[StatusSample] = (),
    stragglers: Sequence[Straggler] = (),
) -> None:
    """job.json on the leader: the outcome, every rank's record and every host's launcher
    phases, for reports and tools; beside it the phases as a Chrome trace."""
    summary = JobSummary(
        exit_code=outcome.exit_code,
        failure=outcome.failure,
        hosts=tuple(hosts),
        world_size=world_size,
        root_cause=outcome.root_cause,
        ranks=tuple(records),
        timeline=tuple(timeline),
        attempts=tuple(attempts),
        health=dict(health or {}),
        progress=tuple(progress),
        stragglers=tuple(stragglers),
    )
    write_job_file(path, summary)
    if timeline:
        trace = chrome_trace(timeline, records)
        write_atomically(path.with_name(TRACE_FILE), json.dumps(trace, separators=(",", ":")))
