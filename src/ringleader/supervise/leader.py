"""The leader's state machine: wait for workers, launch, supervise, decide, tell workers.

The leader moves through explicit phases (`Phase`); in each, every wait is a bounded read of
one event source, fed by the control server (workers), the host agent (local ranks), the
launcher and the SIGTERM handler, and each kind of event has one handler. Its collaborators
(events, clock, local ranks, the link to the workers, how a launcher starts, the ssh check)
are injected, so each fault is a unit test without containers.
"""

import dataclasses
import enum
import shlex
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ringleader.config.job import RestartConfig, Timeouts
from ringleader.core import exitcodes
from ringleader.core import timeline as phases
from ringleader.core.attempts import AttemptRecord, first_line, refusal, with_history
from ringleader.core.errors import JobError, StartupError
from ringleader.core.exitcodes import first_failure
from ringleader.core.hang import HangReport, LastProgress, MissingStacks, hang_headline
from ringleader.core.outcome import (
    Hang,
    HostLoss,
    JobFacts,
    Outcome,
    blames_another_rank,
    decide,
    lost_hosts_outcome,
)
from ringleader.core.records import RankRecord
from ringleader.core.stacks import RankStacks
from ringleader.core.timeline import Mark, Timeline
from ringleader.launch.strategy import EndPolicy, LaunchPlan, LaunchStrategy, SshCheck
from ringleader.supervise.common import (
    KILL_MARGIN_SECONDS,
    LocalRanks,
    Logger,
    RunningLauncher,
    StartLauncher,
)
from ringleader.supervise.eventloop import Clock, EventSource, earliest
from ringleader.wire.events import (
    Event,
    LauncherExited,
    RankEnded,
    RanksExited,
    RanksProgressed,
    RankStarted,
    SigtermReceived,
    SshChecked,
    StacksRequested,
    StacksTaken,
    WorkerBye,
    WorkerHello,
    WorkerLost,
    WorkerReady,
)
from ringleader.wire.messages import (
    HANG,
    ON_DEMAND,
    DumpStacks,
    Launched,
    Message,
    Restart,
    Terminate,
)

__all__ = ["KILL_MARGIN_SECONDS", "Leader", "LeaderParts", "Phase"]

# After the launcher exits, how long to wait for rank records still in flight from workers,
# counted from the last output the leader took (a busy leader may be seconds behind).
RECORD_SETTLE_SECONDS = 2.0
SETTLE_CHECK_SECONDS = 0.25  # while settling: how often to look whether output still arrives
# After a host is lost: beyond the abort grace, before the launcher (which may wait minutes
# for the lost host's MPI daemon) is killed.
LOST_HOST_KILL_MARGIN_SECONDS = 0.5
SSH_CHECKS_AT_ONCE = 32  # the leader's ssh checks running at the same time, at most
# A deadline noticed later than this after it passed: the leader was starved of CPU meanwhile.
LATE_TIMER_SECONDS = 1.0


def start_thread(work: Callable[[], None]) -> None:
    threading.Thread(target=work, name="ssh-check", daemon=True).start()


class Phase(enum.Enum):
    GATHERING = "waiting for every worker's hello"
    LAUNCHING = "waiting for every rank to start"
    RUNNING = "every rank started"
    STOPPING = "every rank told to stop"
    SETTLING = "every launcher exited: collecting the last rank records"
    RESTARTING = "between two attempts: the backoff, and every worker getting ready"
    TELLING = "telling the workers the verdict"
    DONE = "done"


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


class JobStopped(Exception):
    """SIGTERM arrived before the job was launched."""

    def __init__(self, host: str, at: float) -> None:
        super().__init__(host)
        self.host = host
        self.at = at


@dataclass
class _StackDump:
    """Every rank was asked for its stacks: what has arrived."""

    reason: str  # HANG or ON_DEMAND
    deadline: float  # ringleader_stack_dump_timeout from the request
    expected: dict[int, str]  # rank -> host: the ranks running when they were asked
    stacks: dict[int, RankStacks] = field(default_factory=dict)


