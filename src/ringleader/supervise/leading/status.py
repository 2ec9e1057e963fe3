"""The status line: every ringleader_status_interval while the ranks run, the job's progress
in steps (its lowest rank's), its rate since the last status and its ETA (core/progress.py);
said in the leader's log, as a metric line, and into metrics.jsonl. A job whose ranks have no
step source says nothing.
"""

from ringleader.core.frozen import evolve
from ringleader.core.progress import kept, metric_line, sample, status_line
from ringleader.supervise.eventloop import Now
from ringleader.supervise.leading.effects import Effect, Log, RecordStatus
from ringleader.supervise.leading.state import Attempt, LeaderState
from ringleader.supervise.leading.steps import Step


def status_from_launch(state: LeaderState, attempt: Attempt, now: Now) -> Attempt:
    """The first status is due one interval after the launch (none with the interval 0)."""
    interval = state.setup.progress.status_interval
    if interval <= 0:
        return attempt
    return evolve(attempt, status_deadline=now.monotonic + interval)


def status_due(attempt: Attempt, now: Now) -> bool:
    return attempt.status_deadline is not None and now.monotonic >= attempt.status_deadline


def say_status(state: LeaderState, now: Now) -> Step:
    """The status now, when some rank has a step; the next one an interval later (none once
    the job is being stopped)."""
    attempt = state.current
    interval = state.setup.progress.status_interval
    due = None if attempt.ending else now.monotonic + interval
    found = sample(attempt.steps, now.wall, state.setup.progress.total_steps, attempt.last_status)
    attempt = evolve(attempt, status_deadline=due, last_status=found or attempt.last_status)
    if found is None:
        return evolve(state, attempt=attempt), ()
    effects: tuple[Effect, ...] = (
        Log(status_line(found)),
        Log(metric_line(found)),
        RecordStatus(found),
    )
    return evolve(state, attempt=attempt, progress=kept(state.progress, found)), effects
