"""The command line of the user's program, as SageMaker runs it."""

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ringleader.core.errors import ConfigError


def build_user_command(
    program: Path,
    user_args: Sequence[str],
    python: str = sys.executable,
    mpi4py_run: bool = False,
    module: str | None = None,
) -> list[str]:
    """Python scripts and modules (`-m`) run with our interpreter, shell scripts with sh,
    anything else directly.

    With `mpi4py_run`, Python runs under `python -m mpi4py`, which turns an uncaught
    exception or a non-zero sys.exit() into MPI_Abort with that code.
    """
    runner = [python, "-m", "mpi4py"] if mpi4py_run else [python]
    if module is not None:
        return [*runner, "-m", module, *user_args]
    if program.suffix == ".py":
        return [*runner, str(program), *user_args]
    if program.suffix == ".sh":
        return ["/bin/sh", str(program), *user_args]
    if not os.access(program, os.X_OK):
        raise ConfigError(
            "sagemaker_program",
            f"{program.name!r} is neither a .py/.sh script nor an executable file",
        )
    return [str(program), *user_args]
