"""Running: ranks start and end, launchers exit, hosts are lost, SIGTERM arrives; who is
stopped when, and when the launcher is killed.

Failure-model rows: a rank fails (every other rank stopped at once, abort grace), MPI_Abort's
bystanders never start a stop, parameter servers are stopped once every main task ended, SIGTERM
from outside (every rank stopped, sigterm grace, then the launcher killed), a host lost (every
rank stopped, the launcher killed after the abort grace), ranks that never start (69, the
hosts named), a launcher that outlives its ranks (killed after ringleader_launcher_exit_timeout).
"""

from ringleader.core.frozen import evolve
from ringleader.core.outcome import blames_another_rank
from ringleader.core.records import RankRecord
from ringleader.supervise.common import KILL_MARGIN_SECONDS
from ringleader.supervise.eventloop import Now
from ringleader.supervise.leading.effects import Effect, KillLauncher, Log
from ringleader.supervise.leading.hang_watch import complete_stacks, quiet
from ringleader.supervise.leading.state import Attempt, LeaderState, Phase
from ringleader.supervise.leading.status import say_status, status_due
from ringleader.supervise.leading.steps import (
    STOP_KILL_MARGIN_SECONDS,
    Step,
    record_loss,
    stay,
    terminate_everywhere,
)
from ringleader.wire.events import (
    LauncherExited,
    RankEnded,
    RanksExited,
    RankStarted,
    SigtermReceived,
    WorkerLost,
)


def rank_started(state: LeaderState, event: RankStarted, now: Now) -> Step:
    """Once every rank started, the launch deadline is gone."""
    attempt = state.current
    if event.attempt != attempt.number:
        return stay(state)  # stale: a rank of an earlier attempt
    started = attempt.started.set(event.rank, event.host)
    if len(started) < state.world_size:
        return evolve(state, attempt=evolve(attempt, started=started)), ()
    attempt = evolve(attempt, started=started, launch_deadline=None)
    phase = Phase.RUNNING if state.phase is Phase.LAUNCHING else state.phase
    return evolve(state, phase=phase, attempt=attempt), ()


def rank_ended(state: LeaderState, event: RankEnded, now: Now) -> Step:
    """A rank's record, on the leader's clock. A failure stops the others; the end of every
    main task stops the rest; the end of every rank leaves the launcher a deadline."""
    attempt = state.current
    if event.record.attempt != attempt.number:
        return stay(state)
    record = event.record.on_clock(state.clock_offsets.get(event.record.host, 0.0))
    attempt = evolve(attempt, records=attempt.records.set(record.rank, record))
    state, attempt, effects, stopping = _abort_after(state, attempt, record)
    main_ranks = attempt.policy.main_ranks
    if main_ranks is not None:
        state, attempt, released_effects, released = _release_after(state, attempt, main_ranks)
        effects += released_effects
        stopping = stopping or released
    timeouts = state.setup.timeouts
    if stopping:
        attempt = attempt.stop_launcher_by(
            now.monotonic + timeouts.abort_grace + STOP_KILL_MARGIN_SECONDS
        )
    if len(attempt.records) >= state.world_size:
        if attempt.policy.launcher_holds_every_rank and attempt.kill_deadline is not None:
            attempt = evolve(attempt, kill_deadline=now.monotonic)  # nothing left in mpirun
        elif attempt.kill_deadline is None:
            # every rank ended by itself: a launcher that hangs on (a wedged MPI daemon) gets
            # ringleader_launcher_exit_timeout, then is killed
            attempt = evolve(attempt, kill_deadline=now.monotonic + timeouts.launcher_exit)
    return evolve(state, attempt=attempt), tuple(effects)


def _abort_after(
    state: LeaderState, attempt: Attempt, record: RankRecord
) -> tuple[LeaderState, Attempt, list[Effect], bool]:
    """A rank failed on its own: stop every other rank (abort grace), once.

    Under mpirun, not after a failure that blames another rank (Horovod shut down, ...): the
    rank that failed first may still be in MPI_Abort, and a stop from us would kill it before
    mpirun reports its code; mpirun's own abort follows such a failure anyway."""
    policy = attempt.policy
    if not policy.rank_failure_stops_all or not record.failed or record.terminated:
        return state, attempt, [], False
    if attempt.aborted or (policy.blamed_ranks_start_no_stop and blames_another_rank(record)):
        return state, attempt, [], False
    attempt = evolve(attempt, aborted=True)
    if attempt.stopped_on is None and not attempt.lost:
        stopping = Log(f"{record.describe()}: stopping every other rank")
        state, effects = terminate_everywhere(
            state, attempt, state.setup.timeouts.abort_grace, (stopping,)
        )
        return state, attempt, list(effects), True
    return state, attempt, [], True


