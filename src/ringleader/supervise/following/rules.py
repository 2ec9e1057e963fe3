"""A worker's rules: relay what its ranks do, obey the leader, end with the job's code.

The worker keeps its sshd (and so mpirun's daemon) alive until the leader sends the job's exit
code; it gives up when the leader goes away or silent (pulses), or never launches.

Failure-model rows: the leader's verdict is every host's (files first, then the bye, then the
leader leaves first); the leader lost (75, named, this host's ranks stopped); SIGTERM on a
worker (its ranks stopped, the leader told, 143 when the leader does not confirm in time);
ranks that never start here (69); a restart in place (this host's ranks reaped, then ready);
spawned ranks whose launcher outlasts their grace (killed).
"""

from ringleader.core import exitcodes
from ringleader.core import timeline as phases
from ringleader.core.frozen import evolve
from ringleader.core.outcome import Outcome, truncate
from ringleader.core.timeline import Mark
from ringleader.supervise.common import KILL_MARGIN_SECONDS
from ringleader.supervise.eventloop import Now
from ringleader.supervise.following.effects import (
    BeginAttempt,
    DumpLocalStacks,
    Effect,
    KeepStacks,
    KillOwnLauncher,
    Log,
    ReapLocal,
    Send,
    SendProbed,
    SendReady,
    StartOwnLauncher,
    TerminateLocal,
    WriteOutcome,
)
from ringleader.supervise.following.state import Phase, WorkerState
from ringleader.wire.control import bye_message
from ringleader.wire.events import (
    LauncherExited,
    LeaderLost,
    LeaderMessage,
    RankEnded,
    RanksProgressed,
    RankStarted,
    SigtermReceived,
    StacksRequested,
    StacksTaken,
)
from ringleader.wire.messages import (
    HANG,
    DumpStacks,
    Exit,
    Launched,
    ProbePeers,
    Progress,
    RankEnd,
    RanksExit,
    RankStart,
    Restart,
    Sigterm,
    Stacks,
    StacksWanted,
    Terminate,
)

# After SIGTERM, how long this host's ranks wait for the leader's stop (which reaches every
# host at once) before they stop on their own: a round trip, seconds on a starved machine.
LOCAL_STOP_WITHIN = 1.0

Step = tuple[WorkerState, tuple[Effect, ...]]


def stay(state: WorkerState) -> Step:
    return state, ()


def _end(state: WorkerState, outcome: Outcome, effects: tuple[Effect, ...]) -> Step:
    """The outcome without the leader's verdict: this host's own launcher goes, the result
    files are written (answered by OutcomeWritten), and run() ends."""
    kill = (KillOwnLauncher(),) if state.own_launcher else ()
    ended = evolve(state, phase=Phase.ENDED, outcome=outcome)
    return ended, (*effects, *kill, WriteOutcome(outcome))


def _problem(state: WorkerState, code: int, problem: str) -> Outcome:
    return Outcome(code, truncate(f"Host {state.setup.host}: {problem}."))


def overdue_kill(state: WorkerState, now: Now) -> Step:
    """This host's own launcher outlasted its ranks' grace: killed (checked before every
    event, as a busy worker may notice the deadline late)."""
    if state.kill_deadline is None or now.monotonic < state.kill_deadline:
        return stay(state)
    said = Log("ranks did not end within their grace period; killing them")
    return evolve(state, kill_deadline=None), (said, KillOwnLauncher())


# --------------------------------------------------------------------------- relaying
def rank_started(state: WorkerState, event: RankStarted, now: Now) -> Step:
    phase = Phase.RUNNING if state.phase in (Phase.WAITING, Phase.LAUNCHED) else state.phase
    state = evolve(state, rank_deadline=None, phase=phase)
    return state, (Send(RankStart(event.rank, event.host, attempt=event.attempt)),)


def rank_ended(state: WorkerState, event: RankEnded, now: Now) -> Step:
    return state, (Send(RankEnd(event.record)),)


def launcher_exited(state: WorkerState, event: LauncherExited, now: Now) -> Step:
    said = Send(RanksExit(state.setup.host, event.exit_code))
    return evolve(state, kill_deadline=None), (said,)


def progressed(state: WorkerState, event: RanksProgressed, now: Now) -> Step:
    return state, (Send(Progress(event.host, event.ranks, event.steps, event.waits)),)


