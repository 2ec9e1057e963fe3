"""A worker's interpreter: it takes the next event (or notices a deadline), steps the pure rules
(supervise/following/table.py) and carries out the effects they return.

The worker keeps its sshd (and so mpirun's daemon) alive until the leader sends the job's exit
code; it gives up when the leader goes away or silent (pulses), or never launches. Its
collaborators (events, clock, local ranks, the link to the leader) are injected.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ringleader.config.job import Timeouts
from ringleader.core.health import Report
from ringleader.core.outcome import Outcome
from ringleader.core.stacks import RankStacks
from ringleader.launch.spawn import SpawnSpec
from ringleader.launch.strategy import LaunchPlan
from ringleader.supervise.common import LocalRanks, Logger, RunningLauncher, StartLauncher
from ringleader.supervise.decisions import step_with_answers
from ringleader.supervise.eventloop import Clock, EventSource
from ringleader.supervise.following.effects import (
    BeginAttempt,
    Deadline,
    DumpLocalStacks,
    Effect,
    KeepStacks,
    KillOwnLauncher,
    Log,
    OutcomeWritten,
    ReapLocal,
    Send,
    SendProbed,
    SendReady,
    StartOwnLauncher,
    TerminateLocal,
    WorkerEvent,
    WriteOutcome,
)
from ringleader.supervise.following.state import Phase, WorkerSetup, WorkerState
from ringleader.supervise.following.table import step
from ringleader.wire.messages import Message, Probed, Ready

__all__ = ["LeaderLink", "Phase", "Worker", "WorkerParts"]


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
    # This host's health checks before an attempt (ringleader_health; none when it is off).
    check_health: Callable[[int], Report] = lambda attempt: ()
    # This host's share of the pair probes, given every worker's (name, address).
    probe_peers: Callable[[tuple[tuple[str, str], ...]], Report] = lambda peers: ()


class Worker:
    def __init__(self, host: str, leader: str, timeouts: Timeouts, parts: WorkerParts) -> None:
        spawns = parts.spawn_plan is not None and parts.start_launcher is not None
        self._state = WorkerState(WorkerSetup(host, leader, timeouts, spawns))
        self._parts = parts
        self._launcher: RunningLauncher | None = None  # this host's own (spawned ranks)
        self._on_outcome: Callable[[Outcome], None] = lambda outcome: None

    @property
    def phase(self) -> Phase:
        return self._state.phase

    def run(self, on_outcome: Callable[[Outcome], None]) -> Outcome:
        """Follow the leader to the job's end; `on_outcome` writes the result files, before
        the leader hears that this host is done."""
        self._on_outcome = on_outcome
        try:
            while self._state.phase is not Phase.DONE:
                event = self._parts.events.next(self._state.deadline)
                self._step(Deadline() if event is None else event)
        finally:
            if self._launcher is not None:
                self._launcher.kill()  # spawned ranks' launcher: gone with the job, always
        assert self._state.outcome is not None
        return self._state.outcome

    def _step(self, event: WorkerEvent) -> None:
        step_with_answers(step, self._state, event, self._parts.clock, self._apply, self._keep)

    def _keep(self, state: WorkerState) -> None:
        self._state = state

    def _apply(self, effect: Effect) -> WorkerEvent | None:
        parts, local = self._parts, self._parts.local
        match effect:
            case Log(text):
                parts.log(text)
            case Send(message):
                parts.link.send(message)
            case SendReady(attempt):
                health = parts.check_health(attempt)
                parts.link.send(Ready(self._state.setup.host, attempt, health))
            case SendProbed(peers):
                parts.link.send(Probed(self._state.setup.host, parts.probe_peers(peers)))
            case TerminateLocal(grace):
                local.terminate_all(grace)
            case ReapLocal(grace):
                local.reap(grace)
            case DumpLocalStacks(reason):
                local.dump_stacks(reason)
            case KeepStacks(stacks):
                parts.keep_stacks(stacks)
            case StartOwnLauncher(spec):
                assert parts.spawn_plan is not None and parts.start_launcher is not None
                self._launcher = parts.start_launcher(parts.spawn_plan(spec))
            case KillOwnLauncher():
                if self._launcher is not None:
                    self._launcher.kill()
            case BeginAttempt():
                local.begin_attempt()
            case WriteOutcome(outcome):
                self._on_outcome(outcome)
                return OutcomeWritten()
        return None
