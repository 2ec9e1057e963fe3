"""What every rule returns, and the moves several concerns share (a verdict, a stop)."""

from collections.abc import Sequence

from ringleader.core.frozen import evolve
from ringleader.core.outcome import JobFacts, Outcome, decide
from ringleader.supervise.eventloop import Now
from ringleader.supervise.leading.effects import (
    Effect,
    Log,
    PrepareAttempt,
    TerminateEverywhere,
)
from ringleader.supervise.leading.state import Attempt, LeaderState, Phase
from ringleader.wire.events import WorkerLost

# After a stop of our own (a rank failed, a host lost, a hang): beyond the abort grace, before
# the launcher (which may wait minutes for a lost host's MPI daemon) is killed.
STOP_KILL_MARGIN_SECONDS = 0.5

Step = tuple[LeaderState, tuple[Effect, ...]]


def stay(state: LeaderState) -> Step:
    return state, ()


def verdict(state: LeaderState, outcome: Outcome, *effects: Effect) -> Step:
    """The job's outcome is decided: run() returns it; no attempt starts after this."""
    return evolve(state, phase=Phase.DECIDED, outcome=outcome), effects


def error_verdict(state: LeaderState, exit_code: int, message: str, *effects: Effect) -> Step:
    return verdict(state, decide(JobFacts(error_code=exit_code, error_message=message)), *effects)


def stopped_facts(state: LeaderState, host: str, now: Now) -> JobFacts:
    """SIGTERM arrived on `host` with no attempt running."""
    return JobFacts(
        stopped_on=host, stopped_at=now.wall, sigterm_grace=state.setup.timeouts.sigterm_grace
    )


def prepare(state: LeaderState, number: int, now: Now, *effects: Effect) -> Step:
    """Make attempt `number`'s launch command (its start is now, on the wall clock)."""
    attempt = Attempt(number=number, started_at=now.wall)
    preparing = evolve(state, phase=Phase.PREPARING, attempt=attempt, between=None)
    return preparing, (*effects, PrepareAttempt(number))


def terminate_everywhere(
    state: LeaderState, attempt: Attempt, grace: float, effects: Sequence[Effect] = ()
) -> Step:
    """Every rank is told to stop: the phase says so while the attempt runs. Ranks still to
    start no longer matter: the launch deadline goes (the stop's cause is the verdict's, not
    "only N of M ranks started")."""
    phase = Phase.STOPPING if state.phase in (Phase.LAUNCHING, Phase.RUNNING) else state.phase
    attempt = evolve(attempt, launch_deadline=None)
    return evolve(state, phase=phase, attempt=attempt), (*effects, TerminateEverywhere(grace))


def record_loss(
    state: LeaderState, attempt: Attempt, loss: WorkerLost
) -> tuple[LeaderState, Attempt, tuple[Effect, ...]] | None:
    """A worker lost while an attempt runs or settles; None when it is not news."""
    host = loss.host
    if host not in state.setup.workers or attempt.loss_of(host) is not None:
        return None
    attempt = evolve(attempt, lost=(*attempt.lost, loss))
    state = evolve(state, settled=state.settled.add(host), attempt=attempt)
    return state, attempt, (Log(f"lost worker {host}: {loss.reason}"),)