def _release_after(
    state: LeaderState, attempt: Attempt, main_ranks: frozenset[int]
) -> tuple[LeaderState, Attempt, list[Effect], bool]:
    """TensorFlow: once every main task (master/chief, or all mirrored workers) has ended, stop
    what still runs (parameter servers, never ending on their own), once."""
    if attempt.released is not None or not all(rank in attempt.records for rank in main_ranks):
        return state, attempt, [], False
    released = frozenset(rank for rank in attempt.started if rank not in attempt.records)
    attempt = evolve(attempt, released=released)
    if released and attempt.stopped_on is None and not attempt.aborted and not attempt.lost:
        roles = ", ".join(sorted(str(rank) for rank in released))
        stopping = Log(f"every main task ended: stopping the rest (ranks {roles})")
        state, effects = terminate_everywhere(
            state, attempt, state.setup.timeouts.abort_grace, (stopping,)
        )
        return state, attempt, list(effects), True
    return evolve(state, attempt=attempt), attempt, [], bool(released)


def sigterm(state: LeaderState, event: SigtermReceived, now: Now) -> Step:
    """A stop from outside: every rank gets SIGTERM and the sigterm grace, the launcher is
    killed after it; the verdict will be 143 unless a hang or a loss came first."""
    attempt = state.current
    if attempt.stopped_on is not None:
        return stay(state)
    grace = state.setup.timeouts.sigterm_grace
    attempt = evolve(attempt, stopped_on=event.host, stopped_at=now.wall)
    attempt = attempt.stop_launcher_by(now.monotonic + grace + KILL_MARGIN_SECONDS)
    stopping = Log(f"SIGTERM received on {event.host}: stopping every rank")
    return terminate_everywhere(state, attempt, grace, (stopping,))


def worker_lost(state: LeaderState, event: WorkerLost, now: Now) -> Step:
    """A host lost: the first loss stops every rank (unless a stop is under way); the launcher
    is killed after the abort grace."""
    noted = record_loss(state, state.current, event)
    if noted is None:
        return stay(state)
    state, attempt, effects = noted
    grace = state.setup.timeouts.abort_grace
    attempt = evolve(attempt, launch_deadline=None).stop_launcher_by(
        now.monotonic + grace + STOP_KILL_MARGIN_SECONDS
    )
    if attempt.stopped_on is None and len(attempt.lost) == 1:
        return terminate_everywhere(state, attempt, grace, effects)
    return evolve(state, attempt=attempt), effects


def launcher_exited(state: LeaderState, event: LauncherExited, now: Now) -> Step:
    attempt = state.current
    attempt = evolve(attempt, exited=(*attempt.exited, (state.setup.host, event.exit_code)))
    return evolve(state, attempt=attempt), (Log(f"launcher exited with code {event.exit_code}"),)


def ranks_exited(state: LeaderState, event: RanksExited, now: Now) -> Step:
    """A worker's own launcher (spawned ranks) exited."""
    attempt = state.current
    if event.host not in attempt.policy.other_launchers:
        return stay(state)
    attempt = evolve(attempt, exited=(*attempt.exited, (event.host, event.exit_code)))
    return evolve(state, attempt=attempt), ()


def deadline(state: LeaderState, event: object, now: Now) -> Step:
    """Whatever is due first: the stacks' wait, the hang watch, the launcher's kill, the
    launch's deadline, the status line."""
    attempt = state.current
    at = now.monotonic
    if attempt.dump is not None and at >= attempt.dump.deadline:
        return complete_stacks(state, now)
    if attempt.hang_deadline is not None and at >= attempt.hang_deadline:
        return quiet(state, now)
    if attempt.kill_deadline is not None and at >= attempt.kill_deadline:
        if len(attempt.records) >= state.world_size:
            attempt = evolve(attempt, launcher_outlived_ranks=True)
            name = attempt.policy.launcher_name
            why = Log(f"every rank has ended; killing {name}, still running")
        else:
            why = Log("ranks did not end within their grace period; killing the launcher")
        attempt = evolve(attempt, kill_deadline=None)
        return evolve(state, attempt=attempt), (why, KillLauncher())
    if attempt.launch_deadline is not None and at >= attempt.launch_deadline:
        error = _missing_ranks_message(state, attempt)
        attempt = evolve(attempt, startup_error=error, launch_deadline=None)
        return evolve(state, attempt=attempt), (Log(error), KillLauncher())
    if status_due(attempt, now):
        return say_status(state, now)
    return stay(state)


def _missing_ranks_message(state: LeaderState, attempt: Attempt) -> str:
    hosts = state.setup.hosts
    per_host = state.world_size // len(hosts)
    counts = {host: 0 for host in hosts}
    for host in attempt.started.values():
        counts[host] = counts.get(host, 0) + 1
    missing = [host for host in hosts if counts[host] < per_host]
    return (
        f"Only {len(attempt.started)} of {state.world_size} ranks started within "
        f"{state.setup.timeouts.startup:g} s (ringleader_startup_timeout); no MPI daemon "
        f"or rank came up on: {', '.join(missing) or 'unknown hosts'}."
    )


def every_launcher_exited(state: LeaderState) -> bool:
    attempt = state.current
    exited = {host for host, _ in attempt.exited}
    return state.setup.host in exited and attempt.policy.other_launchers <= (
        exited | attempt.lost_hosts
    )
