"""Telling: the verdict goes to every worker, and the leader waits (bounded) for each one's
confirmation, so that no host exits before every host has the job's code.

Failure-model rows: every host exits with the job's real code; a worker that never confirms is
named after ringleader_finish_timeout; a lost worker is not waited for.
"""

from ringleader.core.frozen import evolve
from ringleader.core.pmap import PSet
from ringleader.supervise.eventloop import Now
from ringleader.supervise.leading.effects import (
    Announce,
    AwaitConfirmations,
    Effect,
    Finish,
    Log,
    MarkTimeline,
)
from ringleader.supervise.leading.state import LeaderState, Phase, Telling
from ringleader.supervise.leading.steps import Step, stay
from ringleader.wire.events import WorkerBye, WorkerHello, WorkerLost


def announce(state: LeaderState, event: Announce, now: Now) -> Step:
    """Send the exit code to every worker: the leader's verdict, or the outcome of a job that
    never started."""
    pending: PSet[str] = PSet()
    effects: tuple[Effect, ...] = ()
    if state.setup.tells_workers:
        pending = state.unsettled
        effects = (Finish(event.outcome.exit_code, event.outcome.failure),)
    telling = Telling(pending=pending)
    return evolve(state, phase=Phase.TELLING, outcome=event.outcome, telling=telling), effects


def await_confirmations(state: LeaderState, event: AwaitConfirmations, now: Now) -> Step:
    """Wait until every worker told confirmed, at most ringleader_finish_timeout."""
    telling = state.telling
    assert telling is not None
    deadline = now.monotonic + state.setup.timeouts.finish
    return _told_yet(evolve(state, telling=evolve(telling, deadline=deadline)), ())


def _told_yet(state: LeaderState, effects: tuple[Effect, ...]) -> Step:
    telling = state.telling
    assert telling is not None
    if telling.pending or telling.deadline is None:
        return state, effects
    if state.setup.tells_workers:
        effects = (*effects, Log("every worker has the exit code"))
    return evolve(state, phase=Phase.DONE), effects


def bye(state: LeaderState, event: WorkerBye, now: Now) -> Step:
    """A worker has the code; its timeline since its hello joins the job's."""
    telling = state.telling
    assert telling is not None
    marks = state.on_leader_clock(event.host, event.marks)
    state = evolve(state, telling=evolve(telling, pending=telling.pending.discard(event.host)))
    return _told_yet(state, (MarkTimeline(marks),))


def lost_while_telling(state: LeaderState, event: WorkerLost, now: Now) -> Step:
    telling = state.telling
    assert telling is not None
    state = evolve(state, telling=evolve(telling, pending=telling.pending.discard(event.host)))
    return _told_yet(state, ())


def hello_while_telling(state: LeaderState, event: WorkerHello, now: Now) -> Step:
    """A worker that reports its own error exits with it alone; a plain hello is a late worker
    still to be told (the control server sends it the exit)."""
    if event.error_code is None:
        return stay(state)
    telling = state.telling
    assert telling is not None
    state = evolve(state, telling=evolve(telling, pending=telling.pending.discard(event.host)))
    return _told_yet(state, ())


def confirmations_deadline(state: LeaderState, event: object, now: Now) -> Step:
    telling = state.telling
    assert telling is not None
    if telling.deadline is None or now.monotonic < telling.deadline:
        return stay(state)
    said = Log(
        f"no confirmation within {state.setup.timeouts.finish:g} s (ringleader_finish_timeout) "
        f"from: {', '.join(sorted(telling.pending))}"
    )
    return evolve(state, phase=Phase.DONE), (said,)
