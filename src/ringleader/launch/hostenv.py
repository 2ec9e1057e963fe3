"""This host's environment for its ranks: the container's variables plus SageMaker's SM_*, and
the EFA variables SageMaker's runners set where this host has EFA devices (launch/fabric.py).

The SM_* contract is sagemaker-training's (see sagemaker_env); we feed it our validated view of
the hosts and hyperparameters. The result is written to a root-only file that each rank wrapper
reads, so every rank sees its own host's SM_CURRENT_HOST and no variable is copied into
/etc/environment.
"""

import os
from collections.abc import Mapping

from ringleader.config.job import RINGLEADER_PREFIX, ConfigFiles, JobConfig, read_json_object
from ringleader.config.mpi_options import forwarded_variables
from ringleader.launch import fabric, sagemaker_env
from ringleader.launch.strategy import Logger


def sagemaker_env_vars(config: JobConfig, files: ConfigFiles, log: Logger) -> dict[str, str]:
    topology = config.topology
    resource_config = files.read_resource_config() or {}
    resource_config.update(
        current_host=topology.current_host,
        hosts=list(topology.hosts),
        network_interface_name=topology.network_interface,
    )
    input_data_config = read_json_object(files.input_data_config, "inputdataconfig.json") or {}
    hyperparameters = {
        key: value
        for key, value in config.hyperparameters.items()
        if not key.startswith(RINGLEADER_PREFIX)
    }
    instance_type = str(resource_config.get("current_instance_type", "local"))
    facts = sagemaker_env.probe_host(os.environ, instance_type)
    variables = sagemaker_env.sagemaker_variables(
        resource_config, input_data_config, hyperparameters, facts
    )
    fabric_facts = fabric.probe_fabric(
        fabric.known_instance_type(instance_type, os.environ), facts.num_gpus
    )
    return {
        **fabric_variables(config, fabric_facts, os.environ, log),
        **container_variables(config, os.environ),
        **variables,
    }


def container_variables(config: JobConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """What AWS's framework containers export for every job, whatever its distribution (the
    table in docs/sagemaker.md): the PyTorch container's MASTER_ADDR (the job's first host)
    and MASTER_PORT (ringleader_master_port, 7777), so a script that calls
    init_process_group() with env:// runs as there. The container's own values stay."""
    defaults = {
        "MASTER_ADDR": config.topology.leader,
        "MASTER_PORT": str(config.spawn.master_port),
    }
    return {name: value for name, value in defaults.items() if name not in environ}


def fabric_variables(
    config: JobConfig, facts: fabric.FabricFacts, environ: Mapping[str, str], log: Logger
) -> dict[str, str]:
    """The EFA variables for this host's ranks; the leader logs what it set and why (to log).
    A value in the container's environment or forwarded with mpirun's -x is the user's and
    stays."""
    already_set = {*environ, *forwarded_variables(config.mpi.custom_options)}
    settings = fabric.efa_settings(facts, already_set)
    if settings.note is not None and config.topology.current_host == config.topology.leader:
        log(settings.note)
    return dict(settings.variables)


def host_environment(base: Mapping[str, str], sagemaker: Mapping[str, str]) -> dict[str, str]:
    env = dict(base)
    env.update(sagemaker)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def user_args(config: JobConfig) -> list[str]:
    return sagemaker_env.to_cmd_args(config.user_hyperparameters)
