"""The lean install (`pip install ringleader`, what a training image gets): every module of the
runtime imports without the host tools' packages, and a host tool that needs one names the extra.

Each check runs in a fresh interpreter in which importing those packages fails, as it would in
an image that never installed them."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ringleader.tools.extras import EXTRA_OF_MODULE, missing_extra_message

# What the lean install goes without: the extras' packages (and what they bring), the SDKs.
ABSENT = ("docker", "yaml", "matplotlib", "numpy", "PIL", "sagemaker", "sagemaker_training")

BLOCKER = textwrap.dedent(
    f"""
    import importlib.abc, sys

    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.partition(".")[0] in {ABSENT!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Absent())
    """
)

# The modules that may need an extra, and which package they need: nothing else may.
HOST_TOOL_MODULES = {
    "ringleader.sagemaker.v3": "sagemaker",  # where the SDK runs, not in the image
    "ringleader.tools.local.run": "docker",
    "ringleader.tools.report.charts": "matplotlib",
    "ringleader.tools.report.compare_charts": "matplotlib",
    "ringleader.tools.report.compare_page": "matplotlib",
    "ringleader.tools.report.page": "matplotlib",
}


def run_lean(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_only_the_host_tools_modules_need_an_extra() -> None:
    result = run_lean(
        """
        import importlib, pkgutil, ringleader
        for info in pkgutil.walk_packages(ringleader.__path__, "ringleader."):
            if info.name.endswith("__main__"):
                continue  # runs a command
            try:
                importlib.import_module(info.name)
            except ModuleNotFoundError as error:
                print(info.name, error.name)
        """
    )
    assert result.returncode == 0, result.stderr
    failed = dict(line.split() for line in result.stdout.splitlines())
    assert failed == HOST_TOOL_MODULES


def test_the_runtime_commands_start_without_the_extras() -> None:
    result = run_lean(
        """
        import contextlib, io, sys
        from ringleader.tools.cli import main
        for command in (["--help"], ["slurm", "--help"], ["doctor", "--help"],
                        ["cluster", "--help"]):
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
                main(command)
            print(command[0], "usage:" in out.getvalue())
        import ringleader.supervise.entrypoint
        """
    )
    assert result.returncode == 0, result.stderr
    printed = result.stdout.split()
    assert printed == ["--help", "True", "slurm", "True", "doctor", "True", "cluster", "True"]


def test_a_host_tool_without_its_extra_names_the_extra(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hello')\n")
    result = run_lean(
        """
        import sys
        from ringleader.tools.cli import main
        sys.exit(main(["local", "--source-dir", sys.argv[1], "--entry-point", "train.py"]))
        """,
        str(tmp_path),
    )
    assert result.returncode == 2, result.stderr
    assert "ringleader local needs the Docker SDK (docker)" in result.stderr
    assert "pip install 'ringleader[tools]'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("module", sorted(EXTRA_OF_MODULE))
def test_each_extras_module_is_named_with_its_extra(module: str) -> None:
    error = ModuleNotFoundError(f"No module named '{module}.sub'", name=f"{module}.sub")
    message = missing_extra_message(error, "tool")
    assert message is not None
    assert f"pip install 'ringleader[{EXTRA_OF_MODULE[module]}]'" in message


def test_a_module_of_no_extra_is_left_to_raise() -> None:
    assert missing_extra_message(ModuleNotFoundError("x", name="nosuchthing"), "local") is None
