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


def watch_from_launch(state: LeaderState, attempt: Attempt, now: Now) -> Attempt:
    """The hang watch starts with the launch: a job can hang as it starts (ranks that never
    meet). Until every rank made progress the job is still starting (frameworks import, ranks
    meet, one host slower than the rest on a busy machine): no verdict before the startup
    timeout has passed since the launch, when that is the longer."""
    timeouts = state.setup.timeouts
    assert timeouts.hang is not None
    starting_until = None
    if timeouts.startup > timeouts.hang:
        starting_until = now.monotonic + timeouts.startup
    attempt = evolve(attempt, starting_until=starting_until, hang_patience=timeouts.hang)
    return evolve(attempt, hang_deadline=_quiet_deadline(attempt, timeouts.hang, now))


def _quiet_deadline(attempt: Attempt, hang: float, now: Now) -> float:
    deadline = now.monotonic + hang
    if attempt.starting_until is None:
        return deadline
    return max(deadline, attempt.starting_until)


def progressed(state: LeaderState, event: RanksProgressed, now: Now) -> Step:
    """Progress moves the hang deadline; each rank's latest progress is kept for the report,
    its step for the status line, its wait samples for the straggler watch (a report of only
    those is no progress). The start-up window closes once every rank made
    progress, or when it ends."""
    attempt = state.current
    if event.waits:
        attempt = evolve(attempt, waits=attempt.waits.update((c.rank, c) for c in event.waits))
    if not event.ranks:  # only wait samples: no rank moved
        return evolve(state, attempt=attempt), ()
    progress = attempt.progress.update(
        (rank, LastProgress(rank, event.host, now.wall)) for rank in event.ranks
    )
    starting_until = attempt.starting_until
    if starting_until is not None and (
        len(progress) >= state.world_size or now.monotonic >= starting_until
    ):
        starting_until = None
    steps = attempt.steps.update((step.rank, step) for step in event.steps)
    attempt = evolve(attempt, progress=progress, starting_until=starting_until, steps=steps)
    hang = state.setup.timeouts.hang
    if attempt.hang_deadline is not None and hang is not None:
        attempt = evolve(attempt, hang_deadline=_quiet_deadline(attempt, hang, now))
    return evolve(state, attempt=attempt), ()


def quiet(state: LeaderState, now: Now) -> Step:
    """No progress reported for ringleader_hang_timeout (and the start-up window over): the job
    hung.

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
    how_long = quiet_for(state, attempt, now)
    said = Log(f"{how_long}: taking every rank's stacks")
    return _dump_stacks(state, HANG, now, (said,), how_long)


def quiet_for(state: LeaderState, attempt: Attempt, now: Now) -> str:
    """How long the job was quiet when the hang watch fired, and the setting that allowed it:
    the hang timeout; the startup timeout while no rank had made progress; both when some
    ranks had made progress but others had not by the end of the start-up window."""
    timeouts = state.setup.timeouts
    assert timeouts.hang is not None
    hang = f"no rank made progress for {timeouts.hang:g} s (ringleader_hang_timeout)"
    if attempt.starting_until is None:
        return hang
    if not attempt.progress:
        return f"no rank made progress for {timeouts.startup:g} s (ringleader_startup_timeout)"
    silent = [
        rank
        for rank in range(state.world_size)
        if rank not in attempt.progress and rank not in attempt.records
    ]
    if not silent:
        return hang
    latest = max(each.at for each in attempt.progress.values())
    return (
        f"no rank made progress for {max(now.wall - latest, 0):.0f} s, and "
        f"{_ranks(silent)} none in the {timeouts.startup:g} s since the launch "
        "(ringleader_startup_timeout)"
    )


def _ranks(ranks: list[int]) -> str:
    shown = ", ".join(str(rank) for rank in ranks[:8])
    more = f" and {len(ranks) - 8} more" if len(ranks) > 8 else ""
    return f"rank{'s' if len(ranks) > 1 else ''} {shown}{more}"


def stacks_requested(state: LeaderState, event: StacksRequested, now: Now) -> Step:
    said = Log(f"SIGQUIT on {event.host}: taking every rank's stacks")
    return _dump_stacks(state, ON_DEMAND, now, (said,))


def _dump_stacks(
    state: LeaderState, reason: str, now: Now, effects: tuple[Effect, ...], quiet: str = ""
) -> Step:
    """Ask every running rank for its stacks (a hang's request replaces one on demand)."""
    attempt = state.current
    dump = attempt.dump
    if dump is not None and (dump.reason == HANG or reason == ON_DEMAND):
        return state, effects
    running = PMap(
        (rank, host) for rank, host in attempt.started.items() if rank not in attempt.records
    )
    dump = StackDump(reason, now.monotonic + state.setup.timeouts.stack_dump, running, quiet=quiet)
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
        headline = hang_headline(stacks, missing, progress, dump.quiet, now.wall)
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
