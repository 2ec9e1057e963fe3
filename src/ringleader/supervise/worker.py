"""A worker's state machine: relay rank events, obey the leader, exit with the job's code.

The worker keeps its sshd (and so mpirun's daemon) alive until the leader sends the job's exit
code; it gives up when the leader goes away or silent (pulses), or never launches. Its
collaborators (events, clock, local ranks, the link to the leader) are injected.
"""

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ringleader.config.job import Timeouts
from ringleader.core import exitcodes
from ringleader.core import timeline as phases
from ringleader.core.outcome import Outcome, truncate
from ringleader.core.stacks import RankStacks
from ringleader.core.timeline import Mark
from ringleader.launch.spawn import SpawnSpec
from ringleader.launch.strategy import LaunchPlan
from ringleader.supervise.common import (
    KILL_MARGIN_SECONDS,
    LocalRanks,
    Logger,
    RunningLauncher,
    StartLauncher,
)
from ringleader.supervise.eventloop import Clock, EventSource, earliest
from ringleader.wire.control import bye_message
from ringleader.wire.events import (
    Event,
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
    Message,
    Progress,
    RankEnd,
    RanksExit,
    RankStart,
    Ready,
    Restart,
    Sigterm,
    Stacks,
    StacksWanted,
    Terminate,
)


class LeaderLink(Protocol):
    def send(self, message: Message) -> None:
        """Never raises: a broken link shows up as a LeaderLost event."""


@dataclass(frozen=True)
class WorkerParts:
    events: EventSource
    clock: Clock
    local: LocalRanks
    link: LeaderLink
    log: Logger
    # Spawned ranks: this host's launcher for the leader's spec, and how a launcher starts.
    spawn_plan: Callable[[SpawnSpec], LaunchPlan] | None = None
    start_launcher: StartLauncher | None = None
    # A hang's stacks of this host's ranks, kept on this host too (best-effort).
    keep_stacks: Callable[[RankStacks], None] = lambda stacks: None


class Phase(enum.Enum):
    WAITING = "waiting for the leader's launch"
    LAUNCHED = "launched: waiting for this host's first rank"
    RUNNING = "this host's ranks run"
    STOPPING = "this host's ranks told to stop"
    TOLD = "has the verdict: waiting for the leader to leave first"
    DONE = "done"


