"""What every host pays at start: modules only some jobs need stay out of the entry point's and
the rank wrapper's imports (each fresh interpreter here imports only the module under test)."""

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
