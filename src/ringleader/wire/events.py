"""Events that drive the leader's and the workers' state machines through one queue each."""

from dataclasses import dataclass, field

from ringleader.core.health import CheckResult
from ringleader.core.progress import RankStep
from ringleader.core.records import RankRecord
from ringleader.core.stacks import RankStacks
from ringleader.core.straggler import WaitCount
from ringleader.core.timeline import Mark
from ringleader.wire.messages import Message


@dataclass(frozen=True)
class RankStarted:
    rank: int
    host: str
    attempt: int = 0


@dataclass(frozen=True)
class RankEnded:
    record: RankRecord


@dataclass(frozen=True)
class SigtermReceived:
    host: str


@dataclass(frozen=True)
class LauncherExited:
    exit_code: int


@dataclass(frozen=True)
class RanksExited:
    """A worker's own launcher (spawned ranks) exited: its ranks are done."""

    host: str
    exit_code: int


@dataclass(frozen=True)
class WorkerHello:
    host: str
    error_code: int | None = None
    error_message: str | None = None
    marks: tuple[Mark, ...] = ()  # the worker's timeline until it said hello
    # The leader's clock minus the worker's, as the hello travelled (its transit included:
    # on one network, well under the gaps between failures that decide the cause).
    clock_offset: float = field(default=0.0, compare=False)  # a measurement, not identity
    host_key: str | None = None  # the worker's sshd's public key, made for this job
    health: tuple[CheckResult, ...] = ()  # its health checks before the first attempt
    probe_address: str | None = None  # where its peers probe it (ringleader_health_pairs=all)


@dataclass(frozen=True)
class WorkerProbed:
    """A worker's pair probes (ringleader_health_pairs=all), the answer to ProbePeers."""

    host: str
    health: tuple[CheckResult, ...]


@dataclass(frozen=True)
class SshChecked:
    """The leader's ssh check of a worker ended: `problem` is None when it worked."""

    host: str
    problem: str | None


@dataclass(frozen=True)
class WorkerLost:
    host: str
    reason: str
    last_heard: float = 0.0  # time.time() when the leader last heard from the host
    protocol_error: bool = False  # it sent garbage rather than going silent or away


@dataclass(frozen=True)
class WorkerReady:
    """A worker's ranks of the last attempt are gone: it can start the next one."""

    host: str
    attempt: int
    health: tuple[CheckResult, ...] = ()  # its health checks before that attempt


@dataclass(frozen=True)
class WorkerBye:
    host: str
    marks: tuple[Mark, ...] = ()  # the worker's timeline since its hello (verdict, exited)


@dataclass(frozen=True)
class LeaderMessage:
    message: Message  # what the leader sent a worker (Launched, Terminate, Exit)


@dataclass(frozen=True)
class LeaderLost:
    reason: str


@dataclass(frozen=True)
class RanksProgressed:
    """These ranks of `host` made progress (output, a heartbeat, a step); `steps`: the step of
    each of them that has a step source."""

    host: str
    ranks: tuple[int, ...]  # those that moved (none: only `waits` changed)
    steps: tuple[RankStep, ...] = ()
    waits: tuple[WaitCount, ...] = ()  # each rank's stack samples so far, and those waiting


@dataclass(frozen=True)
class StacksTaken:
    """One rank's stacks arrived (from its wrapper, or from a worker)."""

    reason: str
    stacks: RankStacks


@dataclass(frozen=True)
class StacksRequested:
    """SIGQUIT on `host`: every rank's stacks to the console; the job goes on."""

    host: str


Event = (
    RankStarted
    | RankEnded
    | SigtermReceived
    | LauncherExited
    | RanksExited
    | WorkerHello
    | SshChecked
    | WorkerLost
    | WorkerBye
    | WorkerReady
    | WorkerProbed
    | LeaderMessage
    | LeaderLost
    | RanksProgressed
    | StacksTaken
    | StacksRequested
)
