"""The leader's pure rules (supervise/leading): every (phase, event type) pair decided, and the
failure model's invariants over random but possible interleavings of a job's events.

The properties drive `step` alone, with no thread, queue or clock: a small model of a job of 3
hosts x 2 ranks answers the effects (the launch plan, the started launcher, the output count,
the reaped attempt) and chooses, at every step, one thing that can happen next: a hello, an ssh
check's end, a rank starting or ending with any code, the launcher exiting, a worker lost,
SIGTERM on any host, progress, stacks, a worker ready for a restart, a bye, or time passing to
the next deadline. A failing sequence is printed as the list of its steps.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ringleader.config.job import (
    PAIRS_ALL,
    PAIRS_TO_LEADER,
    HealthConfig,
    ProgressConfig,
    RestartConfig,
    Timeouts,
)
from ringleader.core import exitcodes
from ringleader.core.health import FAILED, OK, CheckResult, Report
from ringleader.core.outcome import Outcome
from ringleader.core.pmap import PMap
from ringleader.core.progress import RankStep
from ringleader.core.records import RankRecord
from ringleader.core.restart_policy import RestartPolicy, parse_restart_on
from ringleader.core.stacks import RankStacks
from ringleader.core.straggler import WaitCount
from ringleader.launch.strategy import LaunchPlan
from ringleader.supervise.eventloop import Now
from ringleader.supervise.leading.effects import (
    Announce,
    AttemptPrepared,
    AttemptReaped,
    AwaitConfirmations,
    CheckHealth,
    CheckOutput,
    Deadline,
    Effect,
    Finish,
    HealthChecked,
    JobBegins,
    KillLauncher,
    LauncherStarted,
    LeaderEvent,
    OutputChecked,
    PrepareAttempt,
    ReapAttempt,
    RecordStatus,
    SetupFailed,
    StartLauncher,
    TerminateEverywhere,
)
from ringleader.supervise.leading.state import (
    SUPERVISING,
    TRANSIENT,
    LeaderSetup,
    LeaderState,
    Phase,
)
from ringleader.supervise.leading.table import DECISIONS, step
from ringleader.wire.events import (
    LauncherExited,
    RankEnded,
    RanksProgressed,
    RankStarted,
    SigtermReceived,
    SshChecked,
    StacksRequested,
    StacksTaken,
    WorkerBye,
    WorkerHello,
    WorkerLost,
    WorkerProbed,
    WorkerReady,
)
from ringleader.wire.messages import HANG
from tests.properties import examples

HOSTS = ("algo-1", "algo-2", "algo-3")
WORLD = 6
RANK_CODES = (0, 0, 1, 3, 137, 143)
CONFIG_ERROR = 78


# ------------------------------------------------------------------------- every pair decided
def test_every_phase_and_event_type_is_decided_once() -> None:
    """Each pair has a rule or a reason to ignore it, never both, never neither."""
    assert DECISIONS.undecided() == []
    assert all(reason.strip() for reason in DECISIONS.ignored.values())


def test_an_undecided_pair_is_an_error_not_a_silent_drop() -> None:
    state = LeaderState(LeaderSetup("algo-1", (), Timeouts()))

    @dataclass(frozen=True)
    class Unknown:
        pass

    with pytest.raises(LookupError, match="undecided: GATHERING x Unknown"):
        step(state, Unknown(), Now(0.0, 0.0))  # type: ignore[arg-type]


def test_a_pmap_changes_only_its_copy() -> None:
    first = PMap({1: "a", 2: "b"})
    second = first.set(3, "c").set(1, "z")
    assert dict(first) == {1: "a", 2: "b"} and len(first) == 2
    assert dict(second) == {1: "z", 2: "b", 3: "c"} and len(second) == 3
    assert 3 in second and 3 not in first and first.update(()) is first


# ------------------------------------------------------------------------------ the job model
@dataclass
class Job:
    """The world around the leader: what has happened, so that only possible events happen."""

    now: float = 1000.0
    steps: list[str] = field(default_factory=list)  # what happened, to print a failing case
    hellos: set[str] = field(default_factory=set)
    checks: set[str] = field(default_factory=set)  # ssh checks running
    attempt: int = -1  # the attempt whose launcher runs (-1: none yet)
    launcher_running: bool = False
    started: set[int] = field(default_factory=set)
    ended: set[int] = field(default_factory=set)
    told_to_stop: bool = False
    launcher_killed: bool = False  # its exit is then the kernel's to deliver
    lost: set[str] = field(default_factory=set)
    byes: set[str] = field(default_factory=set)
    output: int = 0
    finishes: list[Finish] = field(default_factory=list)
    prepared_at: list[int] = field(default_factory=list)  # the step of each PrepareAttempt
    effects: list[Effect] = field(default_factory=list)
    # what decides the invariants: the first of each, by step number
    sigterm_at: int | None = None
    sigterm_wall: float | None = None
    other_cause_before_sigterm: bool = False
    lost_at: int | None = None
    error_at: int | None = None
    sick_at: int | None = None  # the first health report with a failed check
    leader_health: Report = ()  # the leader's own checks before each restart
    stepped: bool = False  # some rank reported a step


def timeouts_strategy() -> st.SearchStrategy[Timeouts]:
    return st.builds(
        Timeouts,
        startup=st.sampled_from([5.0, 30.0]),
        sigterm_grace=st.sampled_from([0.5, 30.0]),
        leader_loss=st.just(10.0),
        finish=st.just(30.0),
        abort_grace=st.sampled_from([0.5, 5.0]),
        hang=st.sampled_from([None, 3.0, 60.0]),
        stack_dump=st.just(2.0),
        launcher_exit=st.just(10.0),
    )


def answer(job: Job, effect: Effect, fail_prepare: bool) -> LeaderEvent | None:
    """The interpreter's answers, as the model's world gives them."""
    job.effects.append(effect)
    match effect:
        case PrepareAttempt():
            job.prepared_at.append(len(job.steps))
            if fail_prepare:
                job.error_at = len(job.steps) if job.error_at is None else job.error_at
                return SetupFailed(CONFIG_ERROR, "Configuration error in sm_hosts: expected a list")
            return AttemptPrepared(LaunchPlan(("mpirun", "python", "train.py"), {}))
        case StartLauncher(attempt):
            job.attempt, job.launcher_running = attempt, True
            job.started, job.ended, job.told_to_stop = set(), set(), False
            job.launcher_killed = False
            return LauncherStarted()
        case CheckOutput():
            return OutputChecked(job.output)
        case ReapAttempt():
            return AttemptReaped((), {})
        case TerminateEverywhere():
            job.told_to_stop = True
        case KillLauncher():
            job.launcher_killed = True
        case Finish():
            job.finishes.append(effect)
        case CheckHealth():
            note_health(job, job.leader_health)
            return HealthChecked(job.leader_health)
    return None


HEALTHY: Report = (CheckResult("/dev/shm", OK, "1.0 GiB in all"),)
SICK: Report = (CheckResult("/dev/shm", FAILED, "1.0 MiB in all, at least 64.0 MiB wanted"),)


def health(data: st.DataObject, label: str) -> Report:
    return data.draw(st.sampled_from([HEALTHY] * 14 + [(), SICK]), label=label)


def note_health(job: Job, report: Report) -> None:
    if any(result.failed for result in report) and job.sick_at is None:
        job.sick_at = len(job.steps)


class Driver:
    """Steps the rules like the interpreter: an effect's answer before any other event."""

    def __init__(self, state: LeaderState, job: Job, fail_prepare: bool) -> None:
        self.state, self.job, self.fail_prepare = state, job, fail_prepare
        self.inputs: list[tuple[float, LeaderEvent]] = []

    def feed(self, event: LeaderEvent) -> None:
        pending = [event]
        while pending:
            current = pending.pop(0)
            self.inputs.append((self.job.now, current))
            self.job.steps.append(f"{self.job.now - 1000:.2f} {self.state.phase.name}: {current}")
            self.state, effects = step(self.state, current, Now(self.job.now, self.job.now))
            for effect in effects:
                answered = answer(self.job, effect, self.fail_prepare)
                if answered is not None:
                    pending.append(answered)
            self.check_waits()

    def check_waits(self) -> None:
        """Every wait ends: outside a running job, and in one that is being stopped, there is
        always a deadline, until the launcher is killed (its exit is then certain)."""
        state = self.state
        if state.phase in TRANSIENT:
            return
        if state.phase in SUPERVISING:
            assert state.attempt is not None
            if state.attempt.ending and not self.job.launcher_killed:
                assert state.deadline is not None, f"no deadline while stopping: {state}"
            return
        if state.phase is Phase.TELLING and state.telling and state.telling.deadline is None:
            return  # announced, not yet waiting: the interpreter awaits at once
        assert state.deadline is not None, f"waits without a deadline in {state.phase.name}"

    def pass_time(self) -> None:
        deadline = self.state.deadline
        assert deadline is not None
        self.job.now = max(self.job.now, deadline)
        gathering = self.state.gathering
        if self.state.phase is Phase.GATHERING and gathering and gathering.probing:
            note_health(self.job, SICK)  # pair probes whose report never came failed
        self.feed(Deadline())


