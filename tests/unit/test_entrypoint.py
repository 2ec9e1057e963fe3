"""The composition root with injected parts: each role and each early failure, no containers.

Fakes stand where the root meets the outside world (the host agent, the control server, the
connection to the leader, the launcher); what they report goes through the root's own event
queue, as the real ones do.
"""

import json
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from ringleader.config.job import ConfigFiles, JobConfig, Timeouts
from ringleader.core import exitcodes
from ringleader.core.errors import StartupError
from ringleader.core.health import FAILED, NOT_CHECKED, OK, CheckResult, Report
from ringleader.core.records import RankRecord
from ringleader.core.timeline import Mark
from ringleader.launch.health import Check, HealthCheck, HostChecks
from ringleader.launch.hostprep import CommandShape
from ringleader.launch.select import HostFacts
from ringleader.launch.spawn import SpawnSpec
from ringleader.launch.strategy import LaunchPlan, NoSetup
from ringleader.source.usercode import PreparationStopped
from ringleader.supervise.entrypoint import EntryPoint
from ringleader.supervise.eventloop import EventQueue
from ringleader.supervise.parts import RootParts
from ringleader.supervise.verdict import ResultFiles
from ringleader.wire import messages
from ringleader.wire.control import Admission, Joined, LeaderAddress
from ringleader.wire.events import (
    LauncherExited,
    LeaderMessage,
    RankEnded,
    RankStarted,
    WorkerBye,
    WorkerHello,
)
from ringleader.wire.protocol import ChannelClosed, OutputHandler
from tests.unit.test_core_control import record_of

HOSTS = ["algo-1", "algo-2", "algo-3"]
QUICK = {"ringleader_startup_timeout": "5", "ringleader_finish_timeout": "5"}


def record(rank: int, host: str, code: int = 0) -> RankRecord:
    return record_of(rank, host, exit_code=code)


