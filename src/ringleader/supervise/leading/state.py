"""What the leader knows, as frozen values: the job's setup, its phase, and the attempt it runs.

A rule never changes a state; it returns the next one (`dataclasses.replace`). The per-rank
tables are PMaps, so an event costs the leader what it changes, not the size of the job.
"""

from dataclasses import dataclass, field

from ringleader.config.job import (
    PAIRS_ALL,
    HealthConfig,
    ProgressConfig,
    RestartConfig,
    Timeouts,
)
from ringleader.core.attempts import AttemptRecord
from ringleader.core.frozen import evolve
from ringleader.core.hang import LastProgress
from ringleader.core.health import Report
from ringleader.core.outcome import Hang, Outcome, Straggled
from ringleader.core.pmap import PMap, PSet
from ringleader.core.progress import RankStep, StatusSample
from ringleader.core.records import RankRecord
from ringleader.core.stacks import RankStacks
from ringleader.core.straggler import Straggler, WaitCount
from ringleader.core.timeline import Mark
from ringleader.launch.strategy import EndPolicy, LaunchPlan
from ringleader.supervise.decisions import Phases
from ringleader.supervise.eventloop import earliest
from ringleader.wire.events import WorkerLost


class Phase(Phases):
    GATHERING = "waiting for every worker's hello"
    PREPARING = "the launch command is made and the launcher started"
    LAUNCHING = "waiting for every rank to start"
    RUNNING = "every rank started"
    STOPPING = "every rank told to stop"
    SETTLING = "every launcher exited: collecting the last rank records"
    CONCLUDING = "the attempt's ranks are reaped and its outcome decided"
    RESTARTING = "between two attempts: the backoff, and every worker getting ready"
    DECIDED = "the verdict is made, not yet sent"
    TELLING = "telling the workers the verdict"
    DONE = "done"


SUPERVISING = frozenset({Phase.LAUNCHING, Phase.RUNNING, Phase.STOPPING})
# Phases the interpreter never waits in: it answers their effects at once, or stops stepping.
TRANSIENT = frozenset({Phase.PREPARING, Phase.CONCLUDING, Phase.DECIDED, Phase.DONE})


@dataclass(frozen=True)
class LeaderSetup:
    """What does not change while the job runs."""

    host: str
    workers: tuple[str, ...]
    timeouts: Timeouts
    restart: RestartConfig = field(default_factory=RestartConfig)
    tells_workers: bool = True  # a link to the workers exists (else nobody to tell or wait for)
    checks_ssh: bool = True  # the launch needs ssh to every worker
    health: HealthConfig = field(default_factory=HealthConfig)
    progress: ProgressConfig = field(default_factory=ProgressConfig)

    @property
    def hosts(self) -> tuple[str, ...]:
        return (self.host, *self.workers)

    @property
    def probes_pairs(self) -> bool:
        """The workers probe each other before the first attempt (ringleader_health_pairs)."""
        return self.health.enabled and self.health.pairs == PAIRS_ALL and len(self.workers) > 1


@dataclass(frozen=True)
class StackDump:
    """Every rank was asked for its stacks: what has arrived."""

    reason: str  # HANG or ON_DEMAND
    deadline: float  # ringleader_stack_dump_timeout from the request
    expected: PMap[int, str]  # rank -> host: the ranks running when they were asked
    stacks: PMap[int, RankStacks] = field(default_factory=PMap)
    quiet: str = ""  # after a hang: how long the job was quiet, and the setting that allowed it


@dataclass(frozen=True)
class Attempt:
    """One launch, from the launcher's start to its outcome."""

    number: int
    started_at: float  # wall clock, as its launch command was being made
    plan: LaunchPlan | None = None
    launch_deadline: float | None = None  # every rank must have started by then
    kill_deadline: float | None = None  # the launcher is killed then
    started: PMap[int, str] = field(default_factory=PMap)  # rank -> host
    records: PMap[int, RankRecord] = field(default_factory=PMap)
    stopped_on: str | None = None
    stopped_at: float = 0.0
    lost: tuple[WorkerLost, ...] = ()  # in the order they were lost
    startup_error: str | None = None
    aborted: bool = False  # a rank failed and every other rank was told to stop
    # TensorFlow: ranks still running when every main task had ended (parameter servers):
    # stopped then, and their end is not a failure.
    released: frozenset[int] | None = None
    exited: tuple[tuple[str, int], ...] = ()  # (host, its launcher's code), in order
    # The launcher was killed after every rank had ended (a wedged orted, or nothing left
    # after a stop): its exit code says nothing about the job, the ranks' records do.
    launcher_outlived_ranks: bool = False
    # The hang watch: when the job counts as hung unless some rank makes progress first.
    hang_deadline: float | None = None
    # The start-up window (monotonic; launch + ringleader_startup_timeout when that is the
    # longer): until every rank made progress, no hang verdict before its end.
    starting_until: float | None = None
    hang_patience: float = 0.0  # what a starved leader may still add to the deadline
    progress: PMap[int, LastProgress] = field(default_factory=PMap)  # each rank's latest
    # The status line: each rank's latest step, when the next status is due, the last said.
    steps: PMap[int, RankStep] = field(default_factory=PMap)
    status_deadline: float | None = None
    last_status: StatusSample | None = None
    # The straggler watch: each rank's wait samples so far, their counts at each of the last
    # status lines (oldest first), and the rank named now.
    waits: PMap[int, WaitCount] = field(default_factory=PMap)
    wait_history: tuple[PMap[int, WaitCount], ...] = ()
    straggler: Straggler | None = None
    straggled: Straggled | None = None  # the job was stopped for it (action stop)
    dump: StackDump | None = None
    hang: Hang | None = None
    # Settling: the launcher's code as every launcher had exited, and the records' wait.
    launcher_code: int = 0
    output_taken: int | None = None  # output batches taken when last looked
    settle_wait: float = 0.0  # how long the records may take once output stops arriving
    settle_deadline: float | None = None
    settle_check: float | None = None  # when to look again whether output still arrives

    @property
    def policy(self) -> EndPolicy:
        return self.plan.policy if self.plan is not None else EndPolicy()

    @property
    def deadline(self) -> float | None:
        """While supervising: the next moment something is due, if nothing happens before."""
        dump = self.dump.deadline if self.dump is not None else None
        return earliest(
            self.launch_deadline, self.kill_deadline, self.hang_deadline, dump, self.status_deadline
        )

    @property
    def ending(self) -> bool:
        """The job is being stopped, or ended: no hang to watch for."""
        return bool(
            self.stopped_on
            or self.aborted
            or self.lost
            or self.released
            or self.hang
            or self.straggled
        )

    @property
    def lost_hosts(self) -> frozenset[str]:
        return frozenset(loss.host for loss in self.lost)

    def loss_of(self, host: str) -> WorkerLost | None:
        return next((loss for loss in self.lost if loss.host == host), None)

    def unreported(self, hosts: frozenset[str]) -> set[int]:
        """Ranks started on `hosts` with no record yet (one pass over the ranks, as it runs at
        every event while records arrive; 4,096 hosts x 8 ranks took 0.49 s)."""
        return {
            rank
            for rank, host in self.started.items()
            if host in hosts and rank not in self.records
        }

    def stop_launcher_by(self, deadline: float) -> "Attempt":
        return evolve(self, kill_deadline=earliest(self.kill_deadline, deadline))


