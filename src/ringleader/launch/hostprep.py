"""Preparing this host for its ranks: the environment file every rank wrapper reads, and the
user's command in the shape the job's strategy needs."""

import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from ringleader.config.job import ConfigFiles, JobConfig
from ringleader.core import paths
from ringleader.core.hostenvfile import write_host_env
from ringleader.launch import hostenv
from ringleader.launch.strategy import Logger
from ringleader.launch.user_command import (
    build_user_command,
    command_interpreter,
    fail_fast_command,
    has_mpi4py,
    mpi4py_command,
)


@dataclass(frozen=True)
class CommandShape:
    """How the strategy wants this host's command (launch/select.py decides)."""

    # Python ranks under `python -m mpi4py`: an exception or sys.exit(N) in one rank calls
    # MPI_Abort instead of hanging in MPI_Finalize while its peers wait.
    mpi4py: bool = False
    # MXNet: a worker's process must end when its script does (ps-lite would hang at exit).
    fail_fast: bool = False
    # Checked before this host says hello, so a problem is reported with it (TensorFlow's
    # ports on a worker).
    check: Callable[[], None] | None = None


def prepare_host(
    files: ConfigFiles, config: JobConfig, shape: CommandShape, *, log: Logger
) -> list[str]:
    """Write this host's environment file for its ranks; return the user's command. What the
    leader says about the host (its EFA variables) goes to log."""
    if shape.check is not None:
        shape.check()
    if config.source.command:
        user_command = list(config.source.command)
        wrapped = mpi4py_command(user_command) if shape.mpi4py else None
        interpreter = user_command[command_interpreter(user_command) or 0]
        if wrapped and has_mpi4py(interpreter, config.source.code_dir, config.timeouts.startup):
            user_command = wrapped
    else:
        python = config.source.python
        user_command = build_user_command(
            config.source.program_path,
            hostenv.user_args(config),
            python=python,
            mpi4py_run=shape.mpi4py and _has_mpi4py(python, config),
            module=config.source.module,
        )
    if shape.fail_fast:
        user_command = fail_fast_command(user_command)
    sagemaker = {**hostenv.sagemaker_env_vars(config, files, log), **config.horovod_env}
    write_host_env(paths.HOST_ENV_FILE, hostenv.host_environment(os.environ, sagemaker))
    return user_command


def _has_mpi4py(python: str, config: JobConfig) -> bool:
    if python == sys.executable:
        return importlib.util.find_spec("mpi4py") is not None
    return has_mpi4py(python, config.source.code_dir, config.timeouts.startup)
