"""Every host starts its own ranks (no ssh, no mpirun): torch_distributed's ranks get
torchrun's environment with the leader as MASTER_ADDR; TensorFlow's and MXNet's
parameter-server layouts give each host its tasks."""

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ringleader.config.job import JobConfig
from ringleader.core.errors import ConfigError
from ringleader.launch import tfconfig
from ringleader.launch.netif import resolve
from ringleader.launch.spawn import SpawnSpec
from ringleader.launch.strategy import (
    LaunchPlan,
    Logger,
    NoSetup,
    check_port_free,
    job_interface,
    spawn_plan,
)


@dataclass(frozen=True)
class SpawnStrategy:
    config: JobConfig
    user_command: Callable[[], Sequence[str]]
    processes_per_host: int
    log: Logger
    run_id: str
    torch: bool = False  # torchrun's environment for every rank
    tf_distribution: str | None = None  # TensorFlow's tasks on each host, for this one of its
    mxnet: bool = False  # MXNet's parameter-server roles on each host
    setup: NoSetup = field(default_factory=NoSetup)

    @property
    def world_size(self) -> int:
        plain = len(self.config.topology.plain_hosts)
        return self._spec(None, self.config.topology.leader).world_size + plain

    def prepare(self, attempt: int = 0) -> LaunchPlan:
        topology = self.config.topology
        if self.torch:
            check_port_free(self.config.spawn.master_port, topology.current_host)
        if self.tf_distribution is not None:
            check_tf_ports(self.config, self.tf_distribution)
        leader_address = topology.leader
        if self.mxnet:
            check_mxnet_settings(self.config)
            leader_address = resolve([topology.leader])[0]  # ps-lite binds and dials an address
        interface = job_interface(self.config, self.log) if len(topology.hosts) > 1 else None
        spec = self._spec(interface.name if interface is not None else None, leader_address)
        spec = dataclasses.replace(spec, attempt=attempt)
        return spawn_plan(self.config, spec, self.user_command())

    def worker_plan(self, spec: SpawnSpec) -> LaunchPlan:
        return spawn_plan(self.config, spec, self.user_command())

    def _spec(self, interface: str | None, leader_address: str) -> SpawnSpec:
        config, topology = self.config, self.config.topology
        spec = SpawnSpec(
            hosts=topology.participants,
            processes_per_host=self.processes_per_host,
            master_addr=leader_address,
            master_port=config.spawn.master_port,
            run_id=self.run_id,
            interface=interface,
            torch=self.torch,
            plain_hosts=topology.plain_hosts,
            tf=self.tf_distribution,
            tf_roles=config.spawn.tf_roles,
            tf_ports=tf_ports(config),
            mxnet_servers=config.spawn.mxnet_servers_per_host if self.mxnet else 0,
            mxnet_port=config.spawn.mxnet_ps_port,
            max_restarts=config.restart.max_restarts,
        )
        return dataclasses.replace(spec, first_plain_rank=spec.world_size)


def check_mxnet_settings(config: JobConfig) -> None:
    """MXNet's scheduler port must be free on the leader, and the servers per host must fit
    the host's CPUs (each server is a busy process of its own)."""
    topology, servers = config.topology, config.spawn.mxnet_servers_per_host
    cpus = os.cpu_count() or 1
    if servers > cpus:
        raise ConfigError(
            "ringleader_mxnet_servers_per_host",
            f"{servers} servers on each host, but {topology.current_host} "
            f"has {cpus} CPUs; expected at most {cpus}",
        )
    check_port_free(
        config.spawn.mxnet_ps_port,
        topology.current_host,
        "ringleader_mxnet_ps_port",
        "DMLC_PS_ROOT_PORT",
        " (the leader, where MXNet's scheduler listens)",
    )


def tf_ports(config: JobConfig) -> tfconfig.TfPorts:
    return tfconfig.TfPorts(
        config.spawn.tf_worker_port, config.spawn.tf_ps_port, config.spawn.tf_mirrored_port
    )


def check_tf_ports(config: JobConfig, distribution: str) -> None:
    """This host's TensorFlow ports must be free (each host checks its own before it says
    hello, so a port in use anywhere ends the job with 78 everywhere)."""
    spawn = config.spawn
    names = {
        spawn.tf_worker_port: "ringleader_tf_worker_port",
        spawn.tf_ps_port: "ringleader_tf_ps_port",
        spawn.tf_mirrored_port: "ringleader_tf_mirrored_port",
    }
    ports = tfconfig.ports_on(distribution, tf_ports(config), len(config.topology.participants))
    for port in ports:
        check_port_free(port, config.topology.current_host, names[port], "port", "")
