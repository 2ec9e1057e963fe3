"""Restarts in place: what each start of the job's ranks (an attempt) ended with, whether the
job may start its ranks again, and how the failure file tells every attempt.

Pure rules; the leader (supervise/leader.py) applies them between attempts.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ringleader.core.errors import ConfigError
from ringleader.core.jsontext import parse_json
from ringleader.core.outcome import FAILURE_FILE_LIMIT, JobFacts, Outcome

# An attempt in which no rank made progress (kept running to a progress report after an
# output line or a heartbeat) is a failure at startup; this many of them in a row end the
# restarts, whatever budget is left: a job that fails as it starts fails so every time.
STARTUP_FAILURES_IN_A_ROW = 2
# How often a rank's wrapper reports progress when restarts are on and the hang watch is off.
RESTART_PROGRESS_INTERVAL = 2.0


@dataclass(frozen=True)
class AttemptRecord:
    """One start of the job's ranks, from its launch to the verdict on it."""

    attempt: int  # 0, then one more per restart
    started_at: float  # time.time() on the leader
    ended_at: float
    exit_code: int
    cause: str | None  # the first line of its failure; None when it succeeded
    hosts: tuple[str, ...]
    progressed: bool  # some rank made progress before it ended
    lost: tuple[str, ...] = ()  # hosts lost during it (a cluster's spares replace them)

    def describe(self) -> str:
        if self.cause is None:
            return f"attempt {self.attempt}: succeeded"
        startup = "" if self.progressed else " (before any progress)"
        return f"attempt {self.attempt}: exit code {self.exit_code}{startup}: {self.cause:.200}"

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "exit_code": self.exit_code,
            "cause": self.cause,
            "hosts": list(self.hosts),
            "progressed": self.progressed,
            "lost": list(self.lost),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "AttemptRecord":
        cause = data.get("cause")
        return cls(
            attempt=int(data["attempt"]),
            started_at=float(data["started_at"]),
            ended_at=float(data["ended_at"]),
            exit_code=int(data["exit_code"]),
            cause=None if cause is None else str(cause),
            hosts=tuple(str(host) for host in data.get("hosts", ())),
            progressed=bool(data.get("progressed", True)),
            lost=tuple(str(host) for host in data.get("lost", ())),
        )


def parse_history(field: str, value: object) -> tuple[AttemptRecord, ...]:
    """Attempts made before this run of the job (`ringleader cluster run --spares` starts the
    job again on other hosts after a host loss): a JSON list of attempts as job.json has them.
    """
    try:
        items = parse_json(value) if isinstance(value, str) else value
        if not isinstance(items, list):
            raise TypeError("not a list")
        history = tuple(AttemptRecord.from_json(item) for item in items)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise ConfigError(field, f"expected a JSON list of attempts: {error}") from None
    if [each.attempt for each in history] != list(range(len(history))):
        raise ConfigError(field, "expected attempts numbered 0, 1, ... in order")
    return history


def first_line(failure: str | None) -> str | None:
    return None if failure is None else failure.split("\n", 1)[0]


def restartable(facts: JobFacts) -> bool:
    """Whether the job's ranks may be started again after an attempt with these facts: a rank
    failed (its own code or a signal) or the job hung. Never after a configuration or startup
    error (a host that never started), a stop from outside or a lost host."""
    if facts.error_code is not None or facts.stopped_on is not None or facts.lost_hosts:
        return False
    return facts.hang is not None or any(record.failed for record in facts.records)


def refusal(attempts: Sequence[AttemptRecord], facts: JobFacts, max_restarts: int) -> str | None:
    """Why the job ends after its last attempt instead of starting its ranks again; None: it
    starts them again. `facts` are the last attempt's."""
    last = attempts[-1]
    if last.cause is None:
        return "it succeeded"
    if not restartable(facts):
        return "not a failure a restart can cure"
    if last.attempt >= max_restarts:
        return f"no restart left (ringleader_max_restarts {max_restarts})"
    recent = attempts[-STARTUP_FAILURES_IN_A_ROW:]
    if len(recent) == STARTUP_FAILURES_IN_A_ROW and not any(each.progressed for each in recent):
        return f"{STARTUP_FAILURES_IN_A_ROW} attempts in a row failed before any progress"
    return None


def with_history(outcome: Outcome, earlier: Sequence[AttemptRecord]) -> Outcome:
    """The final outcome whose failure file names every earlier attempt: the final cause's
    line first, then one line per earlier attempt, then the final cause's details (as many
    as still fit in the failure file)."""
    if outcome.failure is None or not earlier:
        return outcome
    headline, _, details = outcome.failure.partition("\n")
    text = headline + "\n"
    for line in [f"Earlier {each.describe()}" for each in earlier] + details.splitlines():
        if len(text.encode()) + len(line.encode()) + 1 > FAILURE_FILE_LIMIT:
            break
        text += line + "\n"
    return Outcome(outcome.exit_code, text, outcome.root_cause)