def record(job: Job, rank: int, code: int) -> RankRecord:
    return RankRecord(
        rank=rank,
        host=HOSTS[rank // 2],
        exit_code=code,
        signal=None,
        started_at=1000.0,
        ended_at=job.now,
        terminated=job.told_to_stop and code == 143,
        stderr_tail=(),
        attempt=job.attempt,
    )


RARE = frozenset({"time", "sigterm", "lose"})


def possible(driver: Driver) -> Iterator[str]:
    """The kinds of things that can happen next (RARE ones are drawn one time in ten)."""
    state, job = driver.state, driver.job
    if state.deadline is not None:
        yield "time"
    yield "sigterm"
    if len(job.lost) < 2:
        yield "lose"
    if state.phase is Phase.GATHERING and state.gathering is not None:
        if state.gathering.hellos:
            yield "hello"
        if job.checks:
            yield "ssh"
        if state.gathering.probing:
            yield "probed"
    if state.phase in SUPERVISING or state.phase is Phase.SETTLING:
        running = job.started - job.ended
        if job.launcher_running and len(job.started) < WORLD:
            yield from ["start"] * 3
        if running:
            yield from ["end"] * 2
            yield from ["progress", "stacks"]
        if job.launcher_running and not running and len(job.started) == WORLD:
            yield from ["exit"] * 3
        elif job.launcher_running:
            yield "exit"
    if state.phase is Phase.RESTARTING:
        yield "ready"


def choose(data: st.DataObject, kinds: list[str]) -> str:
    common = [kind for kind in kinds if kind not in RARE]
    if common and data.draw(st.integers(0, 9), label="rare?") > 0:
        return data.draw(st.sampled_from(common), label="next")
    return data.draw(st.sampled_from(kinds), label="next")


def act(driver: Driver, kind: str, data: st.DataObject) -> None:
    job, state = driver.job, driver.state
    job.now += data.draw(st.sampled_from([0.0, 0.05, 0.3]), label="pause")
    workers = [host for host in HOSTS[1:] if host not in job.lost]
    match kind:
        case "time":
            driver.pass_time()
            return
        case "sigterm":
            event: LeaderEvent = SigtermReceived(data.draw(st.sampled_from(HOSTS), label="on"))
        case "lose":
            host = data.draw(st.sampled_from(HOSTS[1:]), label="lost")
            job.lost.add(host)
            event = WorkerLost(host, "no pulse for 10 s", job.now - 10.0)
        case "hello":
            assert state.gathering is not None
            host = data.draw(st.sampled_from(sorted(state.gathering.hellos)), label="hello")
            error = data.draw(st.sampled_from([None] * 19 + [CONFIG_ERROR]), label="error")
            job.checks.add(host)
            event = WorkerHello(
                host,
                error_code=error,
                error_message="bad config" if error else None,
                health=health(data, "health"),
                probe_address=f"10.0.2.{HOSTS.index(host)}",
            )
        case "ssh":
            host = data.draw(st.sampled_from(sorted(job.checks)), label="checked")
            job.checks.discard(host)
            problem = data.draw(st.sampled_from([None] * 19 + ["denied"]), label="ssh")
            event = SshChecked(host, problem)
        case "start":
            rank = data.draw(st.sampled_from(sorted(set(range(WORLD)) - job.started)))
            job.started.add(rank)
            event = RankStarted(rank, HOSTS[rank // 2], job.attempt)
        case "end":
            rank = data.draw(st.sampled_from(sorted(job.started - job.ended)), label="rank")
            code = 143 if job.told_to_stop else data.draw(st.sampled_from(RANK_CODES))
            job.ended.add(rank)
            job.output += 1
            event = RankEnded(record(job, rank, code))
        case "exit":
            job.launcher_running = False
            codes = [0, 1, 143] if job.ended != set(range(WORLD)) else [0, 3]
            event = LauncherExited(data.draw(st.sampled_from(codes), label="mpirun"))
        case "progress":
            rank = data.draw(st.sampled_from(sorted(job.started - job.ended)), label="rank")
            job.output += 1
            stepped = data.draw(st.sampled_from([None, None, job.output]), label="step")
            said = () if stepped is None else (RankStep(rank, stepped, 100),)
            job.stepped = job.stepped or bool(said)
            # every report of a rank's wait samples: 10 more samples per output batch so far
            samples = 10 * job.output
            waited = data.draw(st.sampled_from([samples // 3, 0]), label="waited")
            counted = (WaitCount(rank, samples, waited),)
            if data.draw(st.booleans(), label="only wait samples"):
                job.output -= 1  # no rank moved: only its wait samples came
                event = RanksProgressed(HOSTS[rank // 2], (), (), counted)
            else:
                event = RanksProgressed(HOSTS[rank // 2], (rank,), said, counted)
        case "stacks":
            if data.draw(st.booleans(), label="asked"):
                event = StacksRequested(data.draw(st.sampled_from(HOSTS)))
            else:
                rank = data.draw(st.sampled_from(sorted(job.started - job.ended)), label="rank")
                stacks = RankStacks(rank, HOSTS[rank // 2], job.now)
                event = StacksTaken(HANG, stacks)
        case "probed":
            assert state.gathering is not None and state.gathering.probing
            host = data.draw(st.sampled_from(sorted(state.gathering.probing)), label="probed")
            event = WorkerProbed(host, health(data, "pair probes"))
        case "ready":
            assert state.between is not None
            host = data.draw(st.sampled_from(workers or list(HOSTS[1:])), label="ready")
            event = WorkerReady(host, state.between.attempt, health(data, "health"))
        case _:
            raise AssertionError(kind)
    note_causes(driver, event)
    driver.feed(event)


def note_causes(driver: Driver, event: LeaderEvent) -> None:
    """What the invariants need to know about the job before this event."""
    job, state = driver.job, driver.state
    decided = state.phase in (Phase.DECIDED, Phase.TELLING, Phase.DONE)
    index = len(job.steps)
    if isinstance(event, SigtermReceived) and not decided and job.sigterm_at is None:
        job.sigterm_at, job.sigterm_wall = index, job.now
        attempt = state.attempt
        job.other_cause_before_sigterm = (
            job.lost_at is not None
            or job.error_at is not None
            or (
                attempt is not None
                and (attempt.hang is not None or attempt.startup_error is not None)
            )
        )
    if isinstance(event, WorkerLost) and not decided:
        job.lost_at = index if job.lost_at is None else job.lost_at
        if job.sigterm_wall is not None and event.last_heard < job.sigterm_wall:
            job.other_cause_before_sigterm = True  # lost before the stop, noticed after it
    if isinstance(event, WorkerHello) and event.error_code is not None and job.error_at is None:
        job.error_at = index
    # a host's first report of a gate is the one that counts (a repeat changes nothing)
    gathering, between = state.gathering, state.between
    if isinstance(event, WorkerHello) and gathering and event.host in gathering.hellos:
        note_health(job, event.health)
    if isinstance(event, WorkerProbed) and gathering and event.host in (gathering.probing or ()):
        note_health(job, event.health)

    ready = isinstance(event, WorkerReady) and state.phase is Phase.RESTARTING
    if ready and between and event.host in between.waiting and event.attempt == between.attempt:
        note_health(job, event.health)


def finish_the_job(driver: Driver) -> Outcome:
    """Let the world run to its end: every rank ends, the launcher exits, workers get ready,
    deadlines pass; then the verdict is announced and every worker confirms."""
    job = driver.job
    for _ in range(400):
        state = driver.state
        if state.phase is Phase.DECIDED:
            break
        if state.phase in SUPERVISING or state.phase is Phase.SETTLING:
            running = sorted(job.started - job.ended)
            if running:
                job.ended.add(running[0])
                driver.feed(RankEnded(record(job, running[0], 143 if job.told_to_stop else 0)))
                continue
            if job.launcher_running:
                job.launcher_running = False
                driver.feed(LauncherExited(0))
                continue
        if state.phase is Phase.RESTARTING and state.between and state.between.waiting:
            host = sorted(state.between.waiting)[0]
            if host not in job.lost:
                driver.feed(WorkerReady(host, state.between.attempt))
                continue
        if state.phase is Phase.GATHERING and state.gathering and state.gathering.hellos:
            host = sorted(state.gathering.hellos)[0]
            if host not in job.lost:
                job.checks.add(host)
                driver.feed(WorkerHello(host))
                continue
        if job.checks and state.phase is Phase.GATHERING:
            driver.feed(SshChecked(job.checks.pop(), None))
            continue
        if state.phase is Phase.GATHERING and state.gathering and state.gathering.probing:
            host = sorted(state.gathering.probing)[0]
            if host not in job.lost:
                driver.feed(WorkerProbed(host, HEALTHY))
                continue
        driver.pass_time()
    else:
        raise AssertionError("the job never reached a verdict:\n" + "\n".join(job.steps))
    outcome = driver.state.outcome
    assert outcome is not None
    driver.feed(Announce(outcome))
    driver.feed(AwaitConfirmations())
    for host in HOSTS[1:]:
        if driver.state.phase is Phase.TELLING:
            job.byes.add(host)
            driver.feed(WorkerBye(host))
    if driver.state.phase is not Phase.DONE:
        driver.pass_time()
    assert driver.state.phase is Phase.DONE
    return outcome


POLICIES = [
    RestartPolicy(),
    *(
        parse_restart_on("ringleader_restart_on", text)
        for text in ("hang", "codes:3", "not-codes:1")
    ),
]


@dataclass(frozen=True)
class Run:
    outcome: Outcome
    job: Job
    inputs: tuple[tuple[float, LeaderEvent], ...]
    state: LeaderState


def run_job(data: st.DataObject, calm: bool = False) -> Run:
    timeouts = data.draw(timeouts_strategy(), label="timeouts")
    restart = RestartConfig(
        data.draw(st.integers(0, 2), label="max_restarts"),
        data.draw(st.sampled_from([0.0, 1.0]), label="backoff"),
        data.draw(st.sampled_from(POLICIES), label="restart_on"),
    )
    pairs = data.draw(st.sampled_from([PAIRS_TO_LEADER, PAIRS_ALL]), label="health pairs")
    status = data.draw(st.sampled_from([0.0, 1.0, 60.0]), label="status interval")
    setup = LeaderSetup(
        HOSTS[0],
        HOSTS[1:],
        timeouts,
        restart,
        health=HealthConfig(pairs=pairs),
        progress=ProgressConfig(
            status_interval=status,
            straggler_window=1,
            straggler_action=data.draw(st.sampled_from(["warn", "stop", "off"]), label="action"),
        ),
    )
    job = Job()
    fail_prepare = not calm and data.draw(st.sampled_from([False] * 9 + [True]), label="prep")
    job.leader_health = health(data, "leader's health")
    driver = Driver(LeaderState(setup), job, fail_prepare)
    own = health(data, "leader's first health")
    note_health(job, own)
    driver.feed(JobBegins(WORLD, own))
    for _ in range(data.draw(st.integers(0, 120), label="events")):
        if driver.state.phase in (Phase.DECIDED, Phase.DONE):
            break
        kinds = list(possible(driver))
        if calm:
            kinds = [kind for kind in kinds if kind != "lose"]
        act(driver, choose(data, kinds), data)
    outcome = finish_the_job(driver)
    return Run(outcome, job, tuple(driver.inputs), driver.state)


def replay(first: Run) -> LeaderState:
    state = LeaderState(first.state.setup)
    for now, stepped in first.inputs:
        state, _ = step(state, stepped, Now(now, now))
    return state


# Thousands of sequences in seconds; no example database (a fresh clone sees the same runs).
PROPERTY = settings(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@settings(PROPERTY, max_examples=examples(1000))
@given(st.data())
def test_every_interleaving_keeps_the_failure_models_invariants(data: st.DataObject) -> None:
    run = run_job(data)
    job, outcome = run.job, run.outcome
    story = "\n".join(job.steps)
    event(f"exit {outcome.exit_code}")
    event(f"{len(run.state.attempts)} attempt(s)")
    event("SIGTERM before the verdict" if job.sigterm_at is not None else "no SIGTERM")
    # every worker is told exactly one final code, and it is the leader's verdict
    assert [(f.exit_code, f.failure) for f in job.finishes] == [
        (outcome.exit_code, outcome.failure)
    ], story
    # no attempt starts after a SIGTERM, a lost host (no spares here), a configuration error
    # or a failed health check
    for cause in (job.sigterm_at, job.lost_at, job.error_at, job.sick_at):
        if cause is not None:
            assert all(at <= cause for at in job.prepared_at), story
    # a stop from outside before the verdict, with no other cause before it, is 143
    if job.sigterm_at is not None and not job.other_cause_before_sigterm:
        assert outcome.exit_code == exitcodes.SIGTERM_EXIT, story
    # a rank the job's own stop terminated is never the cause
    assert outcome.root_cause is None or not outcome.root_cause.terminated, story
    # the cause is one the failure model names
    named = {0, exitcodes.SIGTERM_EXIT, exitcodes.HUNG, exitcodes.HOST_UNREACHABLE}
    named |= {exitcodes.HOST_LOST, exitcodes.INTERNAL_ERROR, CONFIG_ERROR, *RANK_CODES}
    named |= {exitcodes.DO_NOT_RETRY, exitcodes.HEALTH_CHECK_FAILED, exitcodes.STRAGGLER}
    # a straggler's stop only with the action stop
    if outcome.exit_code == exitcodes.STRAGGLER:
        assert run.state.setup.progress.straggler_action == "stop", story
    # a failed health check is the verdict only when some host reported one
    if outcome.exit_code == exitcodes.HEALTH_CHECK_FAILED:
        assert job.sick_at is not None, story
    assert outcome.exit_code in named, story
    # no attempt follows one whose cause the restart policy refuses; the do-not-retry code
    # only when it refuses the last one's, or the last two made no progress
    attempts, policy = run.state.attempts, run.state.setup.restart.policy
    assert all(
        a.kind is not None and policy.refuses(a.kind, a.exit_code) is None for a in attempts[:-1]
    ), story
    if outcome.exit_code == exitcodes.DO_NOT_RETRY:
        last = attempts[-1]
        stuck = len(attempts) >= 2 and not any(a.progressed for a in attempts[-2:])
        assert stuck or policy.refuses(last.kind or "", last.exit_code) is not None, story
        assert f"instead of {last.exit_code}." in (outcome.failure or "").splitlines()[1], story
    # a status is said only of steps some rank reported, and never with the interval 0
    said = [effect for effect in job.effects if isinstance(effect, RecordStatus)]
    event("a status said" if said else "no status")
    assert not said or (job.stepped and run.state.setup.progress.status_interval > 0), story
    # the same sequence always gives the same outcome
    assert replay(run) == run.state, story


@settings(PROPERTY, max_examples=examples(500))
@given(st.data())
def test_in_a_calm_job_a_sigterm_before_the_verdict_is_143_on_every_host(
    data: st.DataObject,
) -> None:
    """No host lost: whenever SIGTERM arrives before the verdict, and no hang or startup error
    came first, the job ends with 143 and nothing starts after it."""
    run = run_job(data, calm=True)
    job = run.job
    if job.sigterm_at is not None and not job.other_cause_before_sigterm:
        assert run.outcome.exit_code == exitcodes.SIGTERM_EXIT, "\n".join(job.steps)
        assert job.finishes[0].exit_code == exitcodes.SIGTERM_EXIT


def test_a_state_is_never_changed_by_a_step() -> None:
    setup = LeaderSetup(HOSTS[0], HOSTS[1:], Timeouts())
    state = LeaderState(setup)
    after, _ = step(state, JobBegins(WORLD), Now(0.0, 0.0))
    assert state == LeaderState(setup) and after != state
    assert replace(after, phase=Phase.GATHERING).world_size == WORLD
