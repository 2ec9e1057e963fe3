"""Heterogeneous clusters (SageMaker instance_groups) on fake hosts: groups data (algo-1) and
train (algo-2, algo-3), the distribution over train only. The train hosts run the distributed
job (mpirun, or spawned torch_distributed ranks) led by algo-2; algo-1 runs the script once
with its own SM_* environment; every host ends with the job's outcome."""

import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.container.conftest import JobRun

pytestmark = pytest.mark.container

HOSTS = ["algo-1", "algo-2", "algo-3"]
GROUPS = {"instance_groups": (("data", 1), ("train", 2)), "distribution_groups": ("train",)}
DISTRIBUTED = re.compile(
    r"\[(algo-\d) rank (\d)\] distributed rank (\d) of 4 in group train: allreduce=6 ok"
)
PLAIN = '[algo-1 rank 4] plain host algo-1 in group data (hetero=true, groups=["data","train"])'


def check_success(run: JobRun) -> None:
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    distributed = {
        int(rank): host
        for host, rank, own_rank in DISTRIBUTED.findall(run.output)
        if rank == own_rank
    }
    assert distributed == {0: "algo-2", 1: "algo-2", 2: "algo-3", 3: "algo-3"}
    assert PLAIN in run.output
    assert '"world_size": 5' in (run.job.output_dir / "algo-2/output/data/job.json").read_text()


def test_mpi_over_one_instance_group(run_job: Callable[..., JobRun]) -> None:
    run = run_job(**GROUPS, entry_point="hetero_job.py", hyperparameters={})
    check_success(run)
    assert "-H algo-2:2,algo-3:2" in run.output


def test_torch_distributed_over_one_instance_group(
    run_job: Callable[..., JobRun], horovod_image: str
) -> None:
    run = run_job(
        **GROUPS,
        image=horovod_image,
        distribution="torch_distributed",
        entry_point="hetero_job.py",
        hyperparameters={"framework": "torch"},
        settings={"startup_timeout": "60"},
    )
    check_success(run)


def test_a_failing_host_outside_the_distribution_is_every_hosts_outcome(
    run_job: Callable[..., JobRun],
) -> None:
    overrides: dict[str, Any] = {"plain-exit-code": "4", "seconds": "1"}
    run = run_job(**GROUPS, entry_point="hetero_job.py", hyperparameters=overrides)
    assert run.codes() == dict.fromkeys(HOSTS, 4), run.output
    for host in HOSTS:
        assert run.failure(host).startswith("Rank 4 on host algo-1 exited with code 4.")
