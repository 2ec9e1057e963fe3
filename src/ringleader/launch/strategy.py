"""How ranks are started: one seam, with the supervision around it unchanged.

A strategy turns the job's configuration into the command that starts every rank (called by
the leader once the workers are up, since choosing the interface needs their addresses). Each
rank runs under the per-rank wrapper (`python -m ringleader.rank`), which reports to its host's
agent whatever started it.
"""

import contextlib
import dataclasses
import importlib.util
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ringleader.config.job import (
    MULTI_WORKER_MIRRORED,
    PARAMETER_SERVER,
    PS_FRAMEWORK_AUTO,
    TORCH_DISTRIBUTED,
    JobConfig,
)
from ringleader.config.mpi_options import forwarded_variables, sagemaker_nccl_options
from ringleader.core import paths
from ringleader.core.errors import ConfigError
from ringleader.launch import tfconfig
from ringleader.launch.mpirun import (
    MpiPlan,
    build_mpirun_argv,
    has_rdma_devices,
    stops_all_on_rank_failure,
)
from ringleader.launch.netif import InterfaceChoice, choose_interface, local_interfaces, resolve
from ringleader.launch.spawn import SpawnSpec, spawn_argv

Logger = Callable[[str], None]


@dataclass(frozen=True)
class LaunchPlan:
    """The launcher this host runs; with `spawn`, every host runs its own from that spec."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    spawn: SpawnSpec | None = None
    # One rank failing stops every other rank at once through our own channel (mpirun's
    # own abort takes seconds across many hosts).
    stops_all_on_rank_failure: bool = True


class LaunchStrategy(Protocol):
    @property
    def world_size(self) -> int: ...

    def prepare(self) -> LaunchPlan:
        """The launcher's command; raises JobError when it cannot be built."""


def rank_command(
    config: JobConfig, user_command: Sequence[str], forwarded: Sequence[str]
) -> list[str]:
    """The per-rank wrapper around the user's command."""
    return [
        paths.RANK_PYTHON,
        "-m",
        "ringleader.rank",
        "--grace",
        f"{config.timeouts.sigterm_grace:g}",
        "--abort-grace",
        f"{config.timeouts.abort_grace:g}",
        "--cwd",
        config.code_dir,
        "--forwarded",
        ",".join(forwarded),
        # Only ranks whose output is shown or metered go to the leader; every host keeps the
        # others in their rank logs (the leader of a large job would spend its CPU on them).
        "--relay-ranks",
        str(config.log_ranks.union(config.metric_ranks)),
        "--",
        *user_command,
    ]


@dataclass(frozen=True)
class SingleHostStrategy:
    """One rank on this host, started directly (one host, or MPI off)."""

    config: JobConfig
    user_command: Callable[[], Sequence[str]]
    world_size: int = 1

    def prepare(self) -> LaunchPlan:
        argv = rank_command(self.config, self.user_command(), ())
        return LaunchPlan(tuple(argv), dict(os.environ, RINGLEADER_RANK="0"))


@dataclass(frozen=True)
class MpirunStrategy:
    """mpirun on the leader starts every rank over ssh, pinned to the job's interface."""

    config: JobConfig
    user_command: Callable[[], Sequence[str]]
    processes_per_host: int
    log: Logger
    ssh_options: tuple[str, ...] = ()  # for mpirun's ssh (see SshMasters)

    @property
    def world_size(self) -> int:
        return world_size(self.config, self.processes_per_host)

    def prepare(self) -> LaunchPlan:
        topology = self.config.topology
        choice = job_interface(self.config, self.log)
        custom = self.config.custom_mpi_options
        custom = (
            *sagemaker_nccl_options(custom, self.config.nccl_debug, choice.name, os.environ),
            *custom,
        )
        forwarded = forwarded_variables(custom)
        plan = MpiPlan(
            hosts=topology.participants,
            processes_per_host=self.processes_per_host,
            interface=choice.name,
            custom_options=custom,
            rank_command=tuple(rank_command(self.config, self.user_command(), forwarded)),
            exported=tuple(name for name in paths.RANK_VARIABLES if name in os.environ),
            rdma_devices=has_rdma_devices(),
            ssh_options=self.ssh_options,
        )
        plain = None
        if topology.plain_hosts:  # heterogeneous: the hosts outside mpirun start their own
            plain = SpawnSpec(
                hosts=(),
                processes_per_host=self.processes_per_host,
                master_addr=topology.leader,
                master_port=self.config.master_port,
                run_id="",
                interface=None,
                torch=False,
                plain_hosts=topology.plain_hosts,
                first_plain_rank=plan.world_size,
            )
        return LaunchPlan(
            tuple(build_mpirun_argv(plan)),
            dict(os.environ),
            plain,
            stops_all_on_rank_failure(self.config.custom_mpi_options),
        )


