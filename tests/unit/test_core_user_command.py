"""The user's command line, as SageMaker builds it."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from ringleader.core.errors import ConfigError
from ringleader.launch.user_command import build_user_command, has_mpi4py, mpi4py_command


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


def test_a_module_runs_with_python_dash_m() -> None:
    command = build_user_command(
        Path("/opt/ml/code/-m pkg.train"), ["--lr", "1"], "py", module="pkg.train"
    )
    assert command == ["py", "-m", "pkg.train", "--lr", "1"]
    under_mpi = build_user_command(Path("x"), [], "py", mpi4py_run=True, module="pkg.train")
    assert under_mpi == ["py", "-m", "mpi4py", "-m", "pkg.train"]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["python", "train.py", "--x"], ["python", "-m", "mpi4py", "train.py", "--x"]),
        (
            ["/opt/venv/bin/python3.11", "-m", "pkg.train"],
            ["/opt/venv/bin/python3.11", "-m", "mpi4py", "-m", "pkg.train"],
        ),
        (["python3", "-c", "print(1)"], None),
        (["python"], None),
        (["bash", "train.py"], None),
        (["./train.sh"], None),
        (["pythonista", "x.py"], None),
        (  # how the DLAMI post's users pass a variable to every rank
            ["env", "FAIL_RANK=4", "python", "allreduce.py"],
            ["env", "FAIL_RANK=4", "python", "-m", "mpi4py", "allreduce.py"],
        ),
        (
            ["/usr/bin/env", "A=1", "B=", "/opt/venv/bin/python3", "-m", "pkg.train"],
            [
                "/usr/bin/env",
                "A=1",
                "B=",
                "/opt/venv/bin/python3",
                "-m",
                "mpi4py",
                "-m",
                "pkg.train",
            ],
        ),
        (["env", "python", "x.py"], ["env", "python", "-m", "mpi4py", "x.py"]),
        (["env", "-i", "python", "x.py"], None),  # env's own options: left alone
        (["env", "A=1"], None),
        (["env", "A=1", "bash", "x.py"], None),
    ],
)
def test_whole_commands_run_under_mpi4py_only_when_python_runs_a_script(command, expected):
    assert mpi4py_command(command) == expected


def test_has_mpi4py_asks_the_users_interpreter(tmp_path):
    (tmp_path / "mpi4py.py").write_text("")  # importable from the working directory
    assert has_mpi4py(sys.executable, str(tmp_path), 60)
    assert not has_mpi4py(sys.executable, "/", 60) or importlib.util.find_spec("mpi4py")
    assert not has_mpi4py(str(tmp_path / "no-such-python"), str(tmp_path), 60)
