"""The command line of the user's program, as SageMaker runs it."""

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from ringleader.config.program import EntryPointKind, program_kind
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
    kind = program_kind(program.name)
    if kind is EntryPointKind.PYTHON_SCRIPT:
        return [*runner, str(program), *user_args]
    if kind is EntryPointKind.SHELL_SCRIPT:
        return ["/bin/sh", str(program), *user_args]
    if not os.access(program, os.X_OK):
        raise ConfigError(
            "sagemaker_program",
            f"{program.name!r} is neither a .py/.sh script nor an executable file",
        )
    return [str(program), *user_args]


_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")


def command_interpreter(command: Sequence[str]) -> int | None:
    """Where the Python interpreter stands in a whole command line that runs a script or a
    module with it: `python X.py ...`, `/abs/python3.11 -m mod ...`, or either behind `env`
    and its NAME=VALUE assignments; None for any other command."""
    index = 0
    if command and Path(command[0]).name == "env":
        index = 1
        while index < len(command) and _ASSIGNMENT.fullmatch(command[index]):
            index += 1
    if index + 1 >= len(command) or not _PYTHON.fullmatch(Path(command[index]).name):
        return None
    script = command[index + 1]
    return index if script == "-m" or script.endswith(".py") else None


def through_module(command: Sequence[str], module: str) -> list[str] | None:
    """A command line that runs Python on a script or a module, run through `python -m
    MODULE` instead (which runs that script or module); None for any other command."""
    index = command_interpreter(command)
    if index is None:
        return None
    return [*command[: index + 1], "-m", module, *command[index + 1 :]]


def mpi4py_command(command: Sequence[str]) -> list[str] | None:
    """A whole command line (`ringleader_command`) run under mpi4py as scripts are."""
    return through_module(command, "mpi4py")


FAIL_FAST_MODULE = "ringleader.launch.fail_fast"


def fail_fast_command(command: Sequence[str]) -> list[str]:
    """A Python script's command run through ringleader.launch.fail_fast; any other command as
    it is."""
    return through_module(command, FAIL_FAST_MODULE) or list(command)


def has_mpi4py(python: str, cwd: str, timeout: float) -> bool:
    """Whether the user's interpreter can import mpi4py (it may not be ours)."""
    try:
        found = subprocess.run(
            [python, "-c", "import mpi4py"],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return found.returncode == 0
