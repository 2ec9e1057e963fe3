"""Restarts in place: what each start of the job's ranks (an attempt) ended with, whether the
job may start its ranks again, and how the failure file tells every attempt.

Pure rules; the leader (supervise/leader.py) applies them between attempts.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ringleader.core import exitcodes
from ringleader.core.errors import ConfigError
from ringleader.core.jsontext import parse_json
from ringleader.core.outcome import FAILURE_FILE_LIMIT, JobFacts, Outcome
from ringleader.core.restart_policy import (
    DEFAULT_POLICY,
    HANG,
    LOST_HOST,
    RANK_FAILURE,
    STRAGGLER,
    RestartPolicy,
)

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
    kind: str | None = None  # the restart policy's cause (core/restart_policy.py)
    # "allowed" when the job went on to another attempt, else why not (None: not decided)
    restart: str | None = None

    def describe(self) -> str:
        if self.cause is None:
            return f"attempt {self.attempt}: succeeded"
        startup = "" if self.progressed else " (before any progress)"
        kind = f" ({self.kind})" if self.kind else ""
        return (
            f"attempt {self.attempt}: exit code {self.exit_code}{kind}{startup}: {self.cause:.200}"
        )

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
            "kind": self.kind,
            "restart": self.restart,
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
            kind=_text_or_none(data.get("kind")),
            restart=_text_or_none(data.get("restart")),
        )


def _text_or_none(value: object) -> str | None:
    return None if value is None else str(value)


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


def failure_cause(facts: JobFacts) -> str | None:
    """The restart policy's cause of an attempt with these facts: a rank failed (its own code
    or a signal), the job hung, or a host was lost; None when nothing another attempt could
    cure failed: a configuration or startup error (a host that never started), a stop from
    outside, or no failure at all."""
    if facts.error_code is not None or facts.stopped_on is not None:
        return None
    if facts.lost_hosts:
        return LOST_HOST
    if facts.straggled is not None:
        return STRAGGLER
    if facts.hang is not None:
        return HANG
    return RANK_FAILURE if any(record.failed for record in facts.records) else None


@dataclass(frozen=True)
class Refusal:
    """Why the job ends after an attempt instead of starting its ranks again. With
    `do_not_retry` no other attempt can help (the policy refuses the cause, or attempts in a
    row made no progress): the job ends with exitcodes.DO_NOT_RETRY."""

    why: str
    do_not_retry: bool = False
    spent: bool = False  # a budget of restarts is spent: a later retry may still help


ALLOWED = "allowed"  # an attempt's `restart` when another attempt followed it


def refusal(
    attempts: Sequence[AttemptRecord],
    facts: JobFacts,
    max_restarts: int,
    policy: RestartPolicy = DEFAULT_POLICY,
) -> Refusal | None:
    """Why the job ends after its last attempt instead of starting its ranks again; None: it
    starts them again. `facts` are the last attempt's. The policy is asked even without a
    restart left: what it refuses no later retry (Slurm's requeue, a rerun) can cure either."""
    last = attempts[-1]
    if last.cause is None:
        return Refusal("it succeeded")
    cause = failure_cause(facts)
    if cause is None:
        return Refusal("not a failure a restart can cure")
    refused = policy.refuses(cause, last.exit_code)
    if refused is not None:
        return Refusal(refused, do_not_retry=True)
    if cause == LOST_HOST:
        return Refusal("a lost host: only a spare (ringleader cluster run --spares) replaces it")
    recent = attempts[-STARTUP_FAILURES_IN_A_ROW:]
    if len(recent) == STARTUP_FAILURES_IN_A_ROW and not any(each.progressed for each in recent):
        why = f"{STARTUP_FAILURES_IN_A_ROW} attempts in a row failed before any progress"
        return Refusal(why, do_not_retry=True)
    if last.attempt >= max_restarts:
        why = f"no restart left (ringleader_max_restarts {max_restarts})"
        return Refusal(why, spent=max_restarts > 0)
    return None


def not_retried(outcome: Outcome, refused: Refusal) -> Outcome:
    """The job's outcome when its restarts end, with why second in the failure file: after a
    do-not-retry refusal with exit code DO_NOT_RETRY (naming the code it replaces), after the
    budget is spent with its own."""
    if outcome.failure is None or not (refused.do_not_retry or refused.spent):
        return outcome
    code = exitcodes.DO_NOT_RETRY if refused.do_not_retry else outcome.exit_code
    line = f"Not restarted: {refused.why}."
    if refused.do_not_retry:
        line = (
            f"Not retried: {refused.why}; exit code {code} (do not retry) instead of "
            f"{outcome.exit_code}."
        )
    headline, _, details = outcome.failure.partition("\n")
    return Outcome(code, _fitting(headline, [line, *details.splitlines()]), outcome.root_cause)


def _fitting(headline: str, lines: Sequence[str]) -> str:
    """The headline, then as many of the lines as fit in the failure file, in order."""
    text = headline + "\n"
    for line in lines:
        if len(text.encode()) + len(line.encode()) + 1 > FAILURE_FILE_LIMIT:
            break
        text += line + "\n"
    return text


def with_history(outcome: Outcome, earlier: Sequence[AttemptRecord]) -> Outcome:
    """The final outcome whose failure file names every earlier attempt: the final cause's
    line first, then one line per earlier attempt, then the final cause's details (as many
    as still fit in the failure file)."""
    if outcome.failure is None or not earlier:
        return outcome
    headline, _, details = outcome.failure.partition("\n")
    lines = [f"Earlier {each.describe()}" for each in earlier] + details.splitlines()
    return Outcome(outcome.exit_code, _fitting(headline, lines), outcome.root_cause)
