"""What a worker knows, as frozen values."""

from dataclasses import dataclass

from ringleader.config.job import Timeouts
from ringleader.core.outcome import Outcome
from ringleader.supervise.decisions import Phases
from ringleader.supervise.eventloop import earliest


class Phase(Phases):
    WAITING = "waiting for the leader's launch"
    LAUNCHED = "launched: waiting for this host's first rank"
    RUNNING = "this host's ranks run"
    STOPPING = "this host's ranks told to stop"
    WRITING = "writing the verdict's result files"
    TOLD = "has the verdict: waiting for the leader to leave first"
    ENDED = "the outcome is known: run() ends"
    DONE = "done"


TRANSIENT = frozenset({Phase.WRITING, Phase.ENDED, Phase.DONE})


@dataclass(frozen=True)
class WorkerSetup:
    host: str
    leader: str
    timeouts: Timeouts
    spawns: bool = False  # this host can start its own launcher (spawned ranks)


@dataclass(frozen=True)
class WorkerState:
    setup: WorkerSetup
    phase: Phase = Phase.WAITING
    own_launcher: bool = False  # this host's own launcher was started (spawned ranks)
    kill_deadline: float | None = None  # for it, once the ranks were told to stop
    sigterm_deadline: float | None = None  # for the leader's verdict after SIGTERM
    # After SIGTERM: the ranks here stop with every other host's when the leader's stop comes,
    # or on their own at this time (the leader is slow to answer, or not stopping any more).
    local_stop_deadline: float | None = None
    rank_deadline: float | None = None  # for the first rank after the launch
    leave_deadline: float | None = None  # for the leader to leave, after the bye
    verdict_received: float = 0.0  # wall clock
    told: Outcome | None = None  # the leader's verdict, once it came
    outcome: Outcome | None = None  # how this host ends

    @property
    def deadline(self) -> float | None:
        if self.phase is Phase.TOLD:
            return self.leave_deadline
        return earliest(
            self.sigterm_deadline, self.rank_deadline, self.kill_deadline, self.local_stop_deadline
        )
