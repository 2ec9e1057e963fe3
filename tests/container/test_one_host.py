"""One host, several processes: every distribution starts all of its ranks there.

The posts' "1 instance, 8 GPUs with Horovod" case: SageMaker runs `mpirun -np P` on the one
host, and torchrun starts P processes. ringleader did run a single process for a one-host mpi
job (world size 1, exit 0): a job that "succeeded" having used one GPU of eight.
"""

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from ringleader.core.jobfile import read_job_file
from tests.container.conftest import JobRun

pytestmark = pytest.mark.container

PROBE = """\
import os
from mpi4py import MPI

comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank())
print(
    f"rank {comm.Get_rank()}/{comm.Get_size()} sum={total} "
    f"NCCL_DEBUG={os.environ.get('NCCL_DEBUG')} "
    f"NCCL_SOCKET_IFNAME={os.environ.get('NCCL_SOCKET_IFNAME')} "
    f"PROBE={os.environ.get('PROBE')}",
    flush=True,
)
"""
PROBE_LINE = re.compile(
    r"\[algo-1 rank (\d)\] rank (\d)/(\d) sum=(\d+) NCCL_DEBUG=(\S+) "
    r"NCCL_SOCKET_IFNAME=(\S+) PROBE=(\S+)"
)


def world_size(run: JobRun) -> int:
    return read_job_file(run.job.output_dir / "algo-1" / "output" / "data" / "job.json").world_size


def test_one_host_mpi_job_runs_every_rank_under_mpirun(
    run_job: Callable[..., JobRun], tmp_path: Path
) -> None:
    """1 x 4 with the TensorFlow post's `-verbose --NCCL_DEBUG=...` and an `-x` of the user's."""
    source = tmp_path / "code"
    source.mkdir()
    (source / "probe.py").write_text(PROBE)
    run = run_job(
        hosts=1,
        processes_per_host=4,
        source_dir=source,
        entry_point="probe.py",
        hyperparameters={},
        mpi_options="-verbose --NCCL_DEBUG=WARN -x PROBE=7",
    )
    assert run.codes() == {"algo-1": 0}
    assert "launching: mpirun" in run.output
    seen = {int(match[0]): match[1:] for match in PROBE_LINE.findall(run.output)}
    assert seen == {rank: (str(rank), "4", "6", "WARN", "eth0", "7") for rank in range(4)}, (
        run.output
    )
    assert world_size(run) == 4


def test_one_host_mpi_rank_failure_is_named(run_job: Callable[..., JobRun]) -> None:
    run = run_job(
        hosts=1,
        processes_per_host=2,
        hyperparameters={"rounds": "1", "fail-rank": "1", "fail-code": "7"},
    )
    assert run.codes() == {"algo-1": 7}
    assert run.failure("algo-1").startswith("Rank 1 on host algo-1 exited with code 7.")


def one_host(
    run_job: Callable[..., JobRun], image: str, distribution: str, entry_point: str, **spec: object
) -> JobRun:
    """20 steps of an example on algo-1 alone; every host (the one) exits 0."""
    run = run_job(
        hosts=1,
        image=image,
        distribution=distribution,
        entry_point=entry_point,
        hyperparameters={"steps": "20", "log-interval": "10"},
        settings={"startup_timeout": "60"},
        **spec,
    )
    assert run.codes() == {"algo-1": 0}
    return run


def test_one_host_torch_distributed_starts_every_rank(
    run_job: Callable[..., JobRun], horovod_image: str
) -> None:
    run = one_host(
        run_job, horovod_image, "torch_distributed", "ddp_train.py", processes_per_host=2
    )
    assert "done: 20 steps on 2 ranks" in run.output
    assert world_size(run) == 2


def test_one_host_parameter_server_runs_the_script_alone(
    run_job: Callable[..., JobRun], tensorflow_image: str
) -> None:
    """As SageMaker's TensorFlow container: no parameter server, no TF_CONFIG on one host."""
    run = one_host(
        run_job, tensorflow_image, "parameter_server", "tf_ps_train.py", processes_per_host=None
    )
    assert "[algo-1 rank 0] no TF_CONFIG: training alone" in run.output
    assert "done: alone ran 20 steps" in run.output
    assert "serving ps" not in run.output
    assert world_size(run) == 1


def test_one_host_multi_worker_mirrored_strategy(
    run_job: Callable[..., JobRun], tensorflow_image: str
) -> None:
    run = one_host(
        run_job,
        tensorflow_image,
        "multi_worker_mirrored_strategy",
        "tf_mwms_train.py",
        processes_per_host=None,
    )
    config = re.search(r"TF_CONFIG worker:0 (\{.*\})", run.output)
    assert config is not None, run.output
    assert json.loads(config[1])["cluster"] == {"worker": ["algo-1:8890"]}
    assert "done: 20 steps on 1 workers" in run.output
