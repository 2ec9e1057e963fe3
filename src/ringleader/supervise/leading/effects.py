"""What the leader's rules ask for (effects), and what the interpreter answers or adds (inputs).

Effects are plain data; the interpreter (supervise/leader.py) carries each out in order. Some
effects have an answer, an input the interpreter steps at once, before it takes the next event
(the launch plan, the started launcher, how much output was taken, the reaped attempt).
"""

from collections.abc import Mapping
from dataclasses import dataclass

from ringleader.core.hang import HangReport
from ringleader.core.health import Report
from ringleader.core.outcome import Outcome
from ringleader.core.progress import StatusSample
from ringleader.core.timeline import Mark
from ringleader.launch.strategy import LaunchPlan
from ringleader.wire.events import Event
from ringleader.wire.messages import Message


# ------------------------------------------------------------------------------------ effects
@dataclass(frozen=True)
class Log:
    text: str


@dataclass(frozen=True)
class MarkTimeline:
    """Phases reached, on the leader's clock."""

    marks: tuple[Mark, ...]


@dataclass(frozen=True)
class CheckSsh:
    """Check ssh to a worker in the background; its end is an SshChecked event."""

    host: str
    host_key: str | None
    timeout: float


@dataclass(frozen=True)
class PrepareAttempt:
    """Make the attempt's launch command; answered by AttemptPrepared or SetupFailed."""

    attempt: int


@dataclass(frozen=True)
class StartLauncher:
    """Start the launcher; answered by LauncherStarted."""

    attempt: int
    plan: LaunchPlan


@dataclass(frozen=True)
class Broadcast:
    message: Message


@dataclass(frozen=True)
class RecordStatus:
    """The job's progress, said: into metrics.jsonl."""

    sample: StatusSample


@dataclass(frozen=True)
class TerminateEverywhere:
    """Every rank, this host's and every worker's, gets SIGTERM and `grace` before SIGKILL."""

    grace: float


@dataclass(frozen=True)
class KillLauncher:
    pass


@dataclass(frozen=True)
class RequestStacks:
    """Every rank's stacks, this host's and every worker's, each as a StacksTaken event."""

    reason: str


@dataclass(frozen=True)
class KeepStacks:
    report: HangReport


@dataclass(frozen=True)
class CheckOutput:
    """How many output batches the leader has taken; answered by OutputChecked."""


@dataclass(frozen=True)
class ReapAttempt:
    """End what is left of this host's ranks (`grace`), then read what the launcher said;
    answered by AttemptReaped."""

    grace: float


@dataclass(frozen=True)
class BeginAttempt:
    """This host's ranks of the next attempt may start (a restart in place)."""


@dataclass(frozen=True)
class CheckHealth:
    """This host's health checks before `attempt` (a restart); answered by HealthChecked."""

    attempt: int


@dataclass(frozen=True)
class Finish:
    """Send every worker the job's exit code and failure."""

    exit_code: int
    failure: str | None


Effect = (
    Log
    | MarkTimeline
    | CheckSsh
    | PrepareAttempt
    | StartLauncher
    | Broadcast
    | RecordStatus
    | TerminateEverywhere
    | KillLauncher
    | RequestStacks
    | KeepStacks
    | CheckOutput
    | ReapAttempt
    | BeginAttempt
    | CheckHealth
    | Finish
)


# ------------------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class Deadline:
    """The state's deadline passed with no event before it."""


@dataclass(frozen=True)
class JobBegins:
    world_size: int
    health: Report = ()  # the leader's own health checks before the first attempt


@dataclass(frozen=True)
class HealthChecked:
    """The leader's own health checks before a restart (empty: ringleader_health is off)."""

    report: Report


@dataclass(frozen=True)
class SetupFailed:
    """The job's size or its launch command could not be made (a JobError)."""

    exit_code: int
    message: str


@dataclass(frozen=True)
class AttemptPrepared:
    plan: LaunchPlan


@dataclass(frozen=True)
class LauncherStarted:
    pass


@dataclass(frozen=True)
class OutputChecked:
    taken: int


@dataclass(frozen=True)
class AttemptReaped:
    output_tail: tuple[str, ...]
    rank_codes: Mapping[int, int]


@dataclass(frozen=True)
class Announce:
    """Send this outcome to the workers (the leader's own verdict, or a job's that never ran)."""

    outcome: Outcome


@dataclass(frozen=True)
class AwaitConfirmations:
    pass


Input = (
    Deadline
    | JobBegins
    | SetupFailed
    | AttemptPrepared
    | LauncherStarted
    | OutputChecked
    | AttemptReaped
    | HealthChecked
    | Announce
    | AwaitConfirmations
)
LeaderEvent = Event | Input
