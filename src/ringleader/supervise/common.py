"""What the leader's and the worker's state machines share: the shapes of their collaborators
and the margins they both apply. Neither role imports the other."""

from collections.abc import Callable, Mapping
from typing import Protocol

from ringleader.launch.strategy import LaunchPlan

Logger = Callable[[str], None]

# Extra time beyond the grace period before the launcher itself is killed after SIGTERM.
KILL_MARGIN_SECONDS = 10.0


class LocalRanks(Protocol):
    """This host's ranks (the host agent)."""

    def terminate_all(self, grace: float) -> None: ...

    def reap(self, abort_grace: float) -> None: ...

    def dump_stacks(self, reason: str) -> None:
        """Every local rank's stacks, each as a StacksTaken event."""

    def begin_attempt(self) -> None:
        """After `reap`: the next attempt's ranks start (a restart in place)."""


class RunningLauncher(Protocol):
    def kill(self) -> None: ...

    def output_tail(self) -> tuple[str, ...]: ...

    def rank_codes(self) -> Mapping[int, int]:
        """rank -> exit code, as the launcher's own output reported them."""


StartLauncher = Callable[[LaunchPlan], RunningLauncher]
