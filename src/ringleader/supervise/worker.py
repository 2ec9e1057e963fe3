"""A worker's state machine: relay rank events, obey the leader, exit with the job's code.

The worker keeps its sshd (and so mpirun's daemon) alive until the leader sends the job's exit
code; it gives up when the leader goes away or silent (pulses), or never launches. Its
collaborators (events, clock, local ranks, the link to the leader) are injected.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ringleader.config.job import Timeouts
from ringleader.core import exitcodes
from ringleader.core import timeline as phases
from ringleader.core.outcome import Outcome, truncate
from ringleader.core.timeline import Mark
from ringleader.launch.spawn import SpawnSpec
from ringleader.launch.strategy import LaunchPlan
from ringleader.supervise.eventloop import Clock, EventSource, earliest
from ringleader.supervise.leader import (
    KILL_MARGIN_SECONDS,
    LocalRanks,
    Logger,
    RunningLauncher,
    StartLauncher,
)
from ringleader.wire.control import bye_message
from ringleader.wire.events import (
    LauncherExited,
    LeaderLost,
    LeaderMessage,
    RankEnded,
    RankStarted,
    SigtermReceived,
)
from ringleader.wire.messages import (
    Exit,
    Launched,
    Message,
    RankEnd,
    RanksExit,
    RankStart,
    Sigterm,
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


class Worker:
    def __init__(self, host: str, leader: str, timeouts: Timeouts, parts: WorkerParts) -> None:
        self._host = host
        self._leader = leader
        self._timeouts = timeouts
        self._parts = parts
        self._events = parts.events
        self._clock = parts.clock
        self._local = parts.local
        self._told: Outcome | None = None  # the leader's verdict, once it came
        self._launcher: RunningLauncher | None = None  # this host's own (spawned ranks)
        self._kill_deadline: float | None = None  # for it, once the ranks were told to stop

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
        return outcome

    def _follow(self, on_outcome: Callable[[Outcome], None]) -> Outcome:
        timeouts = self._timeouts
        link = self._parts.link
        sigterm_deadline: float | None = None
        rank_deadline: float | None = None
        ranks_started = False
        while True:
            event = self._events.next(
                earliest(sigterm_deadline, rank_deadline, self._kill_deadline)
            )
            now = self._clock.monotonic()
            if self._kill_deadline is not None and now >= self._kill_deadline:
                self._parts.log("ranks did not end within their grace period; killing them")
                self._kill_deadline = None
                if self._launcher is not None:
                    self._launcher.kill()
                if event is None:
                    continue
            if event is None:
                self._local.terminate_all(timeouts.abort_grace)
                if sigterm_deadline is not None and self._clock.monotonic() >= sigterm_deadline:
                    return self._outcome(
                        exitcodes.SIGTERM_EXIT,
                        "stopped by SIGTERM; the leader did not confirm the job's end in time",
                    )
                return self._outcome(
                    exitcodes.HOST_UNREACHABLE,
                    f"the MPI daemon never started a rank on {self._host} within "
                    f"{timeouts.startup:g} s of the launch (ringleader_startup_timeout)",
                )
            if isinstance(event, RankStarted):
                ranks_started = True
                rank_deadline = None
                link.send(RankStart(event.rank, event.host))
            elif isinstance(event, RankEnded):
                link.send(RankEnd(event.record))
            elif isinstance(event, LauncherExited):
                link.send(RanksExit(self._host, event.exit_code))
                self._kill_deadline = None
            elif isinstance(event, SigtermReceived):
                self._parts.log("SIGTERM received: stopping local ranks and telling the leader")
                self._stop_ranks(timeouts.sigterm_grace)
                link.send(Sigterm(self._host))
                if sigterm_deadline is None:
                    sigterm_deadline = (
                        self._clock.monotonic() + timeouts.sigterm_grace + timeouts.finish
                    )
            elif isinstance(event, LeaderLost):
                self._local.terminate_all(timeouts.abort_grace)
                self._local.reap(timeouts.abort_grace)
                if sigterm_deadline is not None:
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
            elif isinstance(event, LeaderMessage):
                received = self._clock.time()
                outcome = self._obey(event.message)
                if outcome is not None:
                    on_outcome(outcome)  # files first, then bye, then let the leader go first
                    # This host is done: what is left is the wait for the leader to go first.
                    marks = (
                        Mark(self._host, phases.VERDICT_RECEIVED, received),
                        Mark(self._host, phases.EXITED, self._clock.time()),
                    )
                    link.send(bye_message(self._host, marks))
                    self._wait_for_leader_to_leave(timeouts.finish + timeouts.leader_loss)
                    return outcome
                if isinstance(event.message, Launched):
                    self._launch(event.message)
                    if not ranks_started:
                        rank_deadline = self._clock.monotonic() + timeouts.startup

    def _obey(self, message: Message) -> Outcome | None:
        """Act on a leader's message; the verdict when it is the job's exit code."""
        if isinstance(message, Terminate):
            self._stop_ranks(message.grace)
        elif isinstance(message, Exit):
            self._local.reap(self._timeouts.abort_grace)
            self._told = Outcome(message.code, message.failure)
            return self._told
        return None

    def _launch(self, message: Launched) -> None:
        """Spawned ranks: start this host's share of them from the leader's spec."""
        spawn = message.spawn
        plan, start = self._parts.spawn_plan, self._parts.start_launcher
        if spawn is None or plan is None or start is None or self._launcher is not None:
            return
        if self._host not in spawn.launching_hosts:
            return  # mpirun starts this host's ranks
        launch = plan(spawn)
        self._launcher = start(launch)

    def _stop_ranks(self, grace: float) -> None:
        """Stop the local ranks; this host's own launcher is killed if they outlast `grace`."""
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
