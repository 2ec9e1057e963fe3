"""The user's command line, as SageMaker builds it."""

import os

import pytest

from ringleader.core.errors import ConfigError
from ringleader.launch.user_command import build_user_command


def test_python_script_uses_the_given_interpreter(tmp_path):
    program = tmp_path / "train.py"
    program.write_text("")
    assert build_user_command(program, ["--rounds", "3"], python="/opt/py/bin/python") == [
        "/opt/py/bin/python",
        str(program),
        "--rounds",
        "3",
    ]


def test_python_script_under_mpi4py_runner(tmp_path):
    program = tmp_path / "train.py"
    program.write_text("")
    assert build_user_command(program, ["--a", "1"], python="/py", mpi4py_run=True) == [
        "/py",
        "-m",
        "mpi4py",
        str(program),
        "--a",
        "1",
    ]


def test_mpi4py_runner_is_only_for_python_scripts(tmp_path):
    program = tmp_path / "run.sh"
    program.write_text("")
    assert build_user_command(program, [], mpi4py_run=True) == ["/bin/sh", str(program)]


def test_shell_script_uses_sh_even_when_not_executable(tmp_path):
    program = tmp_path / "run.sh"
    program.write_text("echo hi\n")
    os.chmod(program, 0o644)
    assert build_user_command(program, ["--a", "b"]) == ["/bin/sh", str(program), "--a", "b"]


def test_executable_runs_directly(tmp_path):
    program = tmp_path / "trainer"
    program.write_text("#!/bin/sh\n")
    os.chmod(program, 0o755)
    assert build_user_command(program, []) == [str(program)]


def test_non_executable_other_file_is_a_config_error(tmp_path):
    program = tmp_path / "trainer.bin"
    program.write_text("")
    os.chmod(program, 0o644)
    assert not os.access(program, os.X_OK)  # even root needs an x bit to execute
    with pytest.raises(ConfigError) as caught:
        build_user_command(program, [])
    assert caught.value.field == "sagemaker_program"
    assert "'trainer.bin'" in caught.value.problem
