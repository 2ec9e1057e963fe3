"""The hang watch and every rank's stacks.

Failure-model rows: no rank makes progress for ringleader_hang_timeout (every rank's stacks
taken, then 124 naming where the ranks wait, every rank stopped), a starved leader's late timer
(the lost time given back, once at most), SIGQUIT on any host (every rank's stacks shown, the
job goes on).
"""

from ringleader.core.frozen import evolve
from ringleader.core.hang import HangReport, LastProgress, MissingStacks, hang_headline
from ringleader.core.outcome import Hang
from ringleader.core.pmap import PMap
from ringleader.supervise.eventloop import Now
from ringleader.supervise.leading.effects import Effect, KeepStacks, Log, RequestStacks
from ringleader.supervise.leading.state import Attempt, LeaderState, StackDump
from ringleader.supervise.leading.steps import (
    STOP_KILL_MARGIN_SECONDS,
    Step,
    stay,
    terminate_everywhere,
)
from ringleader.wire.events import RanksProgressed, StacksRequested, StacksTaken
from ringleader.wire.messages import HANG, ON_DEMAND

# A deadline noticed later than this after it passed: the leader was starved of CPU meanwhile.
LATE_TIMER_SECONDS = 1.0


def quiet_limit(state: LeaderState, attempt: Attempt) -> tuple[float, str]:
    """How long no progress may last, and the setting that says so. Until some rank made
    progress the job is still starting (frameworks import, ranks meet): the startup timeout
    when it is the longer, so a slow start on a busy machine is not a hang."""
    timeouts = state.setup.timeouts
    assert timeouts.hang is not None
    if not attempt.progress and timeouts.startup > timeouts.hang:
        return timeouts.startup, "ringleader_startup_timeout"
    return timeouts.hang, "ringleader_hang_timeout"


def progressed(state: LeaderState, event: RanksProgressed, now: Now) -> Step:
    """Progress moves the hang deadline; each rank's latest progress is kept for the report."""
    attempt = state.current
    progress = attempt.progress.update(
        (rank, LastProgress(rank, event.host, now.wall)) for rank in event.ranks
    )
    attempt = evolve(attempt, progress=progress)
    hang = state.setup.timeouts.hang
    if attempt.hang_deadline is not None and hang is not None:
        attempt = evolve(attempt, hang_deadline=now.monotonic + hang)
    return evolve(state, attempt=attempt), ()


def quiet(state: LeaderState, now: Now) -> Step:
    """No progress reported for ringleader_hang_timeout: the job hung.

    Output reaching the leader is not progress by itself: Horovod's stall inspector repeats its
    warning while the job hangs. A leader behind on output still takes each host's progress
    reports, which travel with that host's output, in turn."""
    attempt = state.current
    timeout = state.setup.timeouts.hang
    assert timeout is not None and attempt.hang_deadline is not None
    late = now.monotonic - attempt.hang_deadline
    if late > LATE_TIMER_SECONDS and not attempt.ending and attempt.hang_patience > 0:
        # This timer ran late: the leader itself was starved, and the threads that read the
        # workers' reports with it. Give them the time it lost (at most one timeout in all).
        extra = min(late, attempt.hang_patience)
        attempt = evolve(
            attempt,
            hang_patience=attempt.hang_patience - extra,
            hang_deadline=now.monotonic + extra,
        )
        return evolve(state, attempt=attempt), ()
    state = evolve(state, attempt=evolve(attempt, hang_deadline=None))
    if attempt.ending:
        return stay(state)
    waited, setting = quiet_limit(state, attempt)
    said = Log(f"no rank made progress for {waited:g} s ({setting}): taking every rank's stacks")
    return _dump_stacks(state, HANG, now, (said,))


def stacks_requested(state: LeaderState, event: StacksRequested, now: Now) -> Step:
    said = Log(f"SIGQUIT on {event.host}: taking every rank's stacks")
    return _dump_stacks(state, ON_DEMAND, now, (said,))


def _dump_stacks(state: LeaderState, reason: str, now: Now, effects: tuple[Effect, ...]) -> Step:
    """Ask every running rank for its stacks (a hang's request replaces one on demand)."""
    attempt = state.current
    dump = attempt.dump
    if dump is not None and (dump.reason == HANG or reason == ON_DEMAND):
        return state, effects
    running = PMap(
        (rank, host) for rank, host in attempt.started.items() if rank not in attempt.records
    )
    dump = StackDump(reason, now.monotonic + state.setup.timeouts.stack_dump, running)
    state = evolve(state, attempt=evolve(attempt, dump=dump))
    effects = (*effects, RequestStacks(reason))
    if not running:
        state, more = complete_stacks(state, now)
        effects = (*effects, *more)
    return state, effects


def stacks_taken(state: LeaderState, event: StacksTaken, now: Now) -> Step:
    attempt = state.current
    dump = attempt.dump
    if dump is None or event.reason != dump.reason:
        return stay(state)  # late, for a request already answered
    stacks = event.stacks
    offset = state.clock_offsets.get(stacks.host, 0.0)
    taken = evolve(stacks, taken_at=stacks.taken_at + offset)
    dump = evolve(dump, stacks=dump.stacks.set(stacks.rank, taken))
    state = evolve(state, attempt=evolve(attempt, dump=dump))
    if all(rank in dump.stacks or rank in attempt.records for rank in dump.expected):
        return complete_stacks(state, now)
    return stay(state)


def complete_stacks(state: LeaderState, now: Now, job_ended: bool = False) -> Step:
    """Every rank's stacks arrived, or ringleader_stack_dump_timeout passed (or the job ended):
    show them; after a hang, the verdict, and every rank is stopped."""
    attempt = state.current
    dump = attempt.dump
    assert dump is not None
    attempt = evolve(attempt, dump=None)
    missing = tuple(
        MissingStacks(rank, host, _why_no_stacks(state, attempt, rank, host))
        for rank, host in sorted(dump.expected.items())
        if rank not in dump.stacks
    )
    stacks = tuple(dump.stacks[rank] for rank in sorted(dump.stacks))
    progress = tuple(attempt.progress[rank] for rank in sorted(attempt.progress))
    timeout = state.setup.timeouts.hang or 0.0
    if dump.reason == HANG:
        waited, setting = quiet_limit(state, attempt)
        headline = hang_headline(stacks, missing, progress, waited, now.wall, setting)
    else:
        headline = f"Every rank's stacks, {len(stacks)} of {len(dump.expected)} taken."
    report = HangReport(dump.reason, timeout, now.wall, headline, stacks, missing, progress)
    kept = KeepStacks(report)
    if dump.reason != HANG or attempt.ending or job_ended:
        return evolve(state, attempt=attempt), (kept,)
    attempt = evolve(attempt, hang=Hang(headline, tuple(report.summary_lines()[1:]), now.wall))
    grace = state.setup.timeouts.abort_grace
    attempt = attempt.stop_launcher_by(now.monotonic + grace + STOP_KILL_MARGIN_SECONDS)
    return terminate_everywhere(state, attempt, grace, (kept, Log(f"the job hung: {headline}")))


def _why_no_stacks(state: LeaderState, attempt: Attempt, rank: int, host: str) -> str:
    if rank in attempt.records:
        return f"it ended ({attempt.records[rank].describe()}) before its stacks were taken"
    loss = attempt.loss_of(host)
    if loss is not None:
        return f"its host was lost ({loss.reason})"
    return (
        f"they did not arrive within {state.setup.timeouts.stack_dump:g} s "
        "(ringleader_stack_dump_timeout)"
    )
