"""The collaborators the entry point composes, as protocols, and the real ones.

Unit tests of the root (tests/unit/test_entrypoint.py) pass fakes of the same shapes: every
role and every early failure is a test without containers.
"""

import functools
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ringleader.config.job import ConfigFiles, JobConfig, Timeouts
from ringleader.core import paths
from ringleader.core.health import Report
from ringleader.core.timeline import Mark
from ringleader.launch.health import Check, HealthCheck, HostChecks
from ringleader.launch.hostprep import CommandShape, prepare_host
from ringleader.launch.process import Launcher
from ringleader.launch.select import HostFacts, select_strategy
from ringleader.launch.strategy import HostSetup, LaunchPlan, LaunchStrategy
from ringleader.output import log
from ringleader.source import usercode
from ringleader.supervise.common import LocalRanks, RunningLauncher
from ringleader.supervise.eventloop import Clock, EventQueue, SystemClock
from ringleader.supervise.leader import WorkerLink
from ringleader.supervise.verdict import ResultFiles
from ringleader.supervise.worker import LeaderLink as LinkToLeader
from ringleader.wire.agent import HostAgent
from ringleader.wire.control import (
    Admission,
    ControlServer,
    Joined,
    LeaderAddress,
    Liveness,
    connect_to_leader,
)
from ringleader.wire.events import LauncherExited
from ringleader.wire.leader_link import LeaderLink
from ringleader.wire.probe import probe_check
from ringleader.wire.protocol import Channel, OutputHandler

if TYPE_CHECKING:
    from ringleader.artifacts import OutputUri


class HostRanks(LocalRanks, Protocol):
    """This host's ranks, through the agent every rank wrapper reports to."""

    def close(self) -> None: ...


class Workers(WorkerLink, Protocol):
    """The leader's control server."""

    def close(self) -> dict[str, str]:
        """Ends the links; each worker's pulse statistics."""
        ...


class Leader(LinkToLeader, Protocol):
    """A worker's link to its leader."""

    @property
    def channel(self) -> Channel: ...

    def hello(
        self,
        marks: Sequence[Mark] = (),
        host_key: str | None = None,
        health: Report = (),
        probe_address: str | None = None,
        error: tuple[int, str] | None = None,
    ) -> None:
        """This host's first message, once its checks are done (or its error)."""

    def until_closed(self, seconds: float) -> None:
        """Wait, at most `seconds`, for the leader to close the control connection."""

    def close(self) -> str:
        """Stop watching; how the pulses went, for the log."""


# leader, this host, which link, deadline, stop
Connect = Callable[[LeaderAddress, str, str, float, threading.Event], Joined | None]
MakeAgent = Callable[[EventQueue, OutputHandler], HostRanks]
# port, events, timeouts, workers, output handler, whom to admit
MakeServer = Callable[[int, EventQueue, Timeouts, Sequence[str], OutputHandler, Admission], Workers]
# host, leader, control, pulse, timeouts, events
MakeLink = Callable[[str, str, Channel, Channel, Timeouts, EventQueue], Leader]
# the job, this host -> its health checker (attempt -> its checks)
MakeHealth = Callable[[JobConfig, str], HealthCheck]
# target, this host, the target's name, the job's interface, stop -> the reachability check
MakeProbe = Callable[[LeaderAddress, str, str, str, threading.Event], Check]
StartLauncher = Callable[[LaunchPlan, EventQueue, HostSetup], RunningLauncher]
SelectStrategy = Callable[[JobConfig, HostFacts, Callable[[], Sequence[str]]], LaunchStrategy]


def _agent(events: EventQueue, on_output: OutputHandler) -> HostAgent:
    return HostAgent(paths.AGENT_SOCKET, events, on_output)


def _control_server(
    port: int,
    events: EventQueue,
    timeouts: Timeouts,
    workers: Sequence[str],
    on_output: OutputHandler,
    admission: Admission,
) -> ControlServer:
    liveness = Liveness(timeouts.pulse_interval, timeouts.leader_loss)
    return ControlServer(port, events, liveness, on_output, workers, log.log, admission)


def _leader_link(
    host: str,
    leader: str,
    control: Channel,
    pulse: Channel,
    timeouts: Timeouts,
    events: EventQueue,
) -> LeaderLink:
    liveness = Liveness(timeouts.pulse_interval, timeouts.leader_loss)
    return LeaderLink(host, leader, control, pulse, liveness, events)


def _health(config: JobConfig, host: str) -> HealthCheck:
    return HostChecks(config, host).run


def _start_launcher(plan: LaunchPlan, events: EventQueue, setup: HostSetup) -> Launcher:
    def exited(code: int) -> None:
        events.put(LauncherExited(code))

    return Launcher(plan.argv, plan.env, exited, setup.launcher_killed, plan.output)


def _prepare_code(config: JobConfig, stop: threading.Event) -> None:
    """Fetch, extract and install the user's code; a missing output bucket fails now."""
    usercode.prepare(config.source, stop)
    if config.output_uri is not None:
        from ringleader import artifacts  # boto3: only for jobs that deliver

        artifacts.check_output_uri(config.output_uri)


def _deliver(uri: "OutputUri", host: str) -> None:
    """This host's output.tar.gz and model.tar.gz to the output URI (after every job).

    A failed delivery keeps the local archive, is logged and noted in the failure file, and
    never changes the job's exit code."""
    from ringleader import artifacts

    report = artifacts.collect(paths.OUTPUT_DIR, artifacts.MODEL_DIR, uri, host, log=log.log)
    for line in report.summary_lines():
        log.log(line)
    artifacts.append_note(paths.FAILURE_FILE, report.failure_note())


def gpu_count() -> int:
    return len(list(Path("/proc/driver/nvidia/gpus").glob("*")))


@dataclass(frozen=True)
class RootParts:
    files: ConfigFiles
    environ: Mapping[str, str]
    own_sshd: bool  # a container starts its own sshd; a cluster machine has one running
    hostname: str
    prepare_host: Callable[[JobConfig, CommandShape], list[str]]
    secret: bytes | None = None  # the job's, from its launcher (ringleader.wire.auth)
    prepare_code: Callable[[JobConfig, threading.Event], None] = _prepare_code
    select: SelectStrategy = select_strategy
    agent: MakeAgent = _agent
    control_server: MakeServer = _control_server
    connect: Connect = connect_to_leader
    leader_link: MakeLink = _leader_link
    start_launcher: StartLauncher = _start_launcher
    deliver: Callable[["OutputUri", str], None] = _deliver
    gpus: Callable[[], int] = gpu_count
    health: MakeHealth = _health
    probe: MakeProbe = probe_check
    clock: Clock = field(default_factory=SystemClock)
    results: ResultFiles = field(default_factory=ResultFiles)
    logger: Callable[[str], None] = log.log
    detail_logger: Callable[[str], None] = log.detail  # the host's log file; stdout if verbose


def real_parts(
    files: ConfigFiles, own_sshd: bool, hostname: str, secret: bytes | None = None
) -> RootParts:
    return RootParts(
        files=files,
        environ=os.environ,
        own_sshd=own_sshd,
        hostname=hostname,
        prepare_host=functools.partial(prepare_host, files, log=log.log),
        secret=secret,
    )