class Worker:
    def __init__(self, host: str, leader: str, timeouts: Timeouts, parts: WorkerParts) -> None:
        self._host = host
        self._leader = leader
        self._timeouts = timeouts
        self._parts = parts
        self._events = parts.events
        self._clock = parts.clock
        self._local = parts.local
        self.phase = Phase.WAITING
        self._told: Outcome | None = None  # the leader's verdict, once it came
        self._launcher: RunningLauncher | None = None  # this host's own (spawned ranks)
        self._kill_deadline: float | None = None  # for it, once the ranks were told to stop
        self._sigterm_deadline: float | None = None  # for the leader's verdict after SIGTERM
        self._rank_deadline: float | None = None  # for the first rank after the launch

    def run(self, on_outcome: Callable[[Outcome], None]) -> Outcome:
        """Follow the leader to the job's end; `on_outcome` writes the result files, before
        the leader hears that this host is done."""
        try:
            outcome = self._follow(on_outcome)
        finally:
            if self._launcher is not None:
                self._launcher.kill()  # spawned ranks' launcher: gone with the job, always
        if self._told is None:
            on_outcome(outcome)
        self.phase = Phase.DONE
        return outcome

    def _follow(self, on_outcome: Callable[[Outcome], None]) -> Outcome:
        while True:
            deadline = earliest(self._sigterm_deadline, self._rank_deadline, self._kill_deadline)
            event = self._events.next(deadline)
            if self._kill_deadline is not None and self._clock.monotonic() >= self._kill_deadline:
                self._parts.log("ranks did not end within their grace period; killing them")
                self._kill_deadline = None
                if self._launcher is not None:
                    self._launcher.kill()
                if event is None:
                    continue
            outcome = self._on_timeout() if event is None else self._on_event(event, on_outcome)
            if outcome is not None:
                return outcome

    def _on_timeout(self) -> Outcome:
        """No verdict in time after SIGTERM, or no rank after the launch."""
        self._local.terminate_all(self._timeouts.abort_grace)
        sigterm_deadline = self._sigterm_deadline
        if sigterm_deadline is not None and self._clock.monotonic() >= sigterm_deadline:
            return self._outcome(
                exitcodes.SIGTERM_EXIT,
                "stopped by SIGTERM; the leader did not confirm the job's end in time",
            )
        return self._outcome(
            exitcodes.HOST_UNREACHABLE,
            f"the MPI daemon never started a rank on {self._host} within "
            f"{self._timeouts.startup:g} s of the launch (ringleader_startup_timeout)",
        )

    def _on_event(self, event: Event, on_outcome: Callable[[Outcome], None]) -> Outcome | None:
        """One handler per kind of event; the verdict ends the wait."""
        link = self._parts.link
        match event:
            case RankStarted():
                self._rank_deadline = None
                if self.phase in (Phase.WAITING, Phase.LAUNCHED):
                    self.phase = Phase.RUNNING
                link.send(RankStart(event.rank, event.host, attempt=event.attempt))
            case RankEnded():
                link.send(RankEnd(event.record))
            case LauncherExited():
                link.send(RanksExit(self._host, event.exit_code))
                self._kill_deadline = None
            case SigtermReceived():
                self._on_sigterm()
            case RanksProgressed():
                link.send(Progress(event.host, event.ranks))
            case StacksTaken():
                if event.reason == HANG:
                    self._parts.keep_stacks(event.stacks)
                link.send(Stacks(event.reason, event.stacks))
            case StacksRequested():
                link.send(StacksWanted(self._host))
            case LeaderLost():
                return self._on_leader_lost(event)
            case LeaderMessage():
                return self._on_leader_message(event.message, on_outcome)
        return None

    def _on_sigterm(self) -> None:
        if self._sigterm_deadline is not None:
            return  # stopping already: Slurm signals both a step's task and its children
        self._parts.log("SIGTERM received: stopping local ranks and telling the leader")
        self._stop_ranks(self._timeouts.sigterm_grace)
        self._parts.link.send(Sigterm(self._host))
        timeouts = self._timeouts
        self._sigterm_deadline = self._clock.monotonic() + timeouts.sigterm_grace + timeouts.finish

    def _on_leader_lost(self, event: LeaderLost) -> Outcome:
        self._local.terminate_all(self._timeouts.abort_grace)
        self._local.reap(self._timeouts.abort_grace)
        if self._sigterm_deadline is not None:
            return self._outcome(
                exitcodes.SIGTERM_EXIT,
                f"stopped by SIGTERM; then lost the leader {self._leader}: {event.reason}",
            )
        return Outcome(
            exitcodes.HOST_LOST,
            truncate(
                f"Host {self._leader} (the leader): {event.reason}; "
                f"noticed by {self._host}, which stopped its ranks."
            ),
        )

    def _on_leader_message(
        self, message: Message, on_outcome: Callable[[Outcome], None]
    ) -> Outcome | None:
        match message:
            case Terminate():
                self._stop_ranks(message.grace)
            case DumpStacks():
                self._local.dump_stacks(message.reason)
            case Launched():
                self._launch(message)
                if self.phase is Phase.WAITING:
                    self.phase = Phase.LAUNCHED
                    self._rank_deadline = self._clock.monotonic() + self._timeouts.startup
            case Restart():
                self._restart(message.attempt)
            case Exit():
                return self._on_verdict(Outcome(message.code, message.failure), on_outcome)
        return None

    def _restart(self, attempt: int) -> None:
        """The job's ranks start again: this host's of the last attempt end (they were told
        to stop, bounded by their grace), then the leader hears that the host is ready."""
        self._local.reap(self._timeouts.abort_grace)
        if self._launcher is not None:
            self._launcher.kill()  # it exited already: the leader waits for that first
            self._launcher = None
        self._kill_deadline = self._rank_deadline = None
        if self._sigterm_deadline is None:
            self._local.begin_attempt()
            self.phase = Phase.WAITING
        # else stopped by SIGTERM: the stop stays, so a rank the next launch starts here
        # anyway (mpirun's daemon) is stopped at once; the leader ends the job with 143
        self._parts.log(f"ready for attempt {attempt}")
        self._parts.link.send(Ready(self._host, attempt))

    def _on_verdict(self, outcome: Outcome, on_outcome: Callable[[Outcome], None]) -> Outcome:
        """Files first, then bye, then let the leader go first."""
        received = self._clock.time()
        self._local.reap(self._timeouts.abort_grace)
        self._told = outcome
        self.phase = Phase.TOLD
        on_outcome(outcome)
        marks = (
            Mark(self._host, phases.VERDICT_RECEIVED, received),
            Mark(self._host, phases.EXITED, self._clock.time()),
        )
        self._parts.link.send(bye_message(self._host, marks))
        self._wait_for_leader_to_leave(self._timeouts.finish + self._timeouts.leader_loss)
        return outcome

    def _launch(self, message: Launched) -> None:
        """Spawned ranks: start this host's share of them from the leader's spec."""
        spawn = message.spawn
        plan, start = self._parts.spawn_plan, self._parts.start_launcher
        if spawn is None or plan is None or start is None or self._launcher is not None:
            return
        if self._sigterm_deadline is not None:
            return  # stopped by SIGTERM: no new ranks (a restart crossed the stop)
        if self._host not in spawn.launching_hosts:
            return  # mpirun starts this host's ranks
        launch = plan(spawn)
        self._launcher = start(launch)

    def _stop_ranks(self, grace: float) -> None:
        """Stop the local ranks; this host's own launcher is killed if they outlast `grace`."""
        if self.phase is not Phase.TOLD:
            self.phase = Phase.STOPPING
        self._local.terminate_all(grace)
        if self._launcher is not None and self._kill_deadline is None:
            self._kill_deadline = self._clock.monotonic() + grace + KILL_MARGIN_SECONDS

    def _wait_for_leader_to_leave(self, timeout: float) -> None:
        """After bye: the leader closes the connection when it exits (bounded wait)."""
        deadline = self._clock.monotonic() + timeout
        while (event := self._events.next(deadline)) is not None:
            if isinstance(event, LeaderLost):
                return

    def _outcome(self, code: int, problem: str) -> Outcome:
        return Outcome(code, truncate(f"Host {self._host}: {problem}."))
