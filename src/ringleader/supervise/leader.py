"""The leader's state machine: wait for workers, launch, supervise, decide, tell workers.

Every wait is a bounded read of one event source, fed by the control server (workers), the
host agent (local ranks), the launcher and the SIGTERM handler. Its collaborators (events,
clock, local ranks, the link to the workers, how a launcher starts, the ssh check) are
injected, so each fault is a unit test without containers.
"""

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ringleader.config.job import Timeouts
from ringleader.core import exitcodes
from ringleader.core import timeline as phases
from ringleader.core.errors import JobError, StartupError
from ringleader.core.outcome import HostLoss, JobFacts, Outcome, blames_another_rank, decide
from ringleader.core.records import RankRecord
from ringleader.core.timeline import Timeline
from ringleader.launch.spawn import first_failure
from ringleader.launch.strategy import LaunchPlan, LaunchStrategy
from ringleader.supervise.eventloop import Clock, EventSource, earliest
from ringleader.wire.events import (
    LauncherExited,
    RankEnded,
    RanksExited,
    RankStarted,
    SigtermReceived,
    WorkerBye,
    WorkerHello,
    WorkerLost,
)
from ringleader.wire.messages import Launched, Message, Terminate

if TYPE_CHECKING:
    import concurrent.futures

# After the launcher exits, how long to wait for rank records still in flight from workers,
# counted from the last output the leader took (a busy leader may be seconds behind).
RECORD_SETTLE_SECONDS = 2.0
SETTLE_CHECK_SECONDS = 0.25  # while settling: how often to look whether output still arrives
# Extra time beyond the grace period before the launcher itself is killed after SIGTERM.
KILL_MARGIN_SECONDS = 10.0
# After a host is lost: beyond the abort grace, before the launcher (which may wait minutes
# for the lost host's MPI daemon) is killed.
LOST_HOST_KILL_MARGIN_SECONDS = 0.5

Logger = Callable[[str], None]
SshCheck = Callable[[str, float], str | None]  # (host, timeout) -> problem or None


class LocalRanks(Protocol):
    """This host's ranks (the host agent)."""

    def terminate_all(self, grace: float) -> None: ...

    def reap(self, abort_grace: float) -> None: ...


class WorkerLink(Protocol):
    """The workers (the control server)."""

    def broadcast(self, message: Message) -> None: ...

    def finish(self, exit_code: int, failure: str | None) -> None: ...


class RunningLauncher(Protocol):
    def kill(self) -> None: ...

    def output_tail(self) -> tuple[str, ...]: ...

    def rank_codes(self) -> Mapping[int, int]:
        """rank -> exit code, as the launcher's own output reported them."""


StartLauncher = Callable[[LaunchPlan], RunningLauncher]


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


class JobStopped(Exception):
    """SIGTERM arrived before the job was launched."""

    def __init__(self, host: str, at: float) -> None:
        super().__init__(host)
        self.host = host
        self.at = at


@dataclass
class _Run:
    started: dict[int, str] = field(default_factory=dict)  # rank -> host
    records: dict[int, RankRecord] = field(default_factory=dict)
    stopped_on: str | None = None
    stopped_at: float = 0.0
    lost: dict[str, WorkerLost] = field(default_factory=dict)
    startup_error: str | None = None
    aborted: bool = False  # a spawned rank failed and every other rank was told to stop
    # TensorFlow: ranks still running when every main task had ended (parameter servers):
    # stopped then, and their end is not a failure.
    released: frozenset[int] | None = None
    exited: dict[str, int] = field(default_factory=dict)  # spawned: host -> launcher code
    # The launcher was killed after every rank had ended (a wedged orted, or nothing left
    # after a stop): its exit code says nothing about the job, the ranks' records do.
    launcher_outlived_ranks: bool = False

    def unreported(self, hosts: Sequence[str]) -> set[int]:
        return {
            rank
            for rank, host in self.started.items()
            if host in hosts and rank not in self.records
        }


