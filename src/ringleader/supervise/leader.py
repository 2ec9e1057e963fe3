"""The leader's interpreter: it takes the next event (or notices a deadline), steps the pure
rules (supervise/leading/table.py) and carries out the effects they return.

Its collaborators (events, clock, local ranks, the link to the workers, how a launcher starts,
the ssh check) are injected, so each fault is a unit test without containers; the rules
themselves are tested with no collaborator at all (tests/unit/test_leader_rules.py).
"""

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ringleader.config.job import HealthConfig, ProgressConfig, RestartConfig, Timeouts
from ringleader.core import timeline as phases
from ringleader.core.attempts import AttemptRecord
from ringleader.core.errors import JobError
from ringleader.core.hang import HangReport
from ringleader.core.health import Report
from ringleader.core.outcome import Outcome
from ringleader.core.progress import StatusSample
from ringleader.core.records import RankRecord
from ringleader.core.straggler import Straggler
from ringleader.core.timeline import Timeline
from ringleader.launch.strategy import LaunchStrategy, SshCheck
from ringleader.supervise.common import (
    KILL_MARGIN_SECONDS,
    LocalRanks,
    Logger,
    RunningLauncher,
    StartLauncher,
)
from ringleader.supervise.decisions import step_with_answers
from ringleader.supervise.eventloop import Clock, EventSource
from ringleader.supervise.leading.effects import (
    Announce,
    AttemptPrepared,
    AttemptReaped,
    AwaitConfirmations,
    BeginAttempt,
    Broadcast,
    CheckHealth,
    CheckOutput,
    CheckSsh,
    Deadline,
    Effect,
    Finish,
    HealthChecked,
    Input,
    JobBegins,
    KeepStacks,
    KillLauncher,
    LauncherStarted,
    LeaderEvent,
    Log,
    MarkTimeline,
    OutputChecked,
    PrepareAttempt,
    ReapAttempt,
    RecordStatus,
    RequestStacks,
    SetupFailed,
    TerminateEverywhere,
)
from ringleader.supervise.leading.effects import (
    StartLauncher as StartLauncherEffect,
)
from ringleader.supervise.leading.settling import RECORD_SETTLE_SECONDS
from ringleader.supervise.leading.startup import SSH_CHECKS_AT_ONCE
from ringleader.supervise.leading.state import LeaderSetup, LeaderState, Phase
from ringleader.supervise.leading.steps import STOP_KILL_MARGIN_SECONDS
from ringleader.supervise.leading.table import step
from ringleader.wire.events import Event, SshChecked
from ringleader.wire.messages import DumpStacks, Message, Terminate

__all__ = [
    "KILL_MARGIN_SECONDS",
    "LOST_HOST_KILL_MARGIN_SECONDS",
    "RECORD_SETTLE_SECONDS",
    "Leader",
    "LeaderParts",
    "Phase",
]

LOST_HOST_KILL_MARGIN_SECONDS = STOP_KILL_MARGIN_SECONDS


def start_thread(work: Callable[[], None]) -> None:
    threading.Thread(target=work, name="ssh-check", daemon=True).start()


class WorkerLink(Protocol):
    """The workers (the control server)."""

    def broadcast(self, message: Message) -> None: ...

    def finish(self, exit_code: int, failure: str | None) -> None: ...


@dataclass(frozen=True)
class LeaderParts:
    """What the leader works with; tests pass fakes."""

    events: EventSource
    clock: Clock
    start_launcher: StartLauncher
    check_ssh: SshCheck | None  # None: the launch needs no ssh (spawned ranks)
    log: Logger
    local: LocalRanks | None = None
    link: WorkerLink | None = None
    timeline: Timeline = field(default_factory=Timeline)  # the launcher's phases, every host
    # How many output batches the leader has taken so far: a rank's end is reported after its
    # output, so while output still arrives, the missing ends are on their way.
    output_taken: Callable[[], int] = lambda: 0
    # Where background work (the ssh checks) reports its end, and how it runs.
    post: Callable[[Event], None] = lambda event: None
    in_background: Callable[[Callable[[], None]], None] = start_thread
    # Every rank's stacks, once taken: shown, and after a hang kept in the job's files.
    keep_stacks: Callable[[HangReport], None] = lambda report: None
    # Each attempt's number as its launcher starts (metrics carry it).
    on_attempt: Callable[[int], None] = lambda attempt: None
    # This host's health checks before an attempt (ringleader_health; none when it is off).
    check_health: Callable[[int], Report] = lambda attempt: ()
    # The job's progress at a status line, into metrics.jsonl.
    record_status: Callable[[StatusSample], None] = lambda sample: None


