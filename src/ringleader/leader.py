"""The leader's state machine: wait for workers, launch mpirun, supervise, decide, tell workers.

Every wait is a bounded read of one event queue, fed by the control server (workers), the host
agent (local ranks), the launcher (mpirun exiting) and the SIGTERM handler.
"""

import concurrent.futures
import queue
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ringleader import exitcodes
from ringleader.agent import HostAgent
from ringleader.config import Timeouts
from ringleader.control import ControlServer
from ringleader.errors import JobError, StartupError
from ringleader.eventloop import earliest, next_event
from ringleader.events import (
    Event,
    LauncherExited,
    RankEnded,
    RankStarted,
    SigtermReceived,
    WorkerBye,
    WorkerHello,
    WorkerLost,
)
from ringleader.launcher import Launcher
from ringleader.log import log
from ringleader.outcome import JobFacts, Outcome, decide
from ringleader.records import RankRecord
from ringleader.sshd import ssh_problem

# After the launcher exits, how long to wait for rank records still in flight from workers.
RECORD_SETTLE_SECONDS = 2.0

# Called once the workers are up: the launcher's argv and environment (interface choice needs
# the workers' addresses, so it cannot be computed earlier).
PrepareLaunch = Callable[[], tuple[list[str], dict[str, str]]]
# Extra time beyond the grace period before the launcher itself is killed after SIGTERM.
KILL_MARGIN_SECONDS = 10.0


class JobStopped(Exception):
    """SIGTERM arrived before the job was launched."""

    def __init__(self, host: str) -> None:
        super().__init__(host)
        self.host = host


@dataclass
class _Run:
    started: dict[int, str] = field(default_factory=dict)  # rank -> host
    records: dict[int, RankRecord] = field(default_factory=dict)
    stopped_on: str | None = None
    lost_hosts: list[str] = field(default_factory=list)
    startup_error: str | None = None