def stacks_taken(state: WorkerState, event: StacksTaken, now: Now) -> Step:
    """A rank's stacks go to the leader; after a hang, a copy stays on this host."""
    kept: tuple[Effect, ...] = (KeepStacks(event.stacks),) if event.reason == HANG else ()
    return state, (*kept, Send(Stacks(event.reason, event.stacks)))


def stacks_requested(state: WorkerState, event: StacksRequested, now: Now) -> Step:
    return state, (Send(StacksWanted(state.setup.host)),)


# --------------------------------------------------------------------------- stopping
def _stop_ranks(state: WorkerState, grace: float, now: Now) -> Step:
    """Stop the local ranks; this host's own launcher is killed if they outlast `grace`. A rank
    still to start no longer matters (the stop's cause is the verdict's, not "never started")."""
    phase = state.phase if state.phase is Phase.TOLD else Phase.STOPPING
    kill = state.kill_deadline
    if state.own_launcher and kill is None:
        kill = now.monotonic + grace + KILL_MARGIN_SECONDS
    stopped = evolve(
        state, phase=phase, kill_deadline=kill, rank_deadline=None, local_stop_deadline=None
    )
    return stopped, (TerminateLocal(grace),)


def sigterm(state: WorkerState, event: SigtermReceived, now: Now) -> Step:
    """Tell the leader, whose stop reaches every host's ranks at once, and wait (bounded) for
    its verdict. This host's ranks stop with the others: had they stopped first, a rank ending
    on its SIGTERM could abort the MPI job (mpi4py's `-m mpi4py` does) and Open MPI would kill
    the ranks elsewhere before the stop reached them (ci25). Without the leader's stop within
    LOCAL_STOP_WITHIN they stop on their own."""
    if state.sigterm_deadline is not None:
        return stay(state)  # stopping already: Slurm signals both a step's task and children
    timeouts = state.setup.timeouts
    said = Log("SIGTERM received: telling the leader, which stops every rank at once")
    deadline = now.monotonic + timeouts.sigterm_grace + timeouts.finish
    local_stop = None if state.phase is Phase.STOPPING else now.monotonic + LOCAL_STOP_WITHIN
    state = evolve(state, sigterm_deadline=deadline, local_stop_deadline=local_stop)
    return state, (said, Send(Sigterm(state.setup.host)))


def leader_lost(state: WorkerState, event: LeaderLost, now: Now) -> Step:
    """The leader went away or silent: this host's ranks are stopped and reaped; 75, naming
    the leader (143 when a SIGTERM had stopped the job here first)."""
    grace = state.setup.timeouts.abort_grace
    if state.local_stop_deadline is not None:  # SIGTERM came before the stop could
        grace = state.setup.timeouts.sigterm_grace
    effects = (TerminateLocal(grace), ReapLocal(grace))
    if state.sigterm_deadline is not None:
        problem = f"stopped by SIGTERM; then lost the leader {state.setup.leader}: {event.reason}"
        return _end(state, _problem(state, exitcodes.SIGTERM_EXIT, problem), effects)
    headline = (
        f"Host {state.setup.leader} (the leader): {event.reason}; "
        f"noticed by {state.setup.host}, which stopped its ranks."
    )
    return _end(state, Outcome(exitcodes.HOST_LOST, truncate(headline)), effects)


def deadline(state: WorkerState, event: object, now: Now) -> Step:
    """No stop from the leader soon after SIGTERM (the ranks here stop on their own), no
    verdict in time after it (143), or no rank after the launch (69)."""
    at = now.monotonic
    if state.local_stop_deadline is not None and at >= state.local_stop_deadline:
        said = Log(
            f"no stop from the leader within {LOCAL_STOP_WITHIN:g} s of SIGTERM: "
            "stopping local ranks"
        )
        state, stopping = _stop_ranks(state, state.setup.timeouts.sigterm_grace, now)
        return state, (said, *stopping)
    sigterm_due = state.sigterm_deadline is not None and at >= state.sigterm_deadline
    rank_due = state.rank_deadline is not None and at >= state.rank_deadline
    if not (sigterm_due or rank_due):
        return stay(state)
    stopping = (TerminateLocal(state.setup.timeouts.abort_grace),)
    if sigterm_due:
        problem = "stopped by SIGTERM; the leader did not confirm the job's end in time"
        return _end(state, _problem(state, exitcodes.SIGTERM_EXIT, problem), stopping)
    problem = (
        f"the MPI daemon never started a rank on {state.setup.host} within "
        f"{state.setup.timeouts.startup:g} s of the launch (ringleader_startup_timeout)"
    )
    return _end(state, _problem(state, exitcodes.HOST_UNREACHABLE, problem), stopping)