@dataclass(frozen=True)
class Gathering:
    """Waiting for the workers' hellos and the ssh checks they start, then (with
    ringleader_health_pairs=all) for their pair probes."""

    hellos: PSet[str]  # workers still to say hello
    deadline: float
    checks: PSet[str] = field(default_factory=PSet)
    problems: tuple[str, ...] = ()
    health: PMap[str, Report] = field(default_factory=PMap)  # each host's checks, leader's too
    addresses: PMap[str, str] = field(default_factory=PMap)  # worker -> where peers probe it
    probing: PSet[str] | None = None  # workers whose pair probes are still out, once asked


@dataclass(frozen=True)
class BetweenAttempts:
    """The backoff before `attempt`, while the workers get ready for it."""

    attempt: int
    waiting: PSet[str]  # hosts not ready yet: the workers, and the leader until it checked
    resume_at: float  # the backoff's end
    deadline: float  # ringleader_startup_timeout for the workers to get ready
    health: PMap[str, Report] = field(default_factory=PMap)  # each host's checks so far


@dataclass(frozen=True)
class Telling:
    """The verdict was sent: waiting for every worker's confirmation."""

    pending: PSet[str] = field(default_factory=PSet)
    deadline: float | None = None  # set when the leader starts waiting


@dataclass(frozen=True)
class LeaderState:
    setup: LeaderSetup
    phase: Phase = Phase.GATHERING
    world_size: int = 0
    # every start of the ranks, once it ended (a cluster's earlier runs' first)
    attempts: tuple[AttemptRecord, ...] = ()
    records: tuple[RankRecord, ...] = ()  # the last concluded attempt's records, by rank
    # workers that will not need the final exit message
    settled: PSet[str] = field(default_factory=PSet)
    # Each worker's clock to the leader's (measured at its hello): every time compared across
    # hosts is on the leader's clock, never a remote wall clock.
    clock_offsets: PMap[str, float] = field(default_factory=PMap)
    gathering: Gathering | None = None
    attempt: Attempt | None = None
    between: BetweenAttempts | None = None
    outcome: Outcome | None = None  # the verdict, once decided
    telling: Telling | None = None
    health: PMap[str, Report] = field(default_factory=PMap)  # every host's, at the last gate
    progress: tuple[StatusSample, ...] = ()  # every status said (job.json), attempts together
    stragglers: tuple[Straggler, ...] = ()  # every straggler episode that ended (job.json)

    @property
    def current(self) -> Attempt:
        """The attempt that runs or settles: only its phases' rules ask for it."""
        assert self.attempt is not None
        return self.attempt

    @property
    def deadline(self) -> float | None:
        """When the interpreter must step a Deadline if no event comes first."""
        if self.phase is Phase.GATHERING and self.gathering is not None:
            return self.gathering.deadline
        if self.phase in SUPERVISING and self.attempt is not None:
            return self.attempt.deadline
        if self.phase is Phase.SETTLING and self.attempt is not None:
            return earliest(self.attempt.settle_deadline, self.attempt.settle_check)
        if self.phase is Phase.RESTARTING and self.between is not None:
            between = self.between
            return between.deadline if between.waiting else between.resume_at
        if self.phase is Phase.TELLING and self.telling is not None:
            return self.telling.deadline
        return None

    @property
    def unsettled(self) -> PSet[str]:
        """The workers that still need the job's word (the next attempt, the final exit)."""
        return PSet(host for host in self.setup.workers if host not in self.settled)

    def on_leader_clock(self, host: str, marks: tuple[Mark, ...]) -> tuple[Mark, ...]:
        """A worker's timeline marks, on the leader's clock."""
        offset = self.clock_offsets.get(host, 0.0)
        return tuple(Mark(mark.host, mark.phase, mark.at + offset) for mark in marks)
