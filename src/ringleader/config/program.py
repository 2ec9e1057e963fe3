"""What kind of program `sagemaker_program` names, decided once from its name.

How it is run (launch/user_command.py) and what is installed first (source/usercode.py) both
follow this: a `.sh` file runs with sh, a `.py` file with Python, anything else as an
executable; a code directory that is a Python package is installed with pip first (a shell
script's never is). Modules (`-m package.module`) and whole command lines
(`ringleader_command`) are told apart by JobConfig.module and JobConfig.command.
"""

import enum


class EntryPointKind(enum.Enum):
    PYTHON_SCRIPT = "Python script"
    PYTHON_PACKAGE = "Python package"  # the code dir is installed with pip first
    SHELL_SCRIPT = "shell script"
    EXECUTABLE = "executable"


def program_kind(program: str) -> EntryPointKind:
    """How a program file runs, by its name: with sh, with Python, or by itself."""
    if program.endswith(".sh"):
        return EntryPointKind.SHELL_SCRIPT
    if program.endswith(".py"):
        return EntryPointKind.PYTHON_SCRIPT
    return EntryPointKind.EXECUTABLE


def entry_point_kind(program: str, package: bool) -> EntryPointKind:
    """The same order as sagemaker-training: shell script, then package, then Python script."""
    kind = program_kind(program)
    if package and kind is not EntryPointKind.SHELL_SCRIPT:
        return EntryPointKind.PYTHON_PACKAGE
    return kind