class Leader:
    def __init__(
        self, host: str, workers: Sequence[str], timeouts: Timeouts, parts: LeaderParts
    ) -> None:
        self._host = host
        self._workers = tuple(workers)
        self._hosts = (host, *self._workers)
        self._timeouts = timeouts
        self._parts = parts
        self._events = parts.events
        self._clock = parts.clock
        self._log = parts.log
        self.records: tuple[RankRecord, ...] = ()  # every rank's record, once the job ended
        self.timeline = parts.timeline
        self.world_size = 0
        self._settled: set[str] = set()  # workers that will not need the final exit message

    def run(self, strategy: LaunchStrategy) -> Outcome:
        try:
            self.world_size = strategy.world_size  # may need the image's frameworks: can fail
            self._wait_for_workers()
            plan = strategy.prepare()
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
        return self._supervise(plan)

    def _wait_for_workers(self) -> None:
        """Wait for every worker's hello, checking ssh to each as soon as it says hello."""
        if not self._workers:
            return
        import concurrent.futures  # here: the leader's ssh checks only (it imports logging)

        with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(self._workers), 32)) as pool:
            checks = self._collect_hellos(pool)
            problems = [problem for check in checks for problem in [check.result()] if problem]
        if problems:
            raise StartupError("ssh to worker host(s) failed: " + "; ".join(problems))
        self._log("all workers are up")
        self.timeline.mark(self._host, phases.WORKERS_UP, self._clock.time())

    def _collect_hellos(
        self, pool: "concurrent.futures.Executor"
    ) -> list["concurrent.futures.Future[str | None]"]:
        pending = set(self._workers)
        timeout = self._timeouts.startup
        self._log(f"waiting for {len(pending)} worker(s): {', '.join(sorted(pending))}")
        deadline = self._clock.monotonic() + timeout
        checks = []
        while pending:
            event = self._events.next(deadline)
            if event is None:
                self._settled.update(pending)  # nobody there to tell the result
                raise StartupError(
                    f"Host(s) {', '.join(sorted(pending))} never answered within {timeout:g} s "
                    "(ringleader_startup_timeout)."
                )
            if isinstance(event, WorkerHello) and event.host in pending:
                pending.discard(event.host)
                self.timeline.extend(event.marks)
                if event.error_code is not None:
                    self._settled.add(event.host)
                    raise _HostError(event.host, event.error_code, event.error_message or "")
                if self._parts.check_ssh is not None:
                    checks.append(pool.submit(self._check_ssh, event.host, timeout))
            elif isinstance(event, WorkerLost) and event.host in self._workers:
                self._settled.add(event.host)
                raise StartupError(
                    f"Host {event.host} was lost before the job started: {event.reason}."
                )
            elif isinstance(event, SigtermReceived):
                raise JobStopped(event.host, self._clock.time())
        return checks

    def _check_ssh(self, host: str, timeout: float) -> str | None:
        assert self._parts.check_ssh is not None
        problem = self._parts.check_ssh(host, timeout)
        if problem is None:
            self.timeline.mark(host, phases.SSH_CHECKED, self._clock.time())
        return problem

    def _supervise(self, plan: LaunchPlan) -> Outcome:
        """Run the launcher to the job's end. mpirun ends the job when it exits; spawned
        ranks end it when every host's own launcher has exited (or the host was lost), and
        the leader stops everyone when one of them fails, as mpirun would."""
        timeouts = self._timeouts
        spawn, policy = plan.spawn, plan.policy
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
        launcher = self._parts.start_launcher(plan)
        self.timeline.mark(self._host, phases.LAUNCHED, self._clock.time())
        # The job ends when this host's launcher and every other host's own launcher (spawned
        # ranks, or the plain hosts of a heterogeneous cluster) have exited or the host was lost.
        waits_for = set(policy.other_launchers)
        launcher_name = policy.launcher_name
        main_ranks = policy.main_ranks
        run = _Run()
        launch_deadline: float | None = self._clock.monotonic() + timeouts.startup
        kill_deadline: float | None = None
        while True:
            event = self._events.next(earliest(launch_deadline, kill_deadline))
            now = self._clock.monotonic()
            if event is None:
                if kill_deadline is not None and now >= kill_deadline:
                    if len(run.records) >= self.world_size:
                        run.launcher_outlived_ranks = True
                        self._log(f"every rank has ended; killing {launcher_name}, still running")
                    else:
                        self._log(
                            "ranks did not end within their grace period; killing the launcher"
                        )
                    launcher.kill()
                    kill_deadline = None
                elif launch_deadline is not None and now >= launch_deadline:
                    run.startup_error = self._missing_ranks_message(run.started)
                    self._log(run.startup_error)
                    launcher.kill()
                    launch_deadline = None
                continue
            if isinstance(event, RankStarted):
                run.started[event.rank] = event.host
                if len(run.started) >= self.world_size:
                    launch_deadline = None
            elif isinstance(event, RankEnded):
                run.records[event.record.rank] = event.record
                stopping = self._abort_after(run, event.record, plan)
                if main_ranks is not None and self._release_after(run, main_ranks):
                    stopping = True
                if stopping:
                    kill_deadline = earliest(
                        kill_deadline, now + timeouts.abort_grace + LOST_HOST_KILL_MARGIN_SECONDS
                    )
                if (
                    policy.launcher_holds_every_rank
                    and kill_deadline is not None
                    and len(run.records) >= self.world_size
                ):
                    kill_deadline = now  # stopped and every rank ended: mpirun has nothing left
                elif kill_deadline is None and len(run.records) >= self.world_size:
                    # every rank ended by itself: a launcher that hangs on (a wedged MPI
                    # daemon) gets ringleader_launcher_exit_timeout, then is killed
                    kill_deadline = now + timeouts.launcher_exit
            elif isinstance(event, SigtermReceived) and run.stopped_on is None:
                self._log(f"SIGTERM received on {event.host}: stopping every rank")
                run.stopped_on, run.stopped_at = event.host, self._clock.time()
                self._terminate_everywhere(timeouts.sigterm_grace)
                kill_deadline = earliest(
                    kill_deadline, now + timeouts.sigterm_grace + KILL_MARGIN_SECONDS
                )
            elif isinstance(event, WorkerLost) and self._record_loss(run, event):
                if run.stopped_on is None and len(run.lost) == 1:
                    self._terminate_everywhere(timeouts.abort_grace)
                launch_deadline = None
                kill_deadline = earliest(
                    kill_deadline, now + timeouts.abort_grace + LOST_HOST_KILL_MARGIN_SECONDS
                )
            elif isinstance(event, LauncherExited):
                self._log(f"launcher exited with code {event.exit_code}")
                run.exited[self._host] = event.exit_code
            elif isinstance(event, RanksExited) and event.host in waits_for:
                run.exited[event.host] = event.exit_code
            if self._host in run.exited and waits_for <= set(run.exited) | set(run.lost):
                code = first_failure(list(run.exited.values()))
                if (policy.ranks_decide or run.launcher_outlived_ranks) and not run.unreported(
                    self._hosts
                ):
                    code = 0  # every rank reported: the ranks' own codes tell the story
                return self._conclude(run, code, launcher, launcher_name)

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

    def _abort_after(self, run: _Run, record: RankRecord, plan: LaunchPlan) -> bool:
        """A rank failed on its own: stop every other rank (abort grace), once.

        Under mpirun, not after a failure that blames another rank (Horovod shut down, ...):
        the rank that failed first may still be in MPI_Abort, and a stop from us would kill it
        before mpirun reports its code; mpirun's own abort follows such a failure anyway."""
        if not plan.policy.rank_failure_stops_all or not record.failed or record.terminated:
            return False
        if run.aborted or (plan.policy.blamed_ranks_start_no_stop and blames_another_rank(record)):
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

    def _conclude(
        self, run: _Run, launcher_code: int, launcher: RunningLauncher, launcher_name: str
    ) -> Outcome:
        # After a loss, a host whose ranks stay silent may be lost too (a partition silences
        # every host at once, and busy machines notice each silence at its own time): wait
        # until it would count as lost, so the verdict names every lost host.
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
            if isinstance(event, RankEnded):
                run.records[event.record.rank] = event.record
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
            launcher_name=launcher_name,
            launcher_output_tail=launcher.output_tail(),
            mpi_aborts=tuple(sorted(launcher.rank_codes().items())),
            stopped_on=run.stopped_on,
            stopped_at=run.stopped_at,
            sigterm_grace=self._timeouts.sigterm_grace,
            lost_hosts=losses,
            error_code=exitcodes.HOST_UNREACHABLE if run.startup_error else None,
            error_message=run.startup_error,
        )
        return decide(facts)

    def _missing_ranks_message(self, started: dict[int, str]) -> str:
        per_host = self.world_size // len(self._hosts)
        counts = {host: list(started.values()).count(host) for host in self._hosts}
        missing = [host for host, count in counts.items() if count < per_host]
        return (
            f"Only {len(started)} of {self.world_size} ranks started within "
            f"{self._timeouts.startup:g} s (ringleader_startup_timeout); no MPI daemon "
            f"or rank came up on: {', '.join(missing) or 'unknown hosts'}."
        )

    def _terminate_everywhere(self, grace: float) -> None:
        if self._parts.local is not None:
            self._parts.local.terminate_all(grace)
        if self._parts.link is not None:
            self._parts.link.broadcast(Terminate(grace))

    def tell_workers(self, outcome: Outcome) -> None:
        """Send the exit code to every worker and wait (bounded) until each confirmed."""
        self.announce(outcome)
        self.await_confirmations()

    def announce(self, outcome: Outcome) -> None:
        """Send the exit code to every worker."""
        if self._parts.link is not None:
            self._parts.link.finish(outcome.exit_code, outcome.failure)

    def await_confirmations(self) -> None:
        """Until every worker told confirmed (bounded by ringleader_finish_timeout)."""
        if self._parts.link is None:
            return
        pending = set(self._workers) - self._settled
        timeout = self._timeouts.finish
        deadline = self._clock.monotonic() + timeout
        while pending:
            event = self._events.next(deadline)
            if event is None:
                self._log(
                    f"no confirmation within {timeout:g} s (ringleader_finish_timeout) "
                    f"from: {', '.join(sorted(pending))}"
                )
                return
            # A plain hello is a late worker still to be told; an error hello exits alone.
            if isinstance(event, WorkerBye | WorkerLost) or (
                isinstance(event, WorkerHello) and event.error_code is not None
            ):
                pending.discard(event.host)
                if isinstance(event, WorkerBye):
                    self.timeline.extend(event.marks)
        self._log("every worker has the exit code")


class _HostError(JobError):
    """A worker reported its own toolkit error (bad configuration, sshd failure)."""

    def __init__(self, host: str, code: int, message: str) -> None:
        super().__init__(message or f"host {host} reported an error")
        self.exit_code = code
