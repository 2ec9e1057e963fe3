"""A worker's pure rules (supervise/following): every (phase, event type) pair decided, and its
invariants over random but possible interleavings of what its ranks and its leader do.

The properties drive `step` alone: the model answers WriteOutcome at once and chooses, at each
step, one thing that can happen next to worker algo-2 of a 3-host job: a message from the
leader (launch, terminate, stacks, restart, the verdict), its ranks starting and ending, its own
launcher exiting (spawned ranks), progress, stacks, SIGTERM, the leader lost, or time passing to
the next deadline.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from ringleader.config.job import Timeouts
from ringleader.core import exitcodes
from ringleader.core.outcome import Outcome
from ringleader.core.records import RankRecord
from ringleader.core.stacks import RankStacks
from ringleader.supervise.eventloop import Now
from ringleader.supervise.following.effects import (
    Deadline,
    Effect,
    OutcomeWritten,
    Send,
    SendProbed,
    StartOwnLauncher,
    TerminateLocal,
    WorkerEvent,
    WriteOutcome,
)
from ringleader.supervise.following.rules import LOCAL_STOP_WITHIN
from ringleader.supervise.following.state import TRANSIENT, Phase, WorkerSetup, WorkerState
from ringleader.supervise.following.table import DECISIONS, step
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
    Ready,
    Restart,
    Sigterm,
    Terminate,
)
from tests.properties import examples
from tests.unit.test_supervise_faults import SPEC

PEERS = (("algo-2", "10.0.2.2"), ("algo-3", "10.0.2.3"))
TIMEOUTS = Timeouts(startup=30, sigterm_grace=5, leader_loss=10, finish=30, abort_grace=0.5)


def test_every_phase_and_event_type_is_decided_once() -> None:
    assert DECISIONS.undecided() == []
    assert all(reason.strip() for reason in DECISIONS.ignored.values())


def test_an_undecided_pair_is_an_error_not_a_silent_drop() -> None:
    @dataclass(frozen=True)
    class Unknown:
        pass

    state = WorkerState(WorkerSetup("algo-2", "algo-1", TIMEOUTS))
    with pytest.raises(LookupError, match="undecided: WAITING x Unknown"):
        step(state, Unknown(), Now(0.0, 0.0))  # type: ignore[arg-type]


@dataclass
class World:
    now: float = 1000.0
    steps: list[str] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)
    attempt: int = 0
    started: set[int] = field(default_factory=set)
    ended: set[int] = field(default_factory=set)
    stopped: bool = False
    verdict: Outcome | None = None  # what the leader sent
    sigterm_at: int | None = None  # the step of the first SIGTERM
    lost_leader: bool = False


class Driver:
    def __init__(self, spawns: bool) -> None:
        self.state = WorkerState(WorkerSetup("algo-2", "algo-1", TIMEOUTS, spawns))
        self.world = World()
        self.inputs: list[tuple[float, WorkerEvent]] = []

    def feed(self, stepped: WorkerEvent) -> None:
        pending = [stepped]
        while pending:
            current = pending.pop(0)
            world = self.world
            self.inputs.append((world.now, current))
            world.steps.append(f"{world.now - 1000:.2f} {self.state.phase.name}: {current}")
            self.state, effects = step(self.state, current, Now(world.now, world.now))
            for effect in effects:
                world.effects.append(effect)
                if isinstance(effect, TerminateLocal):
                    world.stopped = True
                if isinstance(effect, WriteOutcome):
                    pending.append(OutcomeWritten())
            self.check_waits()

    def check_waits(self) -> None:
        """After SIGTERM, after the launch and after the verdict, every wait has a deadline."""
        state = self.state
        if state.phase in TRANSIENT:
            return
        if state.sigterm_deadline is not None or state.phase in (Phase.LAUNCHED, Phase.TOLD):
            assert state.deadline is not None, "\n".join(self.world.steps)

    def pass_time(self) -> None:
        deadline = self.state.deadline
        assert deadline is not None
        self.world.now = max(self.world.now, deadline)
        self.feed(Deadline())


def record(world: World, rank: int, code: int) -> RankRecord:
    return RankRecord(
        rank, "algo-2", code, None, 1000.0, world.now, world.stopped, (), attempt=world.attempt
    )


def possible(driver: Driver) -> Iterator[str]:
    state, world = driver.state, driver.world
    if state.deadline is not None:
        yield "time"
    yield from ("sigterm", "lost", "verdict")
    if state.phase in (Phase.WAITING, Phase.LAUNCHED, Phase.RUNNING, Phase.STOPPING):
        yield from ("launch", "terminate", "dump", "restart", "stacks-asked", "probe-peers")
        if len(world.started) < 2:
            yield "start"
        if world.started - world.ended:
            yield from ("end", "progress", "stacks")
        if state.own_launcher:
            yield "exit"


def act(driver: Driver, kind: str, data: st.DataObject) -> None:
    world = driver.world
    world.now += data.draw(st.sampled_from([0.0, 0.1, 1.0]), label="pause")
    stepped: WorkerEvent
    match kind:
        case "time":
            driver.pass_time()
            return
        case "sigterm":
            world.sigterm_at = len(world.steps) if world.sigterm_at is None else world.sigterm_at
            stepped = SigtermReceived("algo-2")
        case "lost":
            world.lost_leader = True
            stepped = LeaderLost("control connection closed (connection closed)")
        case "verdict":
            code = data.draw(st.sampled_from([0, 3, 75, 143]), label="code")
            world.verdict = Outcome(code, None if code == 0 else f"failed with {code}\n")
            stepped = LeaderMessage(Exit(world.verdict.exit_code, world.verdict.failure))
        case "launch":
            stepped = LeaderMessage(Launched(data.draw(st.sampled_from([None, SPEC]))))
        case "terminate":
            stepped = LeaderMessage(Terminate(0.5))
        case "dump":
            stepped = LeaderMessage(DumpStacks(HANG))
        case "restart":
            world.attempt += 1
            world.started, world.ended, world.stopped = set(), set(), False
            stepped = LeaderMessage(Restart(world.attempt))
        case "stacks-asked":
            stepped = StacksRequested("algo-2")
        case "probe-peers":
            stepped = LeaderMessage(ProbePeers(PEERS))
        case "start":
            rank = 2 if 2 not in world.started else 3
            world.started.add(rank)
            stepped = RankStarted(rank, "algo-2", world.attempt)
        case "end":
            rank = min(world.started - world.ended)
            world.ended.add(rank)
            code = 143 if world.stopped else data.draw(st.sampled_from([0, 3]), label="rank")
            stepped = RankEnded(record(world, rank, code))
        case "progress":
            stepped = RanksProgressed("algo-2", tuple(sorted(world.started - world.ended)))
        case "stacks":
            rank = min(world.started - world.ended)
            stepped = StacksTaken(HANG, RankStacks(rank, "algo-2", world.now))
        case "exit":
            stepped = LauncherExited(data.draw(st.sampled_from([0, 1]), label="launcher"))
        case _:
            raise AssertionError(kind)
    driver.feed(stepped)


def run_worker(data: st.DataObject) -> Driver:
    driver = Driver(spawns=data.draw(st.booleans(), label="spawns"))
    for _ in range(data.draw(st.integers(0, 40), label="events")):
        if driver.state.phase in TRANSIENT:
            break
        act(driver, data.draw(st.sampled_from(list(possible(driver))), label="next"), data)
    for _ in range(20):  # the world ends: the leader leaves, deadlines pass
        if driver.state.phase is Phase.DONE:
            break
        if driver.state.deadline is not None:
            driver.pass_time()
        else:
            driver.world.lost_leader = True
            driver.feed(LeaderLost("control connection closed (connection closed)"))
    assert driver.state.phase is Phase.DONE, "\n".join(driver.world.steps)
    return driver


@settings(max_examples=examples(3000), deadline=None, database=None)
@given(st.data())
def test_every_interleaving_keeps_the_workers_invariants(data: st.DataObject) -> None:
    driver = run_worker(data)
    world, state = driver.world, driver.state
    story = "\n".join(world.steps)
    outcome = state.outcome
    assert outcome is not None, story
    event(f"exit {outcome.exit_code}")
    # the result files are written exactly once, with the outcome the worker exits with
    written = [e.outcome for e in world.effects if isinstance(e, WriteOutcome)]
    assert written == [outcome], story
    # once the leader's verdict is in, it is this host's code whatever happens after
    if state.told is not None:
        assert outcome == state.told, story
    # a stop from outside on this host: 143, unless the leader's verdict came first
    if world.sigterm_at is not None and state.told is None:
        assert outcome.exit_code == exitcodes.SIGTERM_EXIT, story
    # no rank of this host's own launcher starts after a SIGTERM
    if world.sigterm_at is not None:
        later = effects_after(driver, world.sigterm_at)
        assert not any(isinstance(e, StartOwnLauncher) for e in later), story
    # ready is said once per restart, for that restart
    readies = [e.message for e in world.effects if isinstance(e, Send)]
    assert all(m.attempt >= 1 for m in readies if isinstance(m, Ready)), story
    # pair probes run only while waiting for the first launch, never after a SIGTERM
    replayed = WorkerState(state.setup)
    for now, stepped in driver.inputs:
        before = replayed
        replayed, effects = step(replayed, stepped, Now(now, now))
        if any(isinstance(effect, SendProbed) for effect in effects):
            assert before.phase is Phase.WAITING and before.sigterm_deadline is None, story
            assert effects == (SendProbed(PEERS),), story
    # the same inputs give the same state
    replayed = WorkerState(state.setup)
    for now, stepped in driver.inputs:
        replayed, _ = step(replayed, stepped, Now(now, now))
    assert replayed == state, story


def effects_after(driver: Driver, index: int) -> list[Effect]:
    """The effects of the steps after step `index` (replayed: the steps' effects in order)."""
    state = WorkerState(driver.state.setup)
    found: list[Effect] = []
    for number, (now, stepped) in enumerate(driver.inputs):
        state, effects = step(state, stepped, Now(now, now))
        if number > index:
            found.extend(effects)
    return found


def test_a_worker_waits_without_a_deadline_only_for_the_launch_or_while_ranks_run() -> None:
    """Waiting for the launch and while its ranks run, a worker relies on the pulses to learn
    that the leader is gone (LeaderLost); everywhere else it has a deadline."""
    state = WorkerState(WorkerSetup("algo-2", "algo-1", TIMEOUTS))
    assert state.deadline is None and state.phase is Phase.WAITING
    launched, _ = step(state, LeaderMessage(Launched()), Now(1000.0, 1000.0))
    assert launched.deadline == 1000.0 + TIMEOUTS.startup
    told, effects = step(launched, SigtermReceived("algo-2"), Now(1001.0, 1001.0))
    assert Send(Sigterm("algo-2")) in effects
    assert not any(isinstance(effect, TerminateLocal) for effect in effects)
    assert told.deadline == 1001.0 + LOCAL_STOP_WITHIN  # for the leader's stop
    stopped, effects = step(told, Deadline(), Now(1002.0, 1002.0))
    assert stopped.deadline is not None and TerminateLocal(TIMEOUTS.sigterm_grace) in effects


def test_after_sigterm_the_leaders_stop_stops_the_ranks_here_with_everyone_elses() -> None:
    """SIGTERM on this host: the ranks here stop when the leader's stop comes (it reaches
    every host at once), with its grace; no stop of their own follows."""
    state = WorkerState(WorkerSetup("algo-2", "algo-1", TIMEOUTS))
    launched, _ = step(state, LeaderMessage(Launched()), Now(1000.0, 1000.0))
    told, _ = step(launched, SigtermReceived("algo-2"), Now(1001.0, 1001.0))
    grace = TIMEOUTS.sigterm_grace
    stopped, effects = step(told, LeaderMessage(Terminate(grace)), Now(1001.1, 1001.1))
    assert effects == (TerminateLocal(grace),)
    assert stopped.local_stop_deadline is None and stopped.phase is Phase.STOPPING
    later, effects = step(stopped, Deadline(), Now(1002.5, 1002.5))
    assert not any(isinstance(effect, TerminateLocal) for effect in effects)
    assert later.phase is Phase.STOPPING