@dataclass
class FakeAgent:
    closed: bool = False

    def terminate_all(self, grace: float) -> None:
        pass

    def reap(self, abort_grace: float) -> None:
        pass

    def dump_stacks(self, reason: str) -> None:
        pass

    def begin_attempt(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeServer:
    """The control server: every worker says hello at once and confirms the verdict."""

    events: EventQueue
    workers: Sequence[str]
    hello_errors: dict[str, tuple[int, str]] = field(default_factory=dict)
    hello_health: dict[str, Report] = field(default_factory=dict)
    say_hello: bool = True
    sent: list[messages.Message] = field(default_factory=list)
    final: tuple[int, str | None] | None = None
    closed: bool = False

    def __post_init__(self) -> None:
        for host in self.workers if self.say_hello else ():
            error = self.hello_errors.get(host)
            if error is None:
                self.events.put(WorkerHello(host, health=self.hello_health.get(host, ())))
            else:
                self.events.put(WorkerHello(host, error[0], error[1]))

    def broadcast(self, message: messages.Message) -> None:
        self.sent.append(message)

    def finish(self, exit_code: int, failure: str | None) -> None:
        self.final = (exit_code, failure)
        for host in self.workers:
            if host not in self.hello_errors:
                self.events.put(WorkerBye(host))

    def close(self) -> dict[str, str]:
        self.closed = True
        return {host: "3 pulses" for host in self.workers}


@dataclass
class FakeLauncher:
    def kill(self) -> None:
        pass

    def output_tail(self) -> tuple[str, ...]:
        return ()

    def rank_codes(self) -> dict[int, int]:
        return {}


@dataclass
class FakeChannel:
    sent: list[messages.Message] = field(default_factory=list)
    closed: bool = False

    def send(self, message: messages.Message) -> None:
        self.sent.append(message)

    def receive_frame(self, timeout: float) -> bytes:
        raise ChannelClosed("the leader exited")

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeLink:
    """A worker's link to the leader: the leader launches, then sends the verdict."""

    channel: FakeChannel
    events: EventQueue
    rig: "Rig"
    sent: list[messages.Message] = field(default_factory=list)

    def hello(
        self,
        marks: Sequence[Mark] = (),
        host_key: str | None = None,
        health: Report = (),
        probe_address: str | None = None,
        error: tuple[int, str] | None = None,
    ) -> None:
        """The leader answers a hello with its verdict: success, or the host's own error."""
        self.sent.append(messages.Hello(self.rig.host, None, tuple(marks), None, host_key, health))
        self.rig.hello_report = health
        code, failure = error if error is not None else (0, None)
        self.events.put(LeaderMessage(messages.Exit(code, failure)))

    def until_closed(self, seconds: float) -> None:
        self.rig.waited_for_the_leader = seconds

    def send(self, message: messages.Message) -> None:
        self.sent.append(message)
        if isinstance(message, messages.Bye):
            self.events.put(_leader_gone())

    def close(self) -> str:
        return "no pulse missed"


def _leader_gone() -> Any:
    from ringleader.wire.events import LeaderLost

    return LeaderLost("the leader closed the connection")


@dataclass(frozen=True)
class FakeStrategy:
    """Ranks on every host; its setup is nothing (sshd is another test's business)."""

    world_size: int
    setup: NoSetup = field(default_factory=NoSetup)

    def prepare(self, attempt: int = 0) -> LaunchPlan:
        return LaunchPlan(("launcher",), {})

    def worker_plan(self, spec: SpawnSpec) -> LaunchPlan:
        return LaunchPlan(("launcher",), {}, spec)


@dataclass(frozen=True)
class FailingSetup(NoSetup):
    """sshd that does not come up."""

    def start(self, timeout: float) -> bool:
        raise StartupError("sshd exited with code 255 before it was ready")


class Rig:
    """Configuration files in a temporary directory, and every part of the root faked."""

    def __init__(self, tmp_path: Path, current: str, **hyperparameters: Any) -> None:
        self.host = current
        self.waited_for_the_leader: float | None = None  # after reporting its own error
        self.config_dir = tmp_path / "config"
        self.config_dir.mkdir()
        self.output_dir = tmp_path / "output"
        self.write("resourceconfig.json", {"hosts": HOSTS, "current_host": current})
        self.write(
            "hyperparameters.json",
            {"ringleader_command": ["python", "train.py"], **QUICK, **hyperparameters},
        )
        self.logs: list[str] = []
        self.details: list[str] = []
        self.connects: list[str] = []
        self.jobs: list[str] = []  # the job identity each server and connection was given
        self.channel = FakeChannel()
        self.servers: list[FakeServer] = []
        self.hello_errors: dict[str, tuple[int, str]] = {}
        self.hello_health: dict[str, Report] = {}
        self.hello_report: Report | None = None  # what this host's hello carried (a worker)
        self.launched: list[LaunchPlan] = []
        self.leader_answers = True
        self.setup: NoSetup = NoSetup()
        self.parts = RootParts(
            files=ConfigFiles(self.config_dir),
            environ={},
            own_sshd=False,
            hostname=current,
            prepare_host=self.prepare_host,
            prepare_code=lambda config, stop: None,
            select=self.select,
            agent=lambda events, on_output: FakeAgent(),
            control_server=self.control_server,
            connect=self.connect,
            leader_link=self.leader_link,
            probe=self.probe,
            start_launcher=self.start_launcher,
            gpus=lambda: 0,
            health=self.health,
            results=ResultFiles(tmp_path / "job.json", self.output_dir),
            logger=self.logs.append,
            detail_logger=self.details.append,
        )
        self.ml_root = tmp_path / "ml"
        for part in ("output", "model"):
            (self.ml_root / part).mkdir(parents=True)
        self.health_checked: list[tuple[str, int, Report]] = []
        self.probed: list[tuple[str, str, str, str]] = []  # (host, target, its address, interface)

    def health(self, config: JobConfig, host: str) -> HealthCheck:
        """The real checks, on this test's directories; what each host found is kept."""
        checks = HostChecks(config, host, ml_root=self.ml_root, environ={})

        def check(attempt: int, more: Sequence[tuple[str, Check]] = ()) -> Report:
            report = checks.run(attempt, more)
            self.health_checked.append((host, attempt, report))
            return report

        return check

    def probe(
        self, target: LeaderAddress, host: str, name: str, interface: str, stop: threading.Event
    ) -> Check:
        """No network: the target a worker probes is kept, and it answers."""
        self.probed.append((host, name, target.host, interface))
        return lambda seconds: CheckResult("", OK, f"{target.host} reached")

    def write(self, name: str, value: object) -> None:
        (self.config_dir / name).write_text(json.dumps(value))

    def prepare_host(self, config: JobConfig, shape: CommandShape) -> list[str]:
        return list(config.source.command)

    def select(
        self, config: JobConfig, facts: HostFacts, user_command: Callable[[], Sequence[str]]
    ) -> FakeStrategy:
        per_host = 1 if config.distribution == "none" else 2
        return FakeStrategy(per_host * len(config.topology.participants), self.setup)

    def control_server(
        self,
        port: int,
        events: EventQueue,
        timeouts: Timeouts,
        workers: Sequence[str],
        on_output: OutputHandler,
        admission: Admission,
    ) -> FakeServer:
        self.jobs.append(admission.job)
        server = FakeServer(events, workers, self.hello_errors, self.hello_health)
        self.servers.append(server)
        return server

    def connect(
        self, leader: LeaderAddress, host: str, link: str, deadline: float, stop: threading.Event
    ) -> Joined | None:
        self.connects.append(leader.host)
        self.jobs.append(leader.job)
        return Joined(self.channel, None) if self.leader_answers else None  # type: ignore[arg-type]

    def leader_link(
        self,
        host: str,
        leader: str,
        control: FakeChannel,
        pulse: FakeChannel,
        timeouts: Timeouts,
        events: EventQueue,
    ) -> FakeLink:
        self.link = FakeLink(control, events, self)
        return self.link

    def start_launcher(self, plan: LaunchPlan, events: EventQueue, setup: object) -> FakeLauncher:
        """Every rank of the job starts and ends with 0; their hosts report it."""
        self.launched.append(plan)
        hosts = HOSTS if plan.spawn is None else [plan.spawn.hosts[0]]
        ranks = [(rank, host) for rank, host in enumerate(host for host in hosts for _ in "ab")]
        for rank, host in ranks:
            events.put(RankStarted(rank, host))
        for rank, host in ranks:
            events.put(RankEnded(record(rank, host)))
        events.put(LauncherExited(0))
        return FakeLauncher()

    def run(self, parts: RootParts | None = None) -> tuple[int, str | None]:
        outcome = EntryPoint(parts or self.parts).run()
        return outcome.exit_code, outcome.failure

    def result_file(self) -> str:
        failure = self.output_dir / "failure"
        if failure.exists():
            return failure.read_text()
        assert (self.output_dir / "success").exists()
        return "success"


def test_the_leader_launches_once_every_worker_said_hello_and_tells_them_the_verdict(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, "algo-1", sagemaker_mpi_enabled=True)
    assert rig.run() == (0, None)
    assert len(rig.launched) == 1
    assert rig.servers[0].final == (0, None)
    assert rig.servers[0].closed
    assert rig.result_file() == "success"
    # Each worker's pulse statistics are a detail: the log file, not the job's stdout.
    assert rig.details == ["pulses from algo-2: 3 pulses", "pulses from algo-3: 3 pulses"]
    assert not any("pulses" in line for line in rig.logs)
    summary = json.loads((tmp_path / "job.json").read_text())
    assert summary["exit_code"] == 0 and len(summary["ranks"]) == 6


def test_without_a_distribution_every_host_runs_alone_with_no_control_server(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, "algo-2")
    assert rig.run() == (0, None)
    assert rig.servers == [] and rig.connects == []
    assert rig.result_file() == "success"


def test_a_worker_follows_the_leader_and_writes_its_verdict(tmp_path: Path) -> None:
    rig = Rig(tmp_path, "algo-3", sagemaker_mpi_enabled=True)
    assert rig.run() == (0, None)
    assert rig.connects == ["algo-1", "algo-1"]  # control and pulse
    assert any(isinstance(message, messages.Bye) for message in rig.link.sent)
    assert rig.result_file() == "success"
    assert rig.launched == []  # mpirun on the leader starts this host's ranks


def test_sigquit_on_a_worker_asks_the_leader_for_every_ranks_stacks(tmp_path: Path) -> None:
    """Ctrl-\\ (or `docker kill --signal QUIT`) on any host: the leader dumps every rank's
    stacks; the worker goes on and ends with the job's code."""
    rig = Rig(tmp_path, "algo-3", sagemaker_mpi_enabled=True)
    entry: EntryPoint

    def prepared(config: JobConfig, stop: threading.Event) -> None:
        entry.on_quit(signal.SIGQUIT, None)
        events = entry._context.events  # the handler posts from a thread: wait until it did
        with events.not_empty:
            assert events.not_empty.wait_for(lambda: events.queue, timeout=10)  # its lock is held

    entry = EntryPoint(replace(rig.parts, prepare_code=prepared))
    assert entry.run().exit_code == 0
    assert messages.StacksWanted("algo-3") in rig.link.sent


def test_a_configuration_error_on_a_worker_is_reported_to_the_leader(tmp_path: Path) -> None:
    rig = Rig(tmp_path, "algo-2", sagemaker_mpi_enabled=True, ringleader_log_ranks="many")
    code, failure = rig.run()
    assert code == exitcodes.CONFIG_ERROR
    assert failure is not None and failure.startswith("Host algo-2: ")
    assert "ringleader_log_ranks" in failure
    (hello,) = rig.channel.sent
    assert isinstance(hello, messages.Hello) and hello.error is not None
    assert hello.error.code == exitcodes.CONFIG_ERROR
    assert rig.channel.closed
    assert rig.result_file() == failure


def test_a_configuration_error_on_the_leader_is_told_to_every_worker(tmp_path: Path) -> None:
    rig = Rig(tmp_path, "algo-1", sagemaker_mpi_enabled=True, ringleader_log_ranks="many")
    code, failure = rig.run()
    assert code == exitcodes.CONFIG_ERROR
    (server,) = rig.servers
    assert server.final == (code, failure)
    assert rig.launched == []


@dataclass(frozen=True)
class KeylessSetup(NoSetup):
    """ssh-keygen that fails on the leader."""

    def client_key(self, job: str) -> str | None:
        raise StartupError("ssh keys of this job: ssh-keygen exited with code 1")


def test_a_leader_without_the_jobs_ssh_key_tells_every_worker_and_launches_nothing(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, "algo-1", sagemaker_mpi_enabled=True)
    rig.setup = KeylessSetup()
    code, failure = rig.run()
    assert code == exitcodes.HOST_UNREACHABLE
    assert failure == "Host algo-1: ssh keys of this job: ssh-keygen exited with code 1\n"
    (server,) = rig.servers
    assert server.final == (code, failure)
    assert rig.launched == []


def test_a_worker_whose_leader_never_answers_exits_69_naming_the_timeout(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, "algo-2", sagemaker_mpi_enabled=True)
    rig.leader_answers = False
    code, failure = rig.run()
    assert code == exitcodes.HOST_UNREACHABLE
    assert failure is not None
    assert "the leader algo-1 never answered on port 29100 within 5 s" in failure
    assert "(ringleader_startup_timeout)" in failure
    assert rig.result_file() == failure


def test_a_worker_reporting_an_error_to_the_leader_is_named_by_the_leader(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, "algo-1", sagemaker_mpi_enabled=True)
    rig.hello_errors["algo-3"] = (exitcodes.CONFIG_ERROR, "Host algo-3: bad setting")
    code, failure = rig.run()
    assert code == exitcodes.CONFIG_ERROR
    assert failure is not None and "Host algo-3: bad setting" in failure
    assert rig.launched == []


def test_sigterm_during_the_code_preparation_of_a_worker_ends_it_with_143(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, "algo-2", sagemaker_mpi_enabled=True)
    entry: EntryPoint

    def stopped(config: JobConfig, stop: threading.Event) -> None:
        entry.on_signal(15, None)
        assert stop.is_set()
        raise PreparationStopped("sagemaker_submit_directory", "installing requirements")

    entry = EntryPoint(replace(rig.parts, prepare_code=stopped))
    outcome = entry.run()
    assert outcome.exit_code == exitcodes.SIGTERM_EXIT
    assert outcome.failure is not None and "installing requirements" in outcome.failure
    (hello,) = rig.channel.sent  # the leader still hears why
    assert isinstance(hello, messages.Hello) and hello.error is not None
    assert hello.error.code == exitcodes.SIGTERM_EXIT


def test_sigterm_on_the_leader_before_the_workers_are_up_ends_the_job_with_143(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, "algo-1", sagemaker_mpi_enabled=True)
    entry: EntryPoint

    def control_server(*args: Any) -> FakeServer:
        server = FakeServer(args[1], args[3], say_hello=False)  # nobody is up yet
        rig.servers.append(server)
        entry.on_signal(15, None)
        return server

    entry = EntryPoint(replace(rig.parts, control_server=control_server))
    outcome = entry.run()
    assert outcome.exit_code == exitcodes.SIGTERM_EXIT
    assert rig.launched == []
    assert rig.servers[0].final is not None and rig.servers[0].final[0] == 143


def test_sshd_failing_on_a_worker_is_reported_with_its_hello(tmp_path: Path) -> None:
    rig = Rig(tmp_path, "algo-3", sagemaker_mpi_enabled=True)
    rig.setup = FailingSetup()
    code, failure = rig.run()
    assert code == exitcodes.HOST_UNREACHABLE
    assert failure is not None and "sshd exited with code 255" in failure
    (hello,) = rig.channel.sent
    assert isinstance(hello, messages.Hello) and hello.error is not None


def test_an_unreadable_host_list_is_still_reported_to_the_leader_it_names(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, "algo-2")
    parts = replace(
        rig.parts,
        environ={"SM_HOSTS": json.dumps(HOSTS), "SM_CURRENT_HOST": "algo-9"},
    )
    code, failure = rig.run(parts)
    assert code == exitcodes.CONFIG_ERROR
    assert failure is not None and "algo-9" in failure
    assert rig.connects == ["algo-1"]


def test_a_full_disk_for_the_result_file_never_changes_the_exit_code(tmp_path: Path) -> None:
    rig = Rig(tmp_path, "algo-2", sagemaker_mpi_enabled=True)
    rig.output_dir.mkdir()
    (rig.output_dir / "success").mkdir()  # writing it fails as a full disk would
    (rig.output_dir / "success" / "x").write_text("")
    assert rig.run() == (0, None)
    assert any("could not write the result file" in line for line in rig.logs)


def test_sigterm_during_the_artifact_delivery_ends_the_host_with_the_jobs_code(
    tmp_path: Path,
) -> None:
    """Issue 23: a delivery that SIGTERM interrupts is given up, not waited for until the
    container is killed (137)."""
    rig = Rig(tmp_path, "algo-2", ringleader_output_uri=str(tmp_path / "delivered"))
    entry: EntryPoint
    uploading = threading.Event()
    release = threading.Event()

    def deliver(uri: object, host: str) -> None:
        uploading.set()
        entry.on_signal(15, None)
        release.wait(60)  # a large upload still running

    entry = EntryPoint(replace(rig.parts, deliver=deliver))
    try:
        outcome = entry.run()
    finally:
        release.set()
    assert uploading.is_set()
    assert (outcome.exit_code, outcome.failure) == (0, None)
    assert any("not delivered" in line and "SIGTERM" in line for line in rig.logs)


def test_a_delivery_that_ends_is_waited_for(tmp_path: Path) -> None:
    rig = Rig(tmp_path, "algo-2", ringleader_output_uri=str(tmp_path / "delivered"))
    delivered: list[str] = []
    parts = replace(rig.parts, deliver=lambda uri, host: delivered.append(host))
    assert rig.run(parts) == (0, None)
    assert delivered == ["algo-2"]
    assert not any("not delivered" in line for line in rig.logs)


def test_a_worker_stopped_while_it_connects_still_tells_the_leader(tmp_path: Path) -> None:
    """Issue 23: stopped during start-up, a worker exited 143 without a word, and the leader
    waited for its hello until ringleader_startup_timeout (69)."""
    rig = Rig(tmp_path, "algo-2", sagemaker_mpi_enabled=True)
    entry: EntryPoint
    attempts: list[bool] = []

    def connect(
        leader: LeaderAddress, host: str, link: str, deadline: float, stop: threading.Event
    ) -> Joined | None:
        attempts.append(stop.is_set())
        if len(attempts) == 1:  # SIGTERM while the leader is not up yet
            entry.on_signal(15, None)
            return None
        return Joined(rig.channel, None)  # type: ignore[arg-type]

    entry = EntryPoint(replace(rig.parts, connect=connect))
    outcome = entry.run()
    assert outcome.exit_code == exitcodes.SIGTERM_EXIT
    (hello,) = rig.channel.sent
    assert isinstance(hello, messages.Hello) and hello.error is not None
    assert hello.error.code == exitcodes.SIGTERM_EXIT
    assert attempts == [False, False]  # the report's connection is not cut by the stop


# ----------------------------------------------------------------------------- health gate
def test_a_workers_hello_carries_its_health_checks(tmp_path: Path) -> None:
    rig = Rig(tmp_path, "algo-3", sagemaker_mpi_enabled=True)
    assert rig.run() == (0, None)
    assert rig.hello_report is not None
    found = {result.name: result.status for result in rig.hello_report}
    output = str(rig.ml_root / "output")
    assert found[f"free disk {output}"] == OK and found["/dev/shm"] == OK
    assert found["free memory"] == OK
    assert found["GPUs"] == NOT_CHECKED and found["EFA"] == NOT_CHECKED
    assert any(line.startswith("health before attempt 0: free disk") for line in rig.logs)
    # it probed the leader, after its join, on the job's interface
    assert found["reach leader algo-1"] == OK
    assert rig.probed == [("algo-3", "algo-1", "algo-1", "eth0")]


def test_a_worker_probes_the_leader_at_its_address_on_the_jobs_interface(tmp_path: Path) -> None:
    rig = Rig(tmp_path, "algo-2", sagemaker_mpi_enabled=True)
    welcome = Joined(rig.channel, None, ("10.0.2.1", "10.0.3.1"))  # type: ignore[arg-type]
    parts = replace(rig.parts, connect=lambda *args: welcome)
    assert EntryPoint(parts).run().exit_code == 0
    assert rig.probed == [("algo-2", "algo-1", "10.0.2.1", "eth0")]


def test_a_worker_that_cannot_reach_the_leader_says_so_in_its_hello(tmp_path: Path) -> None:
    rig = Rig(tmp_path, "algo-2", sagemaker_mpi_enabled=True)
    cut_off = CheckResult("", FAILED, "cannot connect to 10.0.2.1:29100 on eth0")
    parts = replace(rig.parts, probe=lambda *args: lambda seconds: cut_off)
    EntryPoint(parts).run()
    assert rig.hello_report is not None
    (reach,) = [result for result in rig.hello_report if result.name == "reach leader algo-1"]
    assert reach.status == FAILED and reach.detail == cut_off.detail


def checking_rig(tmp_path: Path, host: str, check: str) -> Rig:
    """`host` of an mpi job whose hosts run `check` (ringleader_health_check) in its code
    directory."""
    (tmp_path / "code").mkdir()
    return Rig(
        tmp_path,
        host,
        sagemaker_mpi_enabled=True,
        sagemaker_submit_directory=str(tmp_path / "code"),
        ringleader_health_check=check,
    )


def test_a_leader_failing_its_own_check_launches_nothing_and_every_worker_is_told(
    tmp_path: Path,
) -> None:
    rig = checking_rig(tmp_path, "algo-1", "sh -c 'echo scratch is read-only; exit 3'")
    code, failure = rig.run()
    assert code == exitcodes.HEALTH_CHECK_FAILED
    assert failure is not None and failure.startswith(
        "Host algo-1 failed its health check before the job started: health check: sh exited "
        "with code 3: scratch is read-only."
    )
    assert failure.splitlines()[0].endswith("read-only. No rank was started.")
    (server,) = rig.servers
    assert server.final == (code, failure)
    assert rig.launched == []


def test_every_worker_failing_a_check_is_named_and_nothing_starts(tmp_path: Path) -> None:
    rig = Rig(tmp_path, "algo-1", sagemaker_mpi_enabled=True)
    shm = CheckResult("/dev/shm", FAILED, "1.0 MiB in all, at least 64.0 MiB wanted")
    port = CheckResult("port 7777", FAILED, "cannot be bound: held by pid 9 (nc -l 7777)")
    rig.hello_health = {"algo-2": (shm,), "algo-3": (CheckResult("GPUs", OK, "8"), port)}
    code, failure = rig.run()
    assert code == exitcodes.HEALTH_CHECK_FAILED
    assert failure is not None
    lines = failure.splitlines()
    assert lines[0] == (
        "Hosts algo-2, algo-3 failed their health checks before the job started; first "
        "algo-2: /dev/shm: 1.0 MiB in all, at least 64.0 MiB wanted. No rank was started."
    )
    assert "  algo-3: port 7777: cannot be bound: held by pid 9 (nc -l 7777)" in lines
    assert rig.launched == []


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("./no-such-check", "'./no-such-check' was not found (it runs in "),
        ("sh -c 'unclosed", "cannot split"),
        ("", "expected a command line, got nothing"),
    ],
)
def test_a_health_check_that_cannot_run_is_a_configuration_error(
    tmp_path: Path, value: str, problem: str
) -> None:
    (tmp_path / "code").mkdir()
    code_dir = str(tmp_path / "code")
    rig = Rig(
        tmp_path,
        "algo-1",
        sagemaker_mpi_enabled=True,
        sagemaker_submit_directory=code_dir,
        ringleader_health_check=value,
    )
    code, failure = rig.run()
    assert code == exitcodes.CONFIG_ERROR
    assert failure is not None and "Configuration error in ringleader_health_check: " in failure
    assert problem in failure
    assert rig.launched == []


def test_with_health_off_nothing_is_checked(tmp_path: Path) -> None:
    rig = Rig(tmp_path, "algo-1", sagemaker_mpi_enabled=True, ringleader_health="off")
    assert rig.run() == (0, None)
    assert rig.health_checked == [("algo-1", 0, ())]
    assert not any(line.startswith("health before") for line in rig.logs)


def test_a_worker_whose_check_cannot_run_tells_the_leader_on_its_link(tmp_path: Path) -> None:
    """Its checks run after its join (pulses flowing): a configuration error in them is its
    hello's error, and it waits for the leader to end the job."""
    rig = checking_rig(tmp_path, "algo-2", "./no-such-check")
    code, failure = rig.run()
    assert code == exitcodes.CONFIG_ERROR
    assert failure is not None
    assert failure.startswith("Host algo-2: Configuration error in ringleader_health_check: ")
    assert rig.waited_for_the_leader is not None  # bounded: finish + leader_loss
    assert rig.launched == []
