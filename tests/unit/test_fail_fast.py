"""ringleader.launch.fail_fast: a failing script ends at once with its code, exit handlers
skipped; a succeeding one exits normally."""

import subprocess
import sys
from pathlib import Path

import pytest

from ringleader.launch.user_command import FAIL_FAST_MODULE, fail_fast_command

HANGING_EXIT = """\
import atexit, sys, threading
atexit.register(threading.Event().wait)  # what ps-lite's finalize does with a peer gone
print("ran as", __name__, sys.argv[1:], flush=True)
{ending}
"""


def run(tmp_path: Path, ending: str, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "train.py"
    script.write_text(HANGING_EXIT.format(ending=ending))
    return subprocess.run(
        [sys.executable, "-m", FAIL_FAST_MODULE, str(script), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("ending", "code", "stderr"),
    [
        ("sys.exit(7)", 7, ""),
        ("raise ValueError('bad batch')", 1, "ValueError: bad batch"),
        ("sys.exit('giving up')", 1, "giving up"),
    ],
)
def test_a_failing_script_ends_at_once_with_its_code(tmp_path, ending, code, stderr):
    result = run(tmp_path, ending, "--epochs", "3")
    assert result.returncode == code, result
    assert result.stdout == "ran as __main__ ['--epochs', '3']\n"
    assert stderr in result.stderr


def test_a_succeeding_script_runs_its_exit_handlers(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import atexit\natexit.register(print, 'finalized')\nprint('done')\n")
    result = subprocess.run(
        [sys.executable, "-m", FAIL_FAST_MODULE, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout) == (0, "done\nfinalized\n")


def test_the_script_imports_from_its_own_directory(tmp_path):
    (tmp_path / "helper.py").write_text("VALUE = 5\n")
    result = run(tmp_path, "import helper; sys.exit(helper.VALUE)")
    assert result.returncode == 5, result


def test_only_python_commands_go_through_it():
    assert fail_fast_command(["/venv/bin/python", "/opt/ml/code/train.py", "--x"]) == [
        "/venv/bin/python",
        "-m",
        FAIL_FAST_MODULE,
        "/opt/ml/code/train.py",
        "--x",
    ]
    assert fail_fast_command(["/bin/sh", "train.sh"]) == ["/bin/sh", "train.sh"]
