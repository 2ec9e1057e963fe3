"""What every part of this host's run shares: its name, its one event queue, the stop that
SIGTERM sets, its timeline and the real (or, in tests, fake) collaborators."""

import threading
from dataclasses import dataclass, field

from ringleader.core.outcome import Outcome
from ringleader.core.timeline import Timeline
from ringleader.launch.strategy import LaunchPlan, LaunchStrategy
from ringleader.supervise.common import RunningLauncher, StartLauncher
from ringleader.supervise.eventloop import EventQueue
from ringleader.supervise.parts import RootParts
from ringleader.supervise.verdict import write_outcome


@dataclass
class HostContext:
    parts: RootParts
    host: str
    events: EventQueue = field(default_factory=EventQueue)
    stop: threading.Event = field(default_factory=threading.Event)
    # this host's launcher phases (the leader's: every host's)
    timeline: Timeline = field(default_factory=Timeline)

    def log(self, line: str) -> None:
        self.parts.logger(line)

    def write(self, outcome: Outcome) -> None:
        """This host's result file, best-effort: a full disk never changes the exit code."""
        write_outcome(self.parts.results.output_dir, outcome, self.log)

    def launcher_starter(self, strategy: LaunchStrategy) -> StartLauncher:
        def start(plan: LaunchPlan) -> RunningLauncher:
            return self.parts.start_launcher(plan, self.events, strategy.setup)

        return start
