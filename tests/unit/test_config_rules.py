"""Rules the job's configuration decides once for every part: the leader, the distribution
names and their switches, the entry point's kind, the timeouts' defaults."""

import subprocess
import sys

import pytest

from ringleader.config.job import (
    DISTRIBUTION_KEYS,
    DISTRIBUTIONS,
    ENABLED_KEYS,
    MPI,
    NO_DISTRIBUTION,
    TORCH_DISTRIBUTED,
)
from ringleader.config.program import EntryPointKind, entry_point_kind, program_kind
from ringleader.config.timeouts import DEFAULTS, Timeouts, parse_timeouts
from ringleader.config.topology import elect_leader
from ringleader.core.errors import ConfigError


def test_the_leader_is_the_first_host_in_sorted_order_of_the_distribution() -> None:
    assert elect_leader(["algo-2-k3x9q", "algo-1-zz7yt", "algo-3-a0b1c"]) == "algo-1-zz7yt"
    assert elect_leader(("worker-b", "worker-a")) == "worker-a"
    assert elect_leader(["algo-1", "algo-2", "algo-3"], ["algo-3", "algo-2"]) == "algo-2"
    assert elect_leader(iter(["b", "a"]), iter([])) == "a"


def test_every_distribution_has_one_switch_and_one_name() -> None:
    assert DISTRIBUTIONS == (
        "mpi",
        "torch_distributed",
        "parameter_server",
        "multi_worker_mirrored_strategy",
        NO_DISTRIBUTION,
    )
    assert ENABLED_KEYS[MPI] == "sagemaker_mpi_enabled"
    assert ENABLED_KEYS[TORCH_DISTRIBUTED] == "sagemaker_torch_distributed_enabled"
    assert {DISTRIBUTION_KEYS[key]: key for key in DISTRIBUTION_KEYS} == ENABLED_KEYS


@pytest.mark.parametrize(
    ("program", "kind"),
    [
        ("train.py", EntryPointKind.PYTHON_SCRIPT),
        ("dir/run.sh", EntryPointKind.SHELL_SCRIPT),
        ("train", EntryPointKind.EXECUTABLE),
        ("train.pyc", EntryPointKind.EXECUTABLE),
    ],
)
def test_a_program_runs_by_its_name(program: str, kind: EntryPointKind) -> None:
    assert program_kind(program) is kind
    assert entry_point_kind(program, package=False) is kind


def test_a_package_is_installed_first_unless_the_program_is_a_shell_script() -> None:
    assert entry_point_kind("train.py", package=True) is EntryPointKind.PYTHON_PACKAGE
    assert entry_point_kind("train", package=True) is EntryPointKind.PYTHON_PACKAGE
    assert entry_point_kind("run.sh", package=True) is EntryPointKind.SHELL_SCRIPT


def test_timeouts_from_hyperparameters_strict_or_lenient() -> None:
    values = {"ringleader_sigterm_grace": 5, "ringleader_startup_timeout": "soon"}
    with pytest.raises(ConfigError) as caught:
        parse_timeouts(values)
    assert caught.value.field == "ringleader_startup_timeout"
    assert parse_timeouts(values, lenient=True) == Timeouts(sigterm_grace=5.0)
    assert parse_timeouts({}) == DEFAULTS == Timeouts()


def test_the_configuration_imports_no_artifacts_output_or_boto3() -> None:
    script = (
        "import sys, ringleader.config.job, ringleader.config.horovod; "
        "print('\\n'.join(sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    assert [
        name
        for name in loaded
        if name.startswith(("ringleader.artifacts", "ringleader.output", "boto3", "botocore"))
    ] == []