@dataclass
class _Run:
    """One launch, from the launcher's start to the verdict."""

    plan: LaunchPlan
    launcher: RunningLauncher
    launch_deadline: float | None  # every rank must have started by then
    attempt: int = 0  # events of another attempt's ranks are stale
    kill_deadline: float | None = None  # the launcher is killed then
    started: dict[int, str] = field(default_factory=dict)  # rank -> host
    records: dict[int, RankRecord] = field(default_factory=dict)
    stopped_on: str | None = None
    stopped_at: float = 0.0
    lost: dict[str, WorkerLost] = field(default_factory=dict)
    startup_error: str | None = None
    aborted: bool = False  # a rank failed and every other rank was told to stop
    # TensorFlow: ranks still running when every main task had ended (parameter servers):
    # stopped then, and their end is not a failure.
    released: frozenset[int] | None = None
    exited: dict[str, int] = field(default_factory=dict)  # host -> its launcher's code
    # The launcher was killed after every rank had ended (a wedged orted, or nothing left
    # after a stop): its exit code says nothing about the job, the ranks' records do.
    launcher_outlived_ranks: bool = False
    # The hang watch: when the job counts as hung unless some rank makes progress first.
    hang_deadline: float | None = None
    hang_patience: float = 0.0  # what a starved leader may still add to the deadline
    progress: dict[int, LastProgress] = field(default_factory=dict)  # each rank's latest
    dump: _StackDump | None = None
    hang: Hang | None = None

    @property
    def deadline(self) -> float | None:
        """The next moment something is due, if nothing happens before."""
        dump = self.dump.deadline if self.dump is not None else None
        return earliest(self.launch_deadline, self.kill_deadline, self.hang_deadline, dump)

    @property
    def ending(self) -> bool:
        """The job is being stopped, or ended: no hang to watch for."""
        return bool(self.stopped_on or self.aborted or self.lost or self.released or self.hang)

    @property
    def policy(self) -> EndPolicy:
        return self.plan.policy

    def unreported(self, hosts: Iterable[str]) -> set[int]:
        """Ranks started on `hosts` with no record yet (a set: one pass over the ranks, as
        it runs at every event while records arrive; 4,096 hosts x 8 ranks took 0.49 s)."""
        wanted = frozenset(hosts)
        return {
            rank
            for rank, host in self.started.items()
            if host in wanted and rank not in self.records
        }

    def stop_launcher_by(self, deadline: float) -> None:
        self.kill_deadline = earliest(self.kill_deadline, deadline)


