"""What a launcher of ours (`cluster run`'s agent, `ringleader slurm`) gives each host's
supervision: the job's hyperparameters as SageMaker writes them, the job's directory laid out
like a SageMaker container's /opt/ml, and the environment that points the supervision at it."""

import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ringleader.config.job import ENABLED_KEYS, MPI, NO_DISTRIBUTION
from ringleader.core import paths
from ringleader.core.files import write_atomically
from ringleader.wire.auth import JOB_SECRET_VARIABLE


def command_hyperparameters(
    command: Sequence[str],
    cwd: str,
    distribution: str,
    processes_per_host: int | None,
    mpi_options: str = "",
    settings: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """hyperparameters.json of a job that runs a whole command line in `cwd`, its values
    JSON-encoded as SageMaker writes them; `settings` are ringleader_* without the prefix.
    Processes per host None: the supervision's default (the host's GPUs, else 1)."""
    values: dict[str, Any] = {
        "ringleader_command": list(command),
        "sagemaker_submit_directory": cwd,
        "sagemaker_mpi_enabled": distribution == MPI,
    }
    if distribution == MPI:
        if processes_per_host is not None:
            values["sagemaker_mpi_num_of_processes_per_host"] = processes_per_host
        if mpi_options:
            values["sagemaker_mpi_custom_mpi_options"] = mpi_options
    elif distribution != NO_DISTRIBUTION:
        values[ENABLED_KEYS[distribution]] = True
        if processes_per_host is not None:
            values["ringleader_processes_per_host"] = processes_per_host
    values.update({f"ringleader_{key}": value for key, value in (settings or {}).items()})
    return {key: json.dumps(value) for key, value in values.items()}


def lay_out_host(
    ml_root: Path,
    run_dir: Path,
    hyperparameters: Mapping[str, str],
    resource_config: Mapping[str, Any] | None = None,
) -> None:
    """The job's /opt/ml on this host (input/config, output/data, model) and its run
    directory. resourceconfig.json only where the hosts come from it (not under Slurm)."""
    config = ml_root / "input" / "config"
    for directory in (config, ml_root / "output" / "data", ml_root / "model", run_dir):
        directory.mkdir(parents=True, exist_ok=True)
    if resource_config is not None:
        write_atomically(config / "resourceconfig.json", json.dumps(dict(resource_config)))
    write_atomically(config / "hyperparameters.json", json.dumps(dict(hyperparameters)))
    write_atomically(config / "inputdataconfig.json", "{}")
    # The ranks' interpreter at one path on every host, whichever Python each host uses. A
    # script, not a symlink: a venv's Python finds its packages only when started by its path.
    write_atomically(
        run_dir / "python", f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n', mode=0o755
    )


def host_environment(
    base: Mapping[str, str],
    ml_root: Path,
    run_dir: Path,
    mark: str,
    env: Mapping[str, str],
    secret: str | None = None,
) -> dict[str, str]:
    """The supervision's environment: `env` (the user's --env, which the supervision gives to
    every rank on this host), the job's locations and its mark; the job's secret when the
    launcher has one (None: the one `base` has, if any)."""
    environment = {
        **base,
        **env,
        paths.ML_ROOT_VARIABLE: str(ml_root),
        paths.RUN_DIR_VARIABLE: str(run_dir),
        paths.RANK_PYTHON_VARIABLE: str(run_dir / "python"),
        paths.JOB_MARK_VARIABLE: mark,
    }
    if secret is not None:
        environment[JOB_SECRET_VARIABLE] = secret
    return environment
