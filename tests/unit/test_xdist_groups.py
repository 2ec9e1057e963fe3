"""`make test` runs container tests on pytest-xdist workers with `--dist loadgroup`, and modules
whose containers have fixed names (the Slurm cluster) rely on `xdist_group` to keep them on one
worker. With pytest 9 and pytest-xdist 3.8 the group was silently ignored (two workers each
started the Slurm cluster and removed the other's): this holds the installed pair to it."""

import subprocess
import sys
from pathlib import Path

GROUPED = """
import os
import pytest

pytestmark = pytest.mark.xdist_group("together")


@pytest.mark.parametrize("index", range(6))
def test_grouped(index):
    print("WORKER", os.environ["PYTEST_XDIST_WORKER"])
"""

ALONE = """
import pytest


@pytest.mark.parametrize("index", range(6))
def test_free(index):
    pass
"""


def test_an_xdist_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "test_free.py").write_text(ALONE)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "3", "-v", "-s"]
    result = subprocess.run(
        [*command, "--dist", "loadgroup", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    workers = {
        line.split()[0]
        for line in result.stdout.splitlines()
        if "test_grouped.py::test_grouped" in line and line.startswith("[gw")
    }
    assert len(workers) == 1, result.stdout
    assert "12 passed" in result.stdout, result.stdout
