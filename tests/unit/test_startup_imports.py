"""What every host pays at start: modules only some jobs need stay out of the entry point's and
the rank wrapper's imports (each fresh interpreter here imports only the module under test)."""

import os
import subprocess
import sys

import pytest

# module -> why only some jobs, or only some hosts, need it
DEFERRED = {
    "psutil": "only a stopped job, or the leader choosing the network interface",
    "concurrent.futures": "only the leader's parallel ssh checks (it imports logging)",
    "logging": "nothing of ours logs through it",
    "tarfile": "only jobs with a source tarball",
    "tomllib": "only code with a pyproject.toml",
    "tomli": "only code with a pyproject.toml (Python 3.10)",
    "secrets": "a temporary name needs no cryptographic module",
    "boto3": "only jobs that read or write S3",
}


def imported_by(module: str) -> set[str]:
    script = f"import sys, {module}; print('\\n'.join(sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    return set(result.stdout.split())


@pytest.mark.parametrize("module", ["ringleader.supervise.entrypoint", "ringleader.rank.wrapper"])
def test_start_imports_nothing_only_some_jobs_need(module: str) -> None:
    loaded = imported_by(module)
    assert {name: why for name, why in DEFERRED.items() if name in loaded} == {}


# module -> why a rank's wrapper runs its rank without it (a large job has one wrapper per rank:
# each module costs its memory that many times over)
WRAPPER_DEFERRED = {
    "shutil": "only taking a rank's stacks; argparse's help formatter "
    "imports it for the terminal's width unless given one",
    "bz2": "shutil's",
    "lzma": "shutil's",
}

# Runs the wrapper for real; what it holds once its rank has started is written to stderr.
RUNNING_WRAPPER = """
import sys
from ringleader.rank import wrapper

run = wrapper.RankSupervisor.run

def run_and_look(self, output, on_started, *more):
    def started(pid):
        on_started(pid)
        print("\\n".join(sys.modules), file=sys.stderr)
    return run(self, output, started, *more)

wrapper.RankSupervisor.run = run_and_look
wrapper.main(sys.argv[1:])
"""


def test_a_running_wrapper_holds_nothing_only_some_ranks_need(tmp_path) -> None:
    command = [
        *(sys.executable, "-c", RUNNING_WRAPPER, "--agent", str(tmp_path / "no-agent.sock")),
        *("--host-env", str(tmp_path / "absent.json"), "--log-dir", str(tmp_path / "logs")),
        *("--", sys.executable, "-c", "pass"),
    ]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "RINGLEADER_RUN_DIR": str(tmp_path)},
    )
    loaded = set(result.stderr.split())
    assert "ringleader.rank.capture" in loaded  # what it printed is the module list
    deferred = {**DEFERRED, **WRAPPER_DEFERRED}
    assert {name: why for name, why in deferred.items() if name in loaded} == {}
