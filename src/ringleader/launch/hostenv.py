"""This host's environment for its ranks: the container's variables plus SageMaker's SM_*.

sagemaker-training's Environment is the reference for the SM_* contract, so it computes them;
we only feed it our validated view of the hosts and hyperparameters. The result is written to
a root-only file that each rank wrapper reads, so every rank sees its own host's
SM_CURRENT_HOST and no variable is copied into /etc/environment.
"""

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ringleader.config.job import RINGLEADER_PREFIX, ConfigFiles, JobConfig, read_json_object
from ringleader.core.files import write_atomically


class _Given(dict[str, Any]):
    """A dict that is truthy even when empty.

    Environment() reads the file itself when given a falsy dict (`x or read_file()`), which
    would fail when there is no such file or undo our filtering.
    """

    def __bool__(self) -> bool:
        return True


def sagemaker_env_vars(config: JobConfig, files: ConfigFiles) -> dict[str, str]:
    from sagemaker_training import environment  # slow import (boto3): only where needed

    topology = config.topology
    resource_config = dict(read_json_object(files.resource_config, "resourceconfig.json") or {})
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
    env = environment.Environment(
        resource_config=_Given(resource_config),
        input_data_config=_Given(input_data_config),
        hyperparameters=_Given(hyperparameters),
    )
    return {str(key): str(value) for key, value in env.to_env_vars().items()}


def host_environment(base: Mapping[str, str], sagemaker: Mapping[str, str]) -> dict[str, str]:
    env = dict(base)
    env.update(sagemaker)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def user_args(config: JobConfig) -> list[str]:
    from sagemaker_training import mapping

    return [str(arg) for arg in mapping.to_cmd_args(config.user_hyperparameters)]


def write_host_env(path: Path, env: Mapping[str, str]) -> None:
    """The ranks' environment, readable by root only (it may hold secrets)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps({"env": dict(env)}), mode=0o600)
