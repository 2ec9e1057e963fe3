"""Settling: every launcher exited; the last rank records still on their way are collected,
then the attempt's ranks are reaped and its outcome decided.

Failure-model rows: records behind a backlog of output are waited for while output arrives,
records that never come are given up (ranks unreported), a host silent after a loss may be lost
too (the wait is the leader's loss timeout), SIGTERM after the launcher exited still ends the
job with 143 and no restart.
"""

from ringleader.core.exitcodes import first_failure
from ringleader.core.frozen import evolve
from ringleader.supervise.eventloop import Now
from ringleader.supervise.leading.effects import (
    CheckOutput,
    Effect,
    Log,
    OutputChecked,
    ReapAttempt,
    TerminateEverywhere,
)
from ringleader.supervise.leading.hang_watch import complete_stacks
from ringleader.supervise.leading.state import LeaderState, Phase
from ringleader.supervise.leading.steps import Step, record_loss, stay
from ringleader.wire.events import RankEnded, SigtermReceived, WorkerLost

# After the launcher exits, how long to wait for rank records still in flight from workers,
# counted from the last output the leader took (a busy leader may be seconds behind).
RECORD_SETTLE_SECONDS = 2.0
SETTLE_CHECK_SECONDS = 0.25  # while settling: how often to look whether output still arrives


def settle(state: LeaderState, now: Now, effects: tuple[Effect, ...]) -> Step:
    """Every launcher exited: stacks still awaited are shown as they are, the launcher's code
    is taken, then the records still unreported are waited for."""
    if state.current.dump is not None:  # the job ended meanwhile: keep what arrived
        state, shown = complete_stacks(state, now, job_ended=True)
        effects = (*effects, *shown)
    attempt = state.current
    code = first_failure([code for _, code in attempt.exited])
    every_host = frozenset(state.setup.hosts)
    if (attempt.policy.ranks_decide or attempt.launcher_outlived_ranks) and not attempt.unreported(
        every_host
    ):
        code = 0  # every rank reported: the ranks' own codes tell the story
    wait = _settle_wait(state)
    attempt = evolve(
        attempt,
        launcher_code=code,
        settle_wait=wait,
        settle_deadline=now.monotonic + wait,
        settle_check=now.monotonic + SETTLE_CHECK_SECONDS,
    )
    return evolve(state, phase=Phase.SETTLING, attempt=attempt), (*effects, CheckOutput())


def _settle_wait(state: LeaderState) -> float:
    """After a loss, a host whose ranks stay silent may be lost too (a partition silences every
    host at once, and busy machines notice each silence at its own time): wait until it would
    count as lost, so the verdict names every lost host."""
    if state.current.lost:
        return max(RECORD_SETTLE_SECONDS, state.setup.timeouts.leader_loss)
    return RECORD_SETTLE_SECONDS


def _settled_yet(state: LeaderState, now: Now, effects: tuple[Effect, ...]) -> Step:
    """Concluded once no host still up (not lost) owes a record; else look again soon."""
    attempt = state.current
    if not attempt.unreported(frozenset(state.setup.hosts) - attempt.lost_hosts):
        return conclude(state, effects)
    attempt = evolve(attempt, settle_check=now.monotonic + SETTLE_CHECK_SECONDS)
    return evolve(state, attempt=attempt), effects


def conclude(state: LeaderState, effects: tuple[Effect, ...]) -> Step:
    """This host's ranks are reaped; the answer (AttemptReaped) decides the attempt."""
    grace = state.setup.timeouts.abort_grace
    return evolve(state, phase=Phase.CONCLUDING), (*effects, ReapAttempt(grace))


def output_checked(state: LeaderState, event: OutputChecked, now: Now) -> Step:
    """While output still arrives, the missing records are on their way: the wait restarts.
    Once it stops for the whole wait, the records still missing are given up."""
    attempt = state.current
    if attempt.output_taken is None:  # the first look, as every launcher had exited
        attempt = evolve(attempt, output_taken=event.taken)
    elif event.taken != attempt.output_taken:
        deadline = now.monotonic + attempt.settle_wait
        attempt = evolve(attempt, output_taken=event.taken, settle_deadline=deadline)
    elif attempt.settle_deadline is not None and now.monotonic >= attempt.settle_deadline:
        return conclude(state, ())
    return _settled_yet(evolve(state, attempt=attempt), now, ())


def record_arrived(state: LeaderState, event: RankEnded, now: Now) -> Step:
    attempt = state.current
    if event.record.attempt != attempt.number:
        return stay(state)
    record = event.record.on_clock(state.clock_offsets.get(event.record.host, 0.0))
    attempt = evolve(attempt, records=attempt.records.set(record.rank, record))
    return _settled_yet(evolve(state, attempt=attempt), now, ())


def lost_while_settling(state: LeaderState, event: WorkerLost, now: Now) -> Step:
    """Its ranks' records will never come: named in the verdict with the loss."""
    noted = record_loss(state, state.current, event)
    if noted is None:
        return stay(state)
    state, _, effects = noted
    return _settled_yet(state, now, effects)


def sigterm_while_settling(state: LeaderState, event: SigtermReceived, now: Now) -> Step:
    """A stop from outside after the launcher exited, before the verdict: the job was told to
    stop, so it ends with 143 and no attempt starts after it. Whatever still runs is stopped."""
    attempt = state.current
    if attempt.stopped_on is not None:
        return stay(state)
    attempt = evolve(attempt, stopped_on=event.host, stopped_at=now.wall)
    grace = state.setup.timeouts.sigterm_grace
    said = Log(f"SIGTERM received on {event.host}: stopping every rank; no further attempt")
    return _settled_yet(evolve(state, attempt=attempt), now, (said, TerminateEverywhere(grace)))


def settle_deadline(state: LeaderState, event: object, now: Now) -> Step:
    """Time to look whether output still arrives."""
    attempt = evolve(state.current, settle_check=now.monotonic + SETTLE_CHECK_SECONDS)
    return evolve(state, attempt=attempt), (CheckOutput(),)