# --------------------------------------------------------------------------- the leader says
def leader_message(state: WorkerState, event: LeaderMessage, now: Now) -> Step:
    match event.message:
        case Terminate(grace=grace):
            return _stop_ranks(state, grace, now)
        case DumpStacks(reason=reason):
            return state, (DumpLocalStacks(reason),)
        case Launched() as launched:
            return _launched(state, launched, now)
        case Restart(attempt=attempt):
            return _restart(state, attempt)
        case ProbePeers(peers=peers):
            return _probe_peers(state, peers)
        case Exit(code=code, failure=failure):
            return _verdict(state, Outcome(code, failure), now)
    return stay(state)  # what only a leader receives


def _launched(state: WorkerState, message: Launched, now: Now) -> Step:
    """The launch: spawned ranks start here from the leader's spec (not after a SIGTERM: a
    restart crossed the stop); the first rank must start within ringleader_startup_timeout."""
    effects: tuple[Effect, ...] = ()
    spec = message.spawn
    if (
        spec is not None
        and state.setup.spawns
        and not state.own_launcher
        and state.sigterm_deadline is None
        and state.setup.host in spec.launching_hosts
    ):
        state, effects = evolve(state, own_launcher=True), (StartOwnLauncher(spec),)
    if state.phase is Phase.WAITING:
        deadline = now.monotonic + state.setup.timeouts.startup
        state = evolve(state, phase=Phase.LAUNCHED, rank_deadline=deadline)
    return state, effects


def _probe_peers(state: WorkerState, peers: tuple[tuple[str, str], ...]) -> Step:
    """Before the first launch, this host's share of the pair probes, then their report (a
    stop from SIGTERM waits for the leader's verdict: the probes' report changes nothing)."""
    if state.phase is not Phase.WAITING or state.sigterm_deadline is not None:
        return stay(state)
    return state, (SendProbed(peers),)


def _restart(state: WorkerState, attempt: int) -> Step:
    """The job's ranks start again: this host's of the last attempt end (they were told to
    stop, bounded by their grace), then the leader hears that the host is ready."""
    effects: list[Effect] = [ReapLocal(state.setup.timeouts.abort_grace)]
    if state.own_launcher:
        effects.append(KillOwnLauncher())  # it exited already: the leader waited for that
    state = evolve(state, own_launcher=False, kill_deadline=None, rank_deadline=None)
    if state.sigterm_deadline is None:
        effects.append(BeginAttempt())
        state = evolve(state, phase=Phase.WAITING)
    # else stopped by SIGTERM: the stop stays, so a rank the next launch starts here anyway
    # (mpirun's daemon) is stopped at once; the leader ends the job with 143
    effects += [Log(f"ready for attempt {attempt}"), SendReady(attempt)]
    return state, tuple(effects)


def _verdict(state: WorkerState, outcome: Outcome, now: Now) -> Step:
    """Files first (answered by OutcomeWritten), then the bye, then the leader leaves first."""
    grace = state.setup.timeouts.abort_grace
    state = evolve(state, phase=Phase.WRITING, told=outcome, verdict_received=now.wall)
    return state, (ReapLocal(grace), WriteOutcome(outcome))


def verdict_written(state: WorkerState, event: object, now: Now) -> Step:
    host = state.setup.host
    marks = (
        Mark(host, phases.VERDICT_RECEIVED, state.verdict_received),
        Mark(host, phases.EXITED, now.wall),
    )
    timeouts = state.setup.timeouts
    leave = now.monotonic + timeouts.finish + timeouts.leader_loss
    told = evolve(state, phase=Phase.TOLD, leave_deadline=leave)
    return told, (Send(bye_message(host, marks)),)


def outcome_written(state: WorkerState, event: object, now: Now) -> Step:
    return evolve(state, phase=Phase.DONE), ()


def leader_left(state: WorkerState, event: object, now: Now) -> Step:
    """After the bye: the leader closed the connection as it exited, or the bounded wait for
    that ended. This host's own launcher goes with the job, always."""
    if isinstance(event, LeaderLost) or (
        state.leave_deadline is not None and now.monotonic >= state.leave_deadline
    ):
        kill = (KillOwnLauncher(),) if state.own_launcher else ()
        return evolve(state, phase=Phase.DONE, outcome=state.told), kill
    return stay(state)
