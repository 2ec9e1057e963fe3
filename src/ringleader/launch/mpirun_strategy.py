"""mpirun on the leader starts every rank over ssh, pinned to the job's interface; every host
runs sshd for it first, and the leader checks ssh to each worker as it says hello."""

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ParamSpec, TypeVar

from ringleader.config.image import ImageSettings
from ringleader.config.job import JobConfig
from ringleader.config.mpi_options import forwarded_variables, sagemaker_nccl_options
from ringleader.core import paths
from ringleader.core.errors import StartupError
from ringleader.launch import jobkeys
from ringleader.launch.mpirun import (
    MPIRUN_OUTPUT,
    MpiPlan,
    build_mpirun_argv,
    has_rdma_devices,
    ignored_options,
    stops_all_on_rank_failure,
)
from ringleader.launch.openmpi import OpenMpiVersion, detect_open_mpi
from ringleader.launch.spawn import SpawnSpec
from ringleader.launch.sshd import SshMasters, sshd_command, start_sshd
from ringleader.launch.strategy import (
    EndPolicy,
    LaunchPlan,
    Logger,
    SshCheck,
    job_interface,
    rank_command,
    spawn_plan,
    world_size,
)


@dataclass
class SshSetup:
    """sshd on every host (a container's own; a cluster machine has its own running), and on
    the leader the ssh masters its checks leave for mpirun to reuse."""

    own_sshd: bool
    masters: SshMasters | None  # the leader's
    image: ImageSettings | None = None  # where the container's own sshd finds its files
    host_key: str | None = None  # made by start(), for this job only
    _pinned: dict[str, str] = field(default_factory=dict)  # the workers' host keys
    _pin_lock: threading.Lock = field(default_factory=threading.Lock)  # checks run at once

    def start(self, timeout: float) -> bool:
        if self.own_sshd:
            command = sshd_command(self.image)
            self.host_key = _with_keys(jobkeys.make_host_key, self._ssh_dir)
            start_sshd(command, paths.SSHD_NOTIFY_SOCKET, timeout)
        return self.own_sshd

    def client_key(self, job: str) -> str | None:
        if not self.own_sshd or self.image is None:
            return None  # a cluster machine's ssh uses the user's own keys
        public = _with_keys(jobkeys.make_client_key, self._ssh_dir, job)
        # The leader's own sshd too: no key left in an image set up by an older version
        # lets anyone in.
        _with_keys(jobkeys.authorize, self._ssh_dir, public)
        return public

    def authorize(self, client_key: str | None) -> None:
        # No key: a leader that only tells the job's result (it launches nothing), or a
        # cluster machine's own ssh. Nothing is let in then.
        if self.own_sshd and client_key is not None:
            _with_keys(jobkeys.authorize, self._ssh_dir, client_key)

    @property
    def check_worker(self) -> SshCheck | None:
        return self._check if self.masters is not None else None

    def _check(self, host: str, host_key: str | None, timeout: float) -> str | None:
        assert self.masters is not None
        if self.own_sshd:
            if host_key is None:
                return f"{host}: its hello carried no ssh host key"
            try:
                with self._pin_lock:  # each write holds every key pinned so far
                    self._pinned[host] = host_key
                    jobkeys.pin_hosts(self._ssh_dir, dict(self._pinned))
            except (OSError, ValueError) as error:
                return f"{host}: its host key cannot be pinned ({error})"
        return self.masters.check(host, timeout)

    @property
    def _ssh_dir(self) -> Path:
        if self.image is None:  # sshd_command() refused such an image already
            raise StartupError("this image was not prepared for mpi jobs")
        return Path(self.image.ssh_dir)

    def launcher_killed(self) -> None:
        if self.masters is not None:
            self.masters.end_sessions()

    def close(self, log: Logger) -> None:
        # A container's end takes its masters with it; a cluster machine outlives the job.
        if self.masters is not None and not self.own_sshd:
            self.masters.close(log)


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _with_keys(step: "Callable[_P, _R]", *args: _P.args, **kwargs: _P.kwargs) -> _R:
    """A step with the job's ssh keys; an OSError or a bad key in it is a StartupError."""
    try:
        return step(*args, **kwargs)
    except (OSError, ValueError) as error:
        raise StartupError(f"ssh keys of this job: {error}") from error


@dataclass(frozen=True)
class MpirunStrategy:
    config: JobConfig
    user_command: Callable[[], Sequence[str]]
    processes_per_host: int
    log: Logger
    setup: SshSetup = field(default_factory=lambda: SshSetup(own_sshd=False, masters=None))
    # The leader's mpirun is asked its Open MPI version once, when the job is launched.
    detect_mpi: Callable[[Logger], OpenMpiVersion] = detect_open_mpi

    @property
    def world_size(self) -> int:
        return world_size(self.config, self.processes_per_host)

    def prepare(self, attempt: int = 0) -> LaunchPlan:
        topology = self.config.topology
        choice = job_interface(self.config, self.log)
        custom = self.config.mpi.custom_options
        custom = (
            *sagemaker_nccl_options(custom, self.config.mpi.nccl_debug, choice.name, os.environ),
            *custom,
        )
        forwarded = forwarded_variables(custom)
        masters = self.setup.masters
        open_mpi = self.detect_mpi(self.log)
        self.log(f"mpirun: Open MPI {open_mpi} ({'PRRTE' if open_mpi.prrte else 'ORTE'})")
        for warning in ignored_options(self.config.mpi.custom_options, open_mpi):
            self.log(f"warning: {warning}")
        plan = MpiPlan(
            hosts=topology.participants,
            processes_per_host=self.processes_per_host,
            interface=choice.name,
            custom_options=custom,
            rank_command=tuple(rank_command(self.config, self.user_command(), forwarded, attempt)),
            exported=tuple(name for name in paths.RANK_VARIABLES if name in os.environ),
            rdma_devices=has_rdma_devices(),
            ssh_options=masters.reuse_options() if masters is not None else (),
            ssh_config=masters.config_options() if masters is not None else (),
            open_mpi=open_mpi,
            single_copy=not self.setup.own_sshd,  # a container's own sshd: in a container
            interface_networks=choice.networks,
        )
        stops_all = stops_all_on_rank_failure(self.config.mpi.custom_options, open_mpi)
        policy = EndPolicy(rank_failure_stops_all=stops_all)
        plain = None
        if topology.plain_hosts:  # heterogeneous: the hosts outside mpirun start their own
            plain = SpawnSpec(
                hosts=(),
                processes_per_host=self.processes_per_host,
                master_addr=topology.leader,
                master_port=self.config.spawn.master_port,
                run_id="",
                interface=None,
                torch=False,
                plain_hosts=topology.plain_hosts,
                first_plain_rank=plan.world_size,
                attempt=attempt,
            )
            policy = EndPolicy(
                other_launchers=frozenset(topology.plain_hosts),
                launcher_holds_every_rank=False,
                rank_failure_stops_all=stops_all,
            )
        argv = tuple(build_mpirun_argv(plan))
        return LaunchPlan(argv, dict(os.environ), plain, policy, MPIRUN_OUTPUT)

    def worker_plan(self, spec: SpawnSpec) -> LaunchPlan:
        """A host outside the distribution runs its one rank itself."""
        return spawn_plan(self.config, spec, self.user_command())