class Leader:
    def __init__(
        self,
        host: str,
        workers: Sequence[str],
        timeouts: Timeouts,
        events: "queue.Queue[Event]",
        agent: HostAgent | None,
        server: ControlServer | None,
    ) -> None:
        self._host = host
        self._timeouts = timeouts
        self._events = events
        self._agent = agent
        self._server = server
        self._workers = tuple(workers)
        self.records: tuple[RankRecord, ...] = ()  # every rank's record, once the job ended
        self.world_size = 0
        self._settled: set[str] = set()  # workers that will not need the final exit message
        self._absent: set[str] = set()

    def run(self, prepare_launch: PrepareLaunch, world_size: int) -> Outcome:
        self.world_size = world_size
        try:
            self._wait_for_workers()
            argv, env = prepare_launch()
        except JobStopped as stopped:
            return decide(self._stopped_facts(stopped.host))
        except JobError as error:
            return decide(JobFacts(error_code=error.exit_code, error_message=str(error)))
        return self._supervise(argv, env, world_size)

    def _stopped_facts(self, host: str) -> JobFacts:
        return JobFacts(stopped_on=host, sigterm_grace=self._timeouts.sigterm_grace)

    def _wait_for_workers(self) -> None:
        """Wait for every worker's hello, checking ssh to each as soon as it says hello."""
        if not self._workers:
            return
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(self._workers), 32)) as pool:
            checks = self._collect_hellos(pool)
            problems = [problem for check in checks for problem in [check.result()] if problem]
        if problems:
            raise StartupError("ssh to worker host(s) failed: " + "; ".join(problems))
        log("all workers are up")

    def _collect_hellos(
        self, pool: concurrent.futures.Executor
    ) -> list["concurrent.futures.Future[str | None]"]:
        pending = set(self._workers)
        timeout = self._timeouts.startup
        log(f"waiting for {len(pending)} worker(s): {', '.join(sorted(pending))}")
        deadline = time.monotonic() + timeout
        checks = []
        while pending:
            event = next_event(self._events, deadline)
            if event is None:
                self._absent = set(pending)
                raise StartupError(
                    f"Host(s) {', '.join(sorted(pending))} never answered within {timeout:g} s "
                    "(ringleader_startup_timeout)."
                )
            if isinstance(event, WorkerHello):
                pending.discard(event.host)
                if event.error_code is not None:
                    self._settled.add(event.host)
                    raise _HostError(event.host, event.error_code, event.error_message or "")
                checks.append(pool.submit(ssh_problem, event.host, timeout))
            elif isinstance(event, WorkerLost) and event.host in self._workers:
                self._settled.add(event.host)
                raise StartupError(f"Host {event.host} disconnected before the job started.")
            elif isinstance(event, SigtermReceived):
                raise JobStopped(event.host)
        return checks

    def _supervise(self, argv: Sequence[str], env: dict[str, str], world_size: int) -> Outcome:
        timeouts = self._timeouts
        log("launching: " + shlex.join(argv))
        if self._server is not None:
            self._server.broadcast({"type": "launched"})
        launcher = Launcher(argv, env, self._events)
        run = _Run()
        launch_deadline: float | None = time.monotonic() + timeouts.startup
        kill_deadline: float | None = None
        while True:
            event = next_event(self._events, earliest(launch_deadline, kill_deadline))
            now = time.monotonic()
            if event is None:
                if kill_deadline is not None and now >= kill_deadline:
                    log("ranks did not exit within the grace period; killing the launcher")
                    launcher.kill()
                    kill_deadline = None
                elif launch_deadline is not None and now >= launch_deadline:
                    run.startup_error = self._missing_ranks_message(run.started, world_size)
                    log(run.startup_error)
                    launcher.kill()
                    launch_deadline = None
                continue
            if isinstance(event, RankStarted):
                run.started[event.rank] = event.host
                if len(run.started) >= world_size:
                    launch_deadline = None
            elif isinstance(event, RankEnded):
                run.records[event.record.rank] = event.record
            elif isinstance(event, SigtermReceived) and run.stopped_on is None:
                log(f"SIGTERM received on {event.host}: stopping every rank")
                run.stopped_on = event.host
                self._terminate_everywhere()
                kill_deadline = now + timeouts.sigterm_grace + KILL_MARGIN_SECONDS
            elif isinstance(event, WorkerLost):
                log(f"lost worker {event.host}: {event.reason}")
                run.lost_hosts.append(event.host)
                self._settled.add(event.host)
            elif isinstance(event, LauncherExited):
                log(f"launcher exited with code {event.exit_code}")
                return self._conclude(run, event.exit_code, launcher, world_size)

    def _conclude(
        self, run: _Run, launcher_code: int, launcher: Launcher, world_size: int
    ) -> Outcome:
        deadline = time.monotonic() + RECORD_SETTLE_SECONDS
        while set(run.started) - set(run.records):
            event = next_event(self._events, deadline)
            if event is None:
                break
            if isinstance(event, RankEnded):
                run.records[event.record.rank] = event.record
            elif isinstance(event, WorkerLost):
                run.lost_hosts.append(event.host)
                self._settled.add(event.host)
        if self._agent is not None:
            self._agent.reap(self._timeouts.sigterm_grace, self._timeouts.abort_grace)
        self.records = tuple(run.records[rank] for rank in sorted(run.records))
        facts = JobFacts(
            records=self.records,
            world_size=world_size,
            launcher_exit_code=launcher_code,
            launcher_output_tail=launcher.output_tail(),
            stopped_on=run.stopped_on,
            sigterm_grace=self._timeouts.sigterm_grace,
            lost_hosts=tuple(run.lost_hosts),
            error_code=exitcodes.HOST_UNREACHABLE if run.startup_error else None,
            error_message=run.startup_error,
        )
        return decide(facts)

    def _missing_ranks_message(self, started: dict[int, str], world_size: int) -> str:
        hosts = (self._host, *self._workers)
        per_host = world_size // len(hosts)
        counts = {host: list(started.values()).count(host) for host in hosts}
        missing = [host for host, count in counts.items() if count < per_host]
        return (
            f"Only {len(started)} of {world_size} ranks started within "
            f"{self._timeouts.startup:g} s (ringleader_startup_timeout); no MPI daemon "
            f"or rank came up on: {', '.join(missing) or 'unknown hosts'}."
        )

    def _terminate_everywhere(self) -> None:
        if self._agent is not None:
            self._agent.terminate_all()
        if self._server is not None:
            self._server.broadcast({"type": "terminate"})

    def tell_workers(self, outcome: Outcome) -> None:
        """Send the exit code to every worker and wait (bounded) until each confirmed."""
        if self._server is None:
            return
        self._server.finish(outcome.exit_code, outcome.failure)
        pending = set(self._workers) - self._settled - self._absent
        timeout = self._timeouts.finish
        deadline = time.monotonic() + timeout
        while pending:
            event = next_event(self._events, deadline)
            if event is None:
                log(
                    f"no confirmation within {timeout:g} s (ringleader_finish_timeout) "
                    f"from: {', '.join(sorted(pending))}"
                )
                return
            # A plain hello is a late worker still to be told; an error hello exits alone.
            if isinstance(event, WorkerBye | WorkerLost | WorkerHello) and (
                not isinstance(event, WorkerHello) or event.error_code is not None
            ):
                pending.discard(event.host)
        log("every worker has the exit code")


class _HostError(JobError):
    """A worker reported its own toolkit error (bad configuration, sshd failure)."""

    def __init__(self, host: str, code: int, message: str) -> None:
        super().__init__(message or f"host {host} reported an error")
        self.exit_code = code
