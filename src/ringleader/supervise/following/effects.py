"""What the worker's rules ask for, and the interpreter's inputs."""

from dataclasses import dataclass

from ringleader.core.outcome import Outcome
from ringleader.core.stacks import RankStacks
from ringleader.launch.spawn import SpawnSpec
from ringleader.wire.events import Event
from ringleader.wire.messages import Message


@dataclass(frozen=True)
class Log:
    text: str


@dataclass(frozen=True)
class Send:
    """To the leader (never raises: a broken link shows up as LeaderLost)."""

    message: Message


@dataclass(frozen=True)
class SendReady:
    """This host's health checks before `attempt` (ringleader_health), then Ready with them."""

    attempt: int


@dataclass(frozen=True)
class SendProbed:
    """This host's share of the pair probes (ringleader_health_pairs=all), then Probed."""

    peers: tuple[tuple[str, str], ...]  # every worker's (name, address)


@dataclass(frozen=True)
class TerminateLocal:
    grace: float


@dataclass(frozen=True)
class ReapLocal:
    grace: float


@dataclass(frozen=True)
class DumpLocalStacks:
    reason: str


@dataclass(frozen=True)
class KeepStacks:
    stacks: RankStacks


@dataclass(frozen=True)
class StartOwnLauncher:
    """Spawned ranks: this host's launcher for the leader's spec."""

    spec: SpawnSpec


@dataclass(frozen=True)
class KillOwnLauncher:
    pass


@dataclass(frozen=True)
class BeginAttempt:
    pass


@dataclass(frozen=True)
class WriteOutcome:
    """The result files, before the leader hears that this host is done; answered by
    OutcomeWritten."""

    outcome: Outcome


Effect = (
    Log
    | Send
    | SendReady
    | SendProbed
    | TerminateLocal
    | ReapLocal
    | DumpLocalStacks
    | KeepStacks
    | StartOwnLauncher
    | KillOwnLauncher
    | BeginAttempt
    | WriteOutcome
)


@dataclass(frozen=True)
class Deadline:
    pass


@dataclass(frozen=True)
class OutcomeWritten:
    pass


WorkerEvent = Event | Deadline | OutcomeWritten
