"""The one reader of the job's distribution: which strategy starts its ranks, and what that
means for this host's command. A new way of starting ranks is a new strategy module and a
line here."""

import functools
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ringleader.config.image import ImageSettings
from ringleader.config.job import (
    MPI,
    MULTI_WORKER_MIRRORED,
    NO_DISTRIBUTION,
    PARAMETER_SERVER,
    PS_FRAMEWORK_AUTO,
    TORCH_DISTRIBUTED,
    JobConfig,
)
from ringleader.core.errors import ConfigError
from ringleader.launch.alone import AloneStrategy
from ringleader.launch.hostprep import CommandShape
from ringleader.launch.mpirun_strategy import MpirunStrategy, SshSetup
from ringleader.launch.spawn_strategy import SpawnStrategy, check_tf_ports
from ringleader.launch.sshd import SshMasters
from ringleader.launch.strategy import LaunchStrategy, Logger

TENSORFLOW, MXNET = "tensorflow", "mxnet"  # role layouts


@dataclass(frozen=True)
class HostFacts:
    """What the strategy needs to know of this host and how it runs."""

    own_sshd: bool  # a container starts its own sshd; a cluster machine has one running
    gpus: int
    run_id: str  # the job's identity (the SageMaker job name)
    log: Logger
    image: ImageSettings | None = None  # what `ringleader image setup` recorded


def runs_alone(config: JobConfig) -> bool:
    """No distribution: every host runs the program once, on its own, and ends alone. (One
    host of a distributed job still starts every rank the distribution asks for.)"""
    return config.distribution == NO_DISTRIBUTION


def command_shape(config: JobConfig) -> CommandShape:
    topology = config.topology
    if topology.current_host not in topology.participants or runs_alone(config):
        return CommandShape()
    layout = role_layout(config)
    check = None
    if layout == TENSORFLOW and not topology.is_leader:
        # the leader checks once its control port is taken (SpawnStrategy.prepare)
        check = functools.partial(check_tf_ports, config, config.distribution)
    return CommandShape(
        mpi4py=config.mpi.mpi4py_run and config.distribution == MPI,
        fail_fast=layout == MXNET,
        check=check,
    )


def select_strategy(
    config: JobConfig, host: HostFacts, user_command: Callable[[], Sequence[str]]
) -> LaunchStrategy:
    if runs_alone(config):
        return AloneStrategy(config, user_command)
    per_host = config.ranks_per_host(host.gpus)
    if config.distribution == MPI:
        # A container's own sshd and ssh use the image's files; a cluster machine's, its own.
        image = host.image if host.own_sshd else None
        client = image.ssh_config if image is not None else None
        masters = SshMasters(config=client) if config.topology.is_leader else None
        setup = SshSetup(host.own_sshd, masters, image)
        return MpirunStrategy(config, user_command, per_host, host.log, setup)
    layout = role_layout(config)
    return SpawnStrategy(
        config,
        user_command,
        per_host,
        host.log,
        host.run_id,
        torch=config.distribution == TORCH_DISTRIBUTED,
        tf_distribution=config.distribution if layout == TENSORFLOW else None,
        mxnet=layout == MXNET,
    )


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
    if config.spawn.ps_framework != PS_FRAMEWORK_AUTO:
        return config.spawn.ps_framework
    for framework in (TENSORFLOW, MXNET):
        if installed(framework) is not None:
            return framework
    raise ConfigError(
        "sagemaker_parameter_server_enabled",
        "parameter servers need TensorFlow or MXNet, and this image has neither importable; "
        "use an image with one of them (ringleader_ps_framework names one explicitly)",
    )