class Leader:
    def __init__(
        self,
        host: str,
        workers: Sequence[str],
        timeouts: Timeouts,
        parts: LeaderParts,
        restart: RestartConfig | None = None,
    ) -> None:
        self._host = host
        self._workers = tuple(workers)
        self._hosts = (host, *self._workers)
        self._timeouts = timeouts
        self._restart = restart or RestartConfig()
        # every start of the ranks, once it ended (a cluster's earlier runs' first)
        self.attempts: list[AttemptRecord] = list(self._restart.history)
        self._parts = parts
        self._events = parts.events
        self._clock = parts.clock
        self._log = parts.log
        self.records: tuple[RankRecord, ...] = ()  # every rank's record, once the job ended
        self.timeline = parts.timeline
        self.world_size = 0
        self.phase = Phase.GATHERING
        self._settled: set[str] = set()  # workers that will not need the final exit message
        self._ssh_slots = threading.BoundedSemaphore(SSH_CHECKS_AT_ONCE)
        # Each worker's clock to the leader's (measured at its hello): every time compared
        # across hosts is on the leader's clock, never a remote wall clock.
        self._clock_offsets: dict[str, float] = {}

    def run(self, strategy: LaunchStrategy) -> Outcome:
        try:
            self.world_size = strategy.world_size  # may need the image's frameworks: can fail
            self._wait_for_workers()
        except JobStopped as stopped:
            return decide(
                JobFacts(
                    stopped_on=stopped.host,
                    stopped_at=stopped.at,
                    sigterm_grace=self._timeouts.sigterm_grace,
                )
            )
        except JobError as error:
            return decide(JobFacts(error_code=error.exit_code, error_message=str(error)))
        attempt = len(self.attempts)
        while True:
            started = self._clock.time()
            try:
                plan = strategy.prepare(attempt)
            except JobError as error:
                facts = JobFacts(error_code=error.exit_code, error_message=str(error))
                return with_history(decide(facts), self.attempts)
            facts, progressed = self._supervise(plan, attempt)
            outcome = decide(facts)
            self.attempts.append(
                AttemptRecord(
                    attempt,
                    started,
                    self._clock.time(),
                    outcome.exit_code,
                    first_line(outcome.failure),
                    self._hosts,
                    progressed,
                    tuple(loss.host for loss in facts.lost_hosts),
                )
            )
            why_not = refusal(self.attempts, facts, self._restart.max_restarts)
            if why_not is not None:
                if self._restart.enabled and not outcome.succeeded:
                    self._log(f"attempt {attempt} failed; no restart: {why_not}")
                return with_history(outcome, self.attempts[:-1])
            # this attempt's ranks on the job's timeline (the last one's are added with the
            # verdict)
            self.timeline.extend(phases.rank_marks(self.records))
            attempt += 1
            ended = self._between_attempts(attempt, outcome)
            if ended is not None:
                return with_history(ended, self.attempts)

    def _between_attempts(self, attempt: int, failed: Outcome) -> Outcome | None:
        """The backoff, while every worker ends what is left of the last attempt's ranks and
        says it is ready; the outcome instead when the job ends meanwhile (SIGTERM, a lost
        host, a worker not ready within ringleader_startup_timeout)."""
        self.phase = Phase.RESTARTING
        backoff, most = self._restart.backoff, self._restart.max_restarts
        self._log(
            f"attempt {attempt - 1} failed with exit code {failed.exit_code}; restarting every "
            f"rank in {backoff:g} s (ringleader_restart_backoff): attempt {attempt}, restart "
            f"{attempt} of {most} (ringleader_max_restarts)"
        )
        if self._parts.local is not None:
            self._parts.local.begin_attempt()  # reaped when the last attempt concluded
        waiting = set(self._workers) - self._settled
        if self._parts.link is not None:
            self._parts.link.broadcast(Restart(attempt))
        now = self._clock.monotonic()
        resume, deadline = now + backoff, now + self._timeouts.startup
        while waiting or now < resume:
            match self._events.next(deadline if waiting else resume):
                case None if waiting and self._clock.monotonic() >= deadline:
                    return Outcome(
                        exitcodes.HOST_UNREACHABLE,
                        f"Host(s) {', '.join(sorted(waiting))} did not get ready for attempt "
                        f"{attempt} within {self._timeouts.startup:g} s "
                        "(ringleader_startup_timeout).\n",
                    )
                case WorkerReady() as ready if ready.attempt == attempt:
                    waiting.discard(ready.host)
                case SigtermReceived() as sigterm:
                    self._log(f"SIGTERM received on {sigterm.host}: no further attempt")
                    stopped = JobFacts(
                        stopped_on=sigterm.host,
                        stopped_at=self._clock.time(),
                        sigterm_grace=self._timeouts.sigterm_grace,
                    )
                    return decide(stopped)
                case WorkerLost() as lost if lost.host in self._workers:
                    self._log(f"lost worker {lost.host} between attempts: {lost.reason}")
                    self._settled.add(lost.host)
                    return lost_hosts_outcome([HostLoss(lost.host, lost.reason, lost.last_heard)])
            now = self._clock.monotonic()
        return None

    def _wait_for_workers(self) -> None:
        """Wait for every worker's hello, checking ssh to each as soon as it says hello. The
        checks report through the event queue, so SIGTERM or a lost worker is handled at once
        while they run."""
        if not self._workers:
            return
        hellos, checks = set(self._workers), set[str]()
        problems: list[str] = []
        timeout = self._timeouts.startup
        self._log(f"waiting for {len(hellos)} worker(s): {', '.join(sorted(hellos))}")
        deadline = self._clock.monotonic() + timeout
        while hellos or checks:
            match self._events.next(deadline):
                case None if hellos:
                    self._settled.update(hellos)  # nobody there to tell the result
                    raise StartupError(
                        f"Host(s) {', '.join(sorted(hellos))} never answered within "
                        f"{timeout:g} s (ringleader_startup_timeout)."
                    )
                case None:
                    raise StartupError(
                        f"ssh to worker host(s) did not finish: {', '.join(sorted(checks))}."
                    )
                case WorkerHello() as hello if hello.host in hellos:
                    hellos.discard(hello.host)
                    self._clock_offsets[hello.host] = hello.clock_offset
                    if not hellos:  # each check is bounded by the timeout; 32 run at once
                        rounds = -(-len(self._workers) // SSH_CHECKS_AT_ONCE)
                        deadline = self._clock.monotonic() + rounds * timeout + 5.0
                    self.timeline.extend(self._on_leader_clock(hello.host, hello.marks))
                    if hello.error_code is not None:
                        self._settled.add(hello.host)
                        raise _HostError(hello.host, hello.error_code, hello.error_message or "")
                    if self._parts.check_ssh is not None:
                        checks.add(hello.host)
                        self._start_ssh_check(hello.host, hello.host_key, timeout)
                case SshChecked() as checked if checked.host in checks:
                    checks.discard(checked.host)
                    if checked.problem is not None:
                        problems.append(checked.problem)
                case WorkerLost() as lost if lost.host in self._workers:
                    self._settled.add(lost.host)
                    raise StartupError(
                        f"Host {lost.host} was lost before the job started: {lost.reason}."
                    )
                case SigtermReceived() as sigterm:
                    raise JobStopped(sigterm.host, self._clock.time())
        if problems:
            raise StartupError("ssh to worker host(s) failed: " + "; ".join(sorted(problems)))
        self._log("all workers are up")
        self.timeline.mark(self._host, phases.WORKERS_UP, self._clock.time())

    def _start_ssh_check(self, host: str, host_key: str | None, timeout: float) -> None:
        """One check in the background (each is bounded by `timeout`); its end is an event."""
        check = self._parts.check_ssh
        assert check is not None

        def run() -> None:
            with self._ssh_slots:
                problem = check(host, host_key, timeout)
            if problem is None:
                self.timeline.mark(host, phases.SSH_CHECKED, self._clock.time())
            self._parts.post(SshChecked(host, problem))

        self._parts.in_background(run)

    def _supervise(self, plan: LaunchPlan, attempt: int = 0) -> tuple[JobFacts, bool]:
        """Run the launcher to the attempt's end: when this host's launcher and every other
        host's own launcher in the plan's policy (spawned ranks, or the plain hosts of a
        heterogeneous cluster) have exited or their host was lost. The attempt's facts, and
        whether any rank made progress in it."""
        self._parts.on_attempt(attempt)
        self._announce_launch(plan)
        launcher = self._parts.start_launcher(plan)
        self.timeline.mark(self._host, phases.LAUNCHED, self._clock.time())
        now = self._clock.monotonic()
        run = _Run(plan, launcher, now + self._timeouts.startup, attempt)
        if self._timeouts.hang is not None:  # the job's start-up counts: it can hang too
            run.hang_deadline = now + self._timeouts.hang
            run.hang_patience = self._timeouts.hang
        self.phase = Phase.LAUNCHING
        while not self._every_launcher_exited(run):
            event = self._events.next(run.deadline)
            if event is None:
                self._on_deadline(run, self._clock.monotonic())
            else:
                self._on_event(run, event, self._clock.monotonic())
        if run.dump is not None:  # the job ended meanwhile: keep what arrived, no verdict
            self._stacks_complete(run, self._clock.monotonic(), job_ended=True)
        code = first_failure(list(run.exited.values()))
        if (run.policy.ranks_decide or run.launcher_outlived_ranks) and not run.unreported(
            self._hosts
        ):
            code = 0  # every rank reported: the ranks' own codes tell the story
        return self._conclude(run, code), bool(run.progress)

    def _announce_launch(self, plan: LaunchPlan) -> None:
        spawn = plan.spawn
        if spawn is None or self._host not in spawn.launching_hosts:
            self._log("launching: " + shlex.join(plan.argv))
        else:
            self._log(
                f"spawning {spawn.processes_per_host} rank(s) on each of {len(spawn.hosts)} "
                f"host(s): {shlex.join(plan.argv[plan.argv.index('--') + 1 :])}"
            )
        if spawn is not None and spawn.plain_hosts:
            self._log(f"outside the distribution, running the program once: {spawn.plain_hosts}")
        if self._parts.link is not None:
            self._parts.link.broadcast(Launched(spawn))

    def _every_launcher_exited(self, run: _Run) -> bool:
        others = run.policy.other_launchers
        return self._host in run.exited and others <= set(run.exited) | set(run.lost)

    def _on_event(self, run: _Run, event: Event, now: float) -> None:
        """One handler per kind of event; the others do not concern a running job."""
        match event:
            case RankStarted() if event.attempt != run.attempt:
                pass  # stale: a rank of an earlier attempt
            case RankEnded() if event.record.attempt != run.attempt:
                pass
            case RankStarted():
                self._on_rank_started(run, event)
            case RankEnded():
                self._on_rank_ended(run, self._record_on_leader_clock(event.record), now)
            case SigtermReceived():
                self._on_sigterm(run, event, now)
            case WorkerLost():
                self._on_worker_lost(run, event, now)
            case LauncherExited():
                self._log(f"launcher exited with code {event.exit_code}")
                run.exited[self._host] = event.exit_code
            case RanksExited() if event.host in run.policy.other_launchers:
                run.exited[event.host] = event.exit_code
            case RanksProgressed():
                self._on_progress(run, event, now)
            case StacksTaken():
                self._on_stacks(run, event, now)
            case StacksRequested():
                self._log(f"SIGQUIT on {event.host}: taking every rank's stacks")
                self._dump_stacks(run, ON_DEMAND, now)

    def _on_deadline(self, run: _Run, now: float) -> None:
        if run.dump is not None and now >= run.dump.deadline:
            self._stacks_complete(run, now)
        elif run.hang_deadline is not None and now >= run.hang_deadline:
            self._on_quiet(run, now)
        elif run.kill_deadline is not None and now >= run.kill_deadline:
            if len(run.records) >= self.world_size:
                run.launcher_outlived_ranks = True
                self._log(
                    f"every rank has ended; killing {run.policy.launcher_name}, still running"
                )
            else:
                self._log("ranks did not end within their grace period; killing the launcher")
            run.launcher.kill()
            run.kill_deadline = None
        elif run.launch_deadline is not None and now >= run.launch_deadline:
            run.startup_error = self._missing_ranks_message(run.started)
            self._log(run.startup_error)
            run.launcher.kill()
            run.launch_deadline = None

    def _on_progress(self, run: _Run, event: RanksProgressed, now: float) -> None:
        at = self._clock.time()
        for rank in event.ranks:
            run.progress[rank] = LastProgress(rank, event.host, at)
        if run.hang_deadline is not None and self._timeouts.hang is not None:
            run.hang_deadline = now + self._timeouts.hang

    def _on_quiet(self, run: _Run, now: float) -> None:
        """No progress reported for ringleader_hang_timeout: the job hung.

        Output reaching the leader is not progress by itself: Horovod's stall inspector
        repeats its warning while the job hangs. A leader behind on output still takes each
        host's progress reports, which travel with that host's output, in turn."""
        timeout = self._timeouts.hang
        assert timeout is not None and run.hang_deadline is not None
        late = now - run.hang_deadline
        if late > LATE_TIMER_SECONDS and not run.ending and run.hang_patience > 0:
            # This timer ran late: the leader itself was starved, and the threads that read the
            # workers' reports with it. Give them the time it lost (at most one timeout in all).
            extra = min(late, run.hang_patience)
            run.hang_patience -= extra
            run.hang_deadline = now + extra
            return
        run.hang_deadline = None
        if run.ending:
            return
        self._log(
            f"no rank made progress for {timeout:g} s (ringleader_hang_timeout): "
            "taking every rank's stacks"
        )
        self._dump_stacks(run, HANG, now)

    def _dump_stacks(self, run: _Run, reason: str, now: float) -> None:
        """Ask every running rank for its stacks (a hang's request replaces one on demand)."""
        if run.dump is not None and (run.dump.reason == HANG or reason == ON_DEMAND):
            return
        running = {rank: host for rank, host in run.started.items() if rank not in run.records}
        run.dump = _StackDump(reason, now + self._timeouts.stack_dump, running)
        if self._parts.local is not None:
            self._parts.local.dump_stacks(reason)
        if self._parts.link is not None:
            self._parts.link.broadcast(DumpStacks(reason))
        if not running:
            self._stacks_complete(run, now)

    def _on_stacks(self, run: _Run, event: StacksTaken, now: float) -> None:
        dump = run.dump
        if dump is None or event.reason != dump.reason:
            return  # late, for a request already answered
        stacks = event.stacks
        offset = self._clock_offsets.get(stacks.host, 0.0)
        dump.stacks[stacks.rank] = dataclasses.replace(stacks, taken_at=stacks.taken_at + offset)
        if set(dump.expected) <= set(dump.stacks) | set(run.records):
            self._stacks_complete(run, now)

    def _stacks_complete(self, run: _Run, now: float, job_ended: bool = False) -> None:
        """Every rank's stacks arrived, or ringleader_stack_dump_timeout passed (or the job
        ended): show them; after a hang, the verdict, and every rank is stopped."""
        dump = run.dump
        assert dump is not None
        run.dump = None
        missing = tuple(
            MissingStacks(rank, host, self._why_no_stacks(run, rank, host))
            for rank, host in sorted(dump.expected.items())
            if rank not in dump.stacks
        )
        stacks = tuple(dump.stacks[rank] for rank in sorted(dump.stacks))
        progress = tuple(run.progress[rank] for rank in sorted(run.progress))
        at = self._clock.time()
        timeout = self._timeouts.hang or 0.0
        if dump.reason == HANG:
            headline = hang_headline(stacks, missing, progress, timeout, at)
        else:
            headline = f"Every rank's stacks, {len(stacks)} of {len(dump.expected)} taken."
        report = HangReport(dump.reason, timeout, at, headline, stacks, missing, progress)
        self._parts.keep_stacks(report)
        if dump.reason != HANG or run.ending or job_ended:
            return
        run.hang = Hang(headline, tuple(report.summary_lines()[1:]), at)
        self._log(f"the job hung: {headline}")
        self._terminate_everywhere(self._timeouts.abort_grace)
        run.stop_launcher_by(now + self._timeouts.abort_grace + LOST_HOST_KILL_MARGIN_SECONDS)

    def _why_no_stacks(self, run: _Run, rank: int, host: str) -> str:
        if rank in run.records:
            return f"it ended ({run.records[rank].describe()}) before its stacks were taken"
        if host in run.lost:
            return f"its host was lost ({run.lost[host].reason})"
        return (
            f"they did not arrive within {self._timeouts.stack_dump:g} s "
            "(ringleader_stack_dump_timeout)"
        )

    def _on_rank_started(self, run: _Run, event: RankStarted) -> None:
        run.started[event.rank] = event.host
        if len(run.started) >= self.world_size:
            run.launch_deadline = None
            if self.phase is Phase.LAUNCHING:
                self.phase = Phase.RUNNING

    def _on_rank_ended(self, run: _Run, record: RankRecord, now: float) -> None:
        run.records[record.rank] = record
        stopping = self._abort_after(run, record)
        if run.policy.main_ranks is not None and self._release_after(run, run.policy.main_ranks):
            stopping = True
        if stopping:
            run.stop_launcher_by(now + self._timeouts.abort_grace + LOST_HOST_KILL_MARGIN_SECONDS)
        if len(run.records) < self.world_size:
            return
        if run.policy.launcher_holds_every_rank and run.kill_deadline is not None:
            run.kill_deadline = now  # stopped and every rank ended: mpirun has nothing left
        elif run.kill_deadline is None:
            # every rank ended by itself: a launcher that hangs on (a wedged MPI daemon) gets
            # ringleader_launcher_exit_timeout, then is killed
            run.kill_deadline = now + self._timeouts.launcher_exit

    def _on_sigterm(self, run: _Run, event: SigtermReceived, now: float) -> None:
        if run.stopped_on is not None:
            return
        self._log(f"SIGTERM received on {event.host}: stopping every rank")
        run.stopped_on, run.stopped_at = event.host, self._clock.time()
        self._terminate_everywhere(self._timeouts.sigterm_grace)
        run.stop_launcher_by(now + self._timeouts.sigterm_grace + KILL_MARGIN_SECONDS)

    def _on_worker_lost(self, run: _Run, event: WorkerLost, now: float) -> None:
        if not self._record_loss(run, event):
            return
        if run.stopped_on is None and len(run.lost) == 1:
            self._terminate_everywhere(self._timeouts.abort_grace)
        run.launch_deadline = None
        run.stop_launcher_by(now + self._timeouts.abort_grace + LOST_HOST_KILL_MARGIN_SECONDS)

    def _release_after(self, run: _Run, main_ranks: frozenset[int]) -> bool:
        """TensorFlow: once every main task (master/chief, or all mirrored workers) has ended,
        stop what still runs (parameter servers, never ending on their own), once."""
        if run.released is not None or not main_ranks <= set(run.records):
            return False
        run.released = frozenset(set(run.started) - set(run.records))
        if run.released and run.stopped_on is None and not run.aborted and not run.lost:
            roles = sorted(str(rank) for rank in run.released)
            self._log(f"every main task ended: stopping the rest (ranks {', '.join(roles)})")
            self._terminate_everywhere(self._timeouts.abort_grace)
        return bool(run.released)

    def _abort_after(self, run: _Run, record: RankRecord) -> bool:
        """A rank failed on its own: stop every other rank (abort grace), once.

        Under mpirun, not after a failure that blames another rank (Horovod shut down, ...):
        the rank that failed first may still be in MPI_Abort, and a stop from us would kill it
        before mpirun reports its code; mpirun's own abort follows such a failure anyway."""
        policy = run.policy
        if not policy.rank_failure_stops_all or not record.failed or record.terminated:
            return False
        if run.aborted or (policy.blamed_ranks_start_no_stop and blames_another_rank(record)):
            return False
        run.aborted = True
        if run.stopped_on is None and not run.lost:
            self._log(f"{record.describe()}: stopping every other rank")
            self._terminate_everywhere(self._timeouts.abort_grace)
        return True

    def _record_loss(self, run: _Run, event: WorkerLost) -> bool:
        """Note a worker lost while the job runs; False when it is not news."""
        if event.host not in self._workers or event.host in run.lost:
            return False
        self._log(f"lost worker {event.host}: {event.reason}")
        run.lost[event.host] = event
        self._settled.add(event.host)
        return True

    def _terminate_everywhere(self, grace: float) -> None:
        self.phase = Phase.STOPPING
        if self._parts.local is not None:
            self._parts.local.terminate_all(grace)
        if self._parts.link is not None:
            self._parts.link.broadcast(Terminate(grace))

    def _conclude(self, run: _Run, launcher_code: int) -> JobFacts:
        # After a loss, a host whose ranks stay silent may be lost too (a partition silences
        # every host at once, and busy machines notice each silence at its own time): wait
        # until it would count as lost, so the verdict names every lost host.
        self.phase = Phase.SETTLING
        settle = RECORD_SETTLE_SECONDS
        if run.lost:
            settle = max(settle, self._timeouts.leader_loss)
        deadline = self._clock.monotonic() + settle
        taken = self._parts.output_taken()
        while run.unreported([host for host in self._hosts if host not in run.lost]):
            event = self._events.next(min(deadline, self._clock.monotonic() + SETTLE_CHECK_SECONDS))
            if event is None:
                now = self._clock.monotonic()
                if self._parts.output_taken() != taken:  # still reading what the ranks printed
                    taken, deadline = self._parts.output_taken(), now + settle
                elif now >= deadline:
                    break
                continue
            if isinstance(event, RankEnded) and event.record.attempt == run.attempt:
                record = self._record_on_leader_clock(event.record)
                run.records[record.rank] = record
            elif isinstance(event, WorkerLost):
                self._record_loss(run, event)
        if self._parts.local is not None:
            self._parts.local.reap(self._timeouts.abort_grace)
        self.records = tuple(run.records[rank] for rank in sorted(run.records))
        losses = tuple(
            HostLoss(
                host=loss.host,
                reason=loss.reason,
                last_heard=loss.last_heard,
                ranks=tuple(sorted(run.unreported([loss.host]))),
                protocol_error=loss.protocol_error,
            )
            for loss in run.lost.values()
        )
        released = run.released or frozenset()
        facts = JobFacts(
            records=tuple(  # released ranks were stopped after the job's end
                record
                for record in self.records
                if not (record.rank in released and record.terminated)
            ),
            world_size=self.world_size,
            launcher_exit_code=launcher_code,
            launcher_name=run.policy.launcher_name,
            launcher_output_tail=run.launcher.output_tail(),
            mpi_aborts=tuple(sorted(run.launcher.rank_codes().items())),
            stopped_on=run.stopped_on,
            stopped_at=run.stopped_at,
            sigterm_grace=self._timeouts.sigterm_grace,
            lost_hosts=losses,
            hang=run.hang,
            error_code=exitcodes.HOST_UNREACHABLE if run.startup_error else None,
            error_message=run.startup_error,
        )
        return facts

    def _record_on_leader_clock(self, record: RankRecord) -> RankRecord:
        return record.on_clock(self._clock_offsets.get(record.host, 0.0))

    def _on_leader_clock(self, host: str, marks: Sequence[Mark]) -> tuple[Mark, ...]:
        offset = self._clock_offsets.get(host, 0.0)
        return tuple(Mark(mark.host, mark.phase, mark.at + offset) for mark in marks)

    def _missing_ranks_message(self, started: dict[int, str]) -> str:
        per_host = self.world_size // len(self._hosts)
        counts = {host: list(started.values()).count(host) for host in self._hosts}
        missing = [host for host, count in counts.items() if count < per_host]
        return (
            f"Only {len(started)} of {self.world_size} ranks started within "
            f"{self._timeouts.startup:g} s (ringleader_startup_timeout); no MPI daemon "
            f"or rank came up on: {', '.join(missing) or 'unknown hosts'}."
        )

    def tell_workers(self, outcome: Outcome) -> None:
        """Send the exit code to every worker and wait (bounded) until each confirmed."""
        self.announce(outcome)
        self.await_confirmations()

    def announce(self, outcome: Outcome) -> None:
        """Send the exit code to every worker."""
        self.phase = Phase.TELLING
        if self._parts.link is not None:
            self._parts.link.finish(outcome.exit_code, outcome.failure)

    def await_confirmations(self) -> None:
        """Until every worker told confirmed (bounded by ringleader_finish_timeout)."""
        pending = set(self._workers) - self._settled if self._parts.link is not None else set()
        timeout = self._timeouts.finish
        deadline = self._clock.monotonic() + timeout
        while pending:
            match self._events.next(deadline):
                case None:
                    self._log(
                        f"no confirmation within {timeout:g} s (ringleader_finish_timeout) "
                        f"from: {', '.join(sorted(pending))}"
                    )
                    break
                case WorkerBye() as bye:
                    pending.discard(bye.host)
                    self.timeline.extend(self._on_leader_clock(bye.host, bye.marks))
                case WorkerLost() as lost:
                    pending.discard(lost.host)
                # A plain hello is a late worker still to be told; an error hello exits alone.
                case WorkerHello() as hello if hello.error_code is not None:
                    pending.discard(hello.host)
        else:
            if self._parts.link is not None:
                self._log("every worker has the exit code")
        self.phase = Phase.DONE


class _HostError(JobError):
    """A worker reported its own toolkit error (bad configuration, sshd failure)."""

    def __init__(self, host: str, code: int, message: str) -> None:
        super().__init__(message or f"host {host} reported an error")
        self.exit_code = code