@dataclass(frozen=True)
class SpawnStrategy:
    """Every host starts its own ranks (no ssh, no mpirun); torch_distributed's ranks get
    torchrun's environment with the leader as MASTER_ADDR; TensorFlow's and MXNet's
    parameter-server layouts give each host its tasks."""

    config: JobConfig
    user_command: Callable[[], Sequence[str]]
    processes_per_host: int
    log: Logger
    run_id: str

    @property
    def world_size(self) -> int:
        plain = len(self.config.topology.plain_hosts)
        return self._spec(None, self.config.topology.leader).world_size + plain

    def prepare(self) -> LaunchPlan:
        topology = self.config.topology
        if self.config.distribution == TORCH_DISTRIBUTED:
            check_port_free(self.config.master_port, topology.current_host)
        layout = role_layout(self.config)
        if layout == TENSORFLOW:
            check_tf_ports(self.config)
        leader_address = topology.leader
        if layout == MXNET:
            check_mxnet_settings(self.config)
            leader_address = resolve([topology.leader])[0]  # ps-lite binds and dials an address
        interface = job_interface(self.config, self.log) if len(topology.hosts) > 1 else None
        spec = self._spec(interface.name if interface is not None else None, leader_address)
        return spawn_plan(self.config, spec, self.user_command())

    def _spec(self, interface: str | None, leader_address: str) -> SpawnSpec:
        config, topology = self.config, self.config.topology
        layout = role_layout(config)
        spec = SpawnSpec(
            hosts=topology.participants,
            processes_per_host=self.processes_per_host,
            master_addr=leader_address,
            master_port=config.master_port,
            run_id=self.run_id,
            interface=interface,
            torch=config.distribution == TORCH_DISTRIBUTED,
            plain_hosts=topology.plain_hosts,
            tf=config.distribution if layout == TENSORFLOW else None,
            tf_roles=config.tf_roles,
            tf_ports=tf_ports(config),
            mxnet_servers=config.mxnet_servers_per_host if layout == MXNET else 0,
            mxnet_port=config.mxnet_ps_port,
        )
        return dataclasses.replace(spec, first_plain_rank=spec.world_size)


TENSORFLOW, MXNET = "tensorflow", "mxnet"


def role_layout(
    config: JobConfig, installed: Callable[[str], object] = importlib.util.find_spec
) -> str | None:
    """Whose role layout the job's tasks follow: TensorFlow's (both of its distributions),
    MXNet's parameter servers, or None. `parameter_server` is the framework's that
    ringleader_ps_framework names, else the one the image has (TensorFlow when it has both):
    SageMaker's TensorFlow and MXNet estimators send the same hyperparameter."""
    if config.distribution == MULTI_WORKER_MIRRORED:
        return TENSORFLOW
    if config.distribution != PARAMETER_SERVER:
        return None
    if config.ps_framework != PS_FRAMEWORK_AUTO:
        return config.ps_framework
    for framework in (TENSORFLOW, MXNET):
        if installed(framework) is not None:
            return framework
    raise ConfigError(
        "sagemaker_parameter_server_enabled",
        "parameter servers need TensorFlow or MXNet, and this image has neither importable; "
        "use an image with one of them (ringleader_ps_framework names one explicitly)",
    )


def check_mxnet_settings(config: JobConfig) -> None:
    """MXNet's scheduler port must be free on the leader, and the servers per host must fit
    the host's CPUs (each server is a busy process of its own)."""
    topology = config.topology
    cpus = os.cpu_count() or 1
    if config.mxnet_servers_per_host > cpus:
        raise ConfigError(
            "ringleader_mxnet_servers_per_host",
            f"{config.mxnet_servers_per_host} servers on each host, but {topology.current_host} "
            f"has {cpus} CPUs; expected at most {cpus}",
        )
    check_port_free(
        config.mxnet_ps_port,
        topology.current_host,
        "ringleader_mxnet_ps_port",
        "DMLC_PS_ROOT_PORT",
        " (the leader, where MXNet's scheduler listens)",
    )


def tf_ports(config: JobConfig) -> tfconfig.TfPorts:
    return tfconfig.TfPorts(config.tf_worker_port, config.tf_ps_port, config.tf_mirrored_port)


def check_tf_ports(config: JobConfig) -> None:
    """This host's TensorFlow ports must be free (each host checks its own before it says
    hello, so a port in use anywhere ends the job with 78 everywhere)."""
    names = {
        config.tf_worker_port: "ringleader_tf_worker_port",
        config.tf_ps_port: "ringleader_tf_ps_port",
        config.tf_mirrored_port: "ringleader_tf_mirrored_port",
    }
    ports = tfconfig.ports_on(
        config.distribution, tf_ports(config), len(config.topology.participants)
    )
    for port in ports:
        check_port_free(port, config.topology.current_host, names[port], "port", "")


def world_size(config: JobConfig, processes_per_host: int) -> int:
    """Every rank the job supervises: the distribution's, then one per host outside it."""
    topology = config.topology
    return processes_per_host * len(topology.participants) + len(topology.plain_hosts)


def spawn_plan(config: JobConfig, spec: SpawnSpec, user_command: Sequence[str]) -> LaunchPlan:
    """This host's launcher for a spawned job (the leader's and every worker's)."""
    command = rank_command(config, user_command, spec.forwarded_variables())
    argv = spawn_argv(spec, config.topology.current_host, command)
    return LaunchPlan(tuple(argv), dict(os.environ), spec)


def job_interface(config: JobConfig, log: Logger) -> InterfaceChoice:
    topology = config.topology
    choice = choose_interface(
        topology.network_interface, local_interfaces(), resolve(topology.workers)
    )
    if choice.warning:
        log(f"warning: {choice.warning}")
    return choice


def check_port_free(
    port: int,
    host: str,
    field: str = "ringleader_master_port",
    what: str = "MASTER_PORT",
    where: str = " (the leader, where rank 0 listens)",
) -> None:
    """A port a rank will listen on must be free: MASTER_PORT on the leader, TensorFlow's on
    every host."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError as error:
            raise ConfigError(
                field,
                f"{what} {port} is not free on {host}{where}: "
                f"{error.strerror or error}; choose another port",
            ) from None