class Leader:
    def __init__(
        self,
        host: str,
        workers: Sequence[str],
        timeouts: Timeouts,
        parts: LeaderParts,
        restart: RestartConfig | None = None,
        health: HealthConfig | None = None,
        progress: ProgressConfig | None = None,
    ) -> None:
        restart = restart or RestartConfig()
        setup = LeaderSetup(
            host,
            tuple(workers),
            timeouts,
            restart,
            tells_workers=parts.link is not None,
            checks_ssh=parts.check_ssh is not None,
            health=health or HealthConfig(),
            progress=progress or ProgressConfig(),
        )
        # a cluster's earlier runs' attempts come first
        self._state = LeaderState(setup, attempts=tuple(restart.history))
        self._parts = parts
        self.timeline = parts.timeline
        self._strategy: LaunchStrategy | None = None
        self._launcher: RunningLauncher | None = None
        self._ssh_slots = threading.BoundedSemaphore(SSH_CHECKS_AT_ONCE)

    # What the verdict and the tests read.
    @property
    def phase(self) -> Phase:
        return self._state.phase

    @property
    def state(self) -> LeaderState:
        return self._state

    @property
    def records(self) -> tuple[RankRecord, ...]:
        """Every rank's record of the last attempt, once it ended."""
        return self._state.records

    @property
    def world_size(self) -> int:
        return self._state.world_size

    @property
    def health(self) -> dict[str, Report]:
        """Every host's checks at the last health gate that every host reached."""
        return dict(self._state.health)

    @property
    def progress(self) -> tuple[StatusSample, ...]:
        """The job's progress at every status line said."""
        return self._state.progress

    @property
    def stragglers(self) -> tuple[Straggler, ...]:
        """Every straggler episode, in the order they ended."""
        return self._state.stragglers

    @property
    def attempts(self) -> list[AttemptRecord]:
        """Every start of the ranks, once it ended (a cluster's earlier runs' first)."""
        return list(self._state.attempts)

    def check_health(self, attempt: int) -> Report:
        """This host's health checks before `attempt` (the part's)."""
        return self._parts.check_health(attempt)

    def run(self, strategy: LaunchStrategy, health: Report = ()) -> Outcome:
        """Gather the workers, launch, supervise, restart while the rules allow: the outcome.
        `health`: this host's checks before the first attempt."""
        self._strategy = strategy
        try:
            begins: Input = JobBegins(strategy.world_size, health)  # may need the frameworks
        except JobError as error:
            begins = SetupFailed(error.exit_code, str(error))
        self._step(begins)
        self._until(Phase.DECIDED)
        assert self._state.outcome is not None
        return self._state.outcome

    def tell_workers(self, outcome: Outcome) -> None:
        """Send the exit code to every worker and wait (bounded) until each confirmed."""
        self.announce(outcome)
        self.await_confirmations()

    def announce(self, outcome: Outcome) -> None:
        """Send the exit code to every worker."""
        self._step(Announce(outcome))

    def await_confirmations(self) -> None:
        """Until every worker told confirmed (bounded by ringleader_finish_timeout)."""
        self._step(AwaitConfirmations())
        self._until(Phase.DONE)

    def _until(self, phase: Phase) -> None:
        while self._state.phase is not phase:
            event = self._parts.events.next(self._state.deadline)
            self._step(Deadline() if event is None else event)

    def _step(self, event: LeaderEvent) -> None:
        step_with_answers(step, self._state, event, self._parts.clock, self._apply, self._keep)

    def _keep(self, state: LeaderState) -> None:
        self._state = state

    def _apply(self, effect: Effect) -> Input | None:
        parts = self._parts
        match effect:
            case Log(text):
                parts.log(text)
            case MarkTimeline(marks):
                self.timeline.extend(marks)
            case CheckSsh(host, host_key, timeout):
                self._start_ssh_check(host, host_key, timeout)
            case PrepareAttempt(attempt):
                assert self._strategy is not None
                try:
                    return AttemptPrepared(self._strategy.prepare(attempt))
                except JobError as error:
                    return SetupFailed(error.exit_code, str(error))
            case StartLauncherEffect(attempt, plan):
                parts.on_attempt(attempt)
                self._launcher = parts.start_launcher(plan)
                return LauncherStarted()
            case Broadcast(message):
                if parts.link is not None:
                    parts.link.broadcast(message)
            case RecordStatus(sample):
                parts.record_status(sample)
            case TerminateEverywhere(grace):
                if parts.local is not None:
                    parts.local.terminate_all(grace)
                if parts.link is not None:
                    parts.link.broadcast(Terminate(grace))
            case KillLauncher():
                assert self._launcher is not None
                self._launcher.kill()
            case RequestStacks(reason):
                if parts.local is not None:
                    parts.local.dump_stacks(reason)
                if parts.link is not None:
                    parts.link.broadcast(DumpStacks(reason))
            case KeepStacks(report):
                parts.keep_stacks(report)
            case CheckOutput():
                return OutputChecked(parts.output_taken())
            case ReapAttempt(grace):
                if parts.local is not None:
                    parts.local.reap(grace)
                assert self._launcher is not None
                return AttemptReaped(
                    tuple(self._launcher.output_tail()), dict(self._launcher.rank_codes())
                )
            case BeginAttempt():
                if parts.local is not None:
                    parts.local.begin_attempt()  # reaped when the last attempt concluded
            case CheckHealth(attempt):
                return HealthChecked(parts.check_health(attempt))
            case Finish(exit_code, failure):
                if parts.link is not None:
                    parts.link.finish(exit_code, failure)
        return None

    def _start_ssh_check(self, host: str, host_key: str | None, timeout: float) -> None:
        """One check in the background (each is bounded by `timeout`); its end is an event."""
        check = self._parts.check_ssh
        assert check is not None

        def run() -> None:
            with self._ssh_slots:
                problem = check(host, host_key, timeout)
            if problem is None:
                self.timeline.mark(host, phases.SSH_CHECKED, self._parts.clock.time())
            self._parts.post(SshChecked(host, problem))

        self._parts.in_background(run)
