"""What every part of this host's run shares: its name, its one event queue, the stop that
SIGTERM sets, its timeline and the real (or, in tests, fake) collaborators."""

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from ringleader.config.job import Timeouts
from ringleader.core import paths
from ringleader.core.outcome import Outcome
from ringleader.core.timeline import Timeline
from ringleader.launch.strategy import LaunchPlan, LaunchStrategy
from ringleader.supervise.common import RunningLauncher, StartLauncher
from ringleader.supervise.eventloop import EventQueue
from ringleader.supervise.parts import RootParts
from ringleader.supervise.verdict import write_outcome
from ringleader.wire.control import Admission, LeaderAddress


@dataclass
class HostContext:
    parts: RootParts
    host: str
    events: EventQueue = field(default_factory=EventQueue)
    stop: threading.Event = field(default_factory=threading.Event)
    # Set by SIGTERM too, and by whatever else one wait must wake for (artifact delivery).
    wake: threading.Event = field(default_factory=threading.Event)
    # this host's launcher phases (the leader's: every host's)
    timeline: Timeline = field(default_factory=Timeline)

    def log(self, line: str) -> None:
        self.parts.logger(line)

    def detail(self, line: str) -> None:
        self.parts.detail_logger(line)

    def job(self, leader: str) -> str:
        """The job's identity, the same on every host (job_identity)."""
        return job_identity(self.parts.environ, leader)

    def leader_address(self, leader: str, port: int, timeouts: Timeouts) -> LeaderAddress:
        """Where this worker finds its leader, and how it knows it."""
        return LeaderAddress(
            leader, port, self.job(leader), timeouts.leader_loss, self.parts.secret
        )

    def admission(
        self,
        ssh_key: str | None = None,
        probe_addresses: tuple[str, ...] = (),
        checks_within: float = 0.0,
    ) -> Admission:
        """Whom this leader admits: its own job's workers, who hold its secret; what it hands
        them: the job's ssh key, and its addresses on the job's interface for their probes;
        how long their checks may hold up their hello (ringleader_health_timeout)."""
        job = self.job(self.host)
        return Admission(job, self.parts.secret, ssh_key, probe_addresses, checks_within)

    def write(self, outcome: Outcome) -> None:
        """This host's result file, best-effort: a full disk never changes the exit code."""
        write_outcome(self.parts.results.output_dir, outcome, self.log)

    def launcher_starter(self, strategy: LaunchStrategy) -> StartLauncher:
        def start(plan: LaunchPlan) -> RunningLauncher:
            return self.parts.start_launcher(plan, self.events, strategy.setup)

        return start


def job_identity(environ: Mapping[str, str], leader: str) -> str:
    """The job's identity, derived the same way on every host: SageMaker's training job name,
    else the `ringleader cluster` job's id, else one named after the leader (a local job has a
    Docker network of its own)."""
    return (
        environ.get("TRAINING_JOB_NAME")
        or environ.get(paths.JOB_MARK_VARIABLE)
        or f"ringleader-{leader}"
    )
