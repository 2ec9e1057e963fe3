"""The job's outcome as the report tells it, from job.json and the failure/success files (pure).

job.json is read by ringleader.core.jobfile (its one reader, next to its one writer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ringleader.core.attempts import AttemptRecord
from ringleader.core.jobfile import JobSummary
from ringleader.core.records import RankRecord, signal_name


@dataclass(frozen=True)
class Outcome:
    """What the report says about the job as a whole, from the best source there is."""

    known: bool
    exit_code: int | None
    failure: str | None  # the cause, as the failure file or job.json tells it
    source: str  # where it came from, for the reader

    @property
    def succeeded(self) -> bool:
        return self.known and self.exit_code in (0, None) and self.failure is None

    @property
    def headline(self) -> str:
        if not self.known:
            return "outcome unknown"
        if self.succeeded:
            code = "" if self.exit_code is None else f" (exit code {self.exit_code})"
            return f"succeeded{code}"
        if self.exit_code is None:
            return "failed"
        return f"failed with exit code {self.exit_code}"


def decide_outcome(
    job: JobSummary | None, failure_texts: Sequence[str], success_files: int
) -> Outcome:
    """job.json wins; else a failure file; else a success file; else unknown."""
    if job is not None:
        failure = job.failure
        if job.exit_code != 0 and failure is None and failure_texts:
            failure = failure_texts[0]
        if job.exit_code != 0 and failure is None:
            failure = f"The job failed with exit code {job.exit_code}."
        return Outcome(True, job.exit_code, failure if job.exit_code != 0 else None, "job.json")
    if failure_texts:
        return Outcome(True, None, failure_texts[0].strip() or "(empty failure file)", "failure")
    if success_files:
        return Outcome(True, None, None, "success")
    return Outcome(False, None, None, "")


def is_root_cause(record: RankRecord, root: RankRecord | None) -> bool:
    return root is not None and (record.rank, record.host) == (root.rank, root.host)


def duration(record: RankRecord) -> float:
    return max(0.0, record.ended_at - record.started_at)


def short_status(record: RankRecord) -> str:
    text = f"exit {record.exit_code}"
    if record.signal is not None:
        text = signal_name(record.signal)
    return text + (", stopped" if record.terminated else "")


def status(record: RankRecord) -> str:
    if record.signal is not None:
        text = f"killed by {signal_name(record.signal)}"
    elif record.exit_code == 0:
        text = "ok"
    else:
        text = f"exit {record.exit_code}"
    if record.terminated:
        text += " (was told to stop)"
    return text


# ---------------------------------------------------------------------------- attempts
def restarted(attempts: Sequence[AttemptRecord]) -> bool:
    """More than one start of the ranks: the report shows the attempts (one looks as before)."""
    return len(attempts) > 1


def attempts_headline(attempts: Sequence[AttemptRecord]) -> str | None:
    """'3 attempts (restarted 2 times)'; None for a job that started its ranks once."""
    if not restarted(attempts):
        return None
    restarts = len(attempts) - 1
    return f"{len(attempts)} attempts (restarted {restarts} time{'' if restarts == 1 else 's'})"


def attempt_status(attempt: AttemptRecord) -> str:
    if attempt.cause is None:
        return "succeeded"
    return "failed" if attempt.progressed else "failed before any progress"


def attempt_duration(attempt: AttemptRecord) -> float:
    return max(0.0, attempt.ended_at - attempt.started_at)


def attempt_at(attempts: Sequence[AttemptRecord], at: float) -> int | None:
    """The attempt running at this time (its start to its end), None between or outside them."""
    for attempt in attempts:
        if attempt.started_at <= at <= attempt.ended_at:
            return attempt.attempt
    return None
