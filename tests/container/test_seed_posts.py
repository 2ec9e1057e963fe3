"""The seed posts' own settings, as their users would pass them, on 3 fake hosts x 2 processes.

Each test checks what a user of that post would look at: every rank ran, the files the post
asks for landed where SageMaker uploads them, and every host's exit code. (The posts' GPU
counts become 2 processes per host here: no GPU is lent to this project.)
"""

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.container.conftest import JobRun

pytestmark = pytest.mark.container

HOSTS = ["algo-1", "algo-2", "algo-3"]
OUTPUT = "/opt/ml/output"
PROBE = """\
import os
from mpi4py import MPI

comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank())
print(f"rank {comm.Get_rank()}/{comm.Get_size()} sum={total} "
      f"NCCL_DEBUG={os.environ.get('NCCL_DEBUG')} "
      f"VADER={os.environ.get('OMPI_MCA_btl_vader_single_copy_mechanism')}", flush=True)
"""
PROBE_LINE = re.compile(r"\[(algo-\d) rank (\d)\] rank \d/6 sum=15 NCCL_DEBUG=(\S+) VADER=(\S+)")


def probe_source(tmp_path: Path) -> Path:
    source = tmp_path / "code"
    source.mkdir()
    (source / "probe.py").write_text(PROBE)
    return source


def test_mxnet_on_sagemaker_post(run_job: Callable[..., JobRun], mxnet_image: str) -> None:
    """ "Reducing training time with Apache MXNet and Horovod on Amazon SageMaker": the
    estimator's custom_mpi_options `-verbose --NCCL_DEBUG=INFO`, then its advanced sections'
    Horovod settings through -x: timeline and autotune log written under /opt/ml/output (where
    SageMaker uploads nothing: ringleader keeps them in output/data), fusion threshold and
    cycle time."""
    options = (
        f"-verbose --NCCL_DEBUG=INFO -x HOROVOD_TIMELINE={OUTPUT}/timeline.json "
        f"-x HOROVOD_AUTOTUNE=1 -x HOROVOD_AUTOTUNE_LOG={OUTPUT}/autotune_log.csv "
        "-x HOROVOD_FUSION_THRESHOLD=33554432 -x HOROVOD_CYCLE_TIME=5 "
        "--mca mpi_yield_when_idle 1"
    )
    run = run_job(
        image=mxnet_image,
        entry_point="mxnet_horovod_train.py",
        hyperparameters={"epochs": "2", "batches": "20"},
        mpi_options=options,
        settings={"startup_timeout": "60"},
    )
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    assert "training on 6 ranks" in run.output
    data = run.job.output_dir / "algo-1" / "output" / "data"
    assert (data / "timeline.json").stat().st_size > 0
    assert "cycle_time_ms" in (data / "autotune_log.csv").read_text()
    assert (run.job.output_dir / "algo-1" / "model" / "mlp-symbol.json").is_file()


@pytest.mark.parametrize(
    ("options", "nccl_debug", "vader"),
    [
        pytest.param(  # MXNet + Horovod on EC2 / the DLAMI post's mpirun flags
            "-bind-to none -map-by slot -mca pml ob1 -mca btl ^openib "
            "-x NCCL_DEBUG=INFO -x LD_LIBRARY_PATH -x PATH",
            "INFO",
            "none",  # ringleader's own --mca for containers, which mpirun gives every rank
            id="ec2-mpirun-flags",
        ),
        pytest.param(  # TensorFlow script mode with Horovod on SageMaker
            "-verbose --NCCL_DEBUG=WARN -x OMPI_MCA_btl_vader_single_copy_mechanism=none",
            "WARN",
            "none",
            id="tensorflow-sagemaker",
        ),
    ],
)
def test_posts_mpi_options_run_every_rank(
    run_job: Callable[..., JobRun], tmp_path: Path, options: str, nccl_debug: str, vader: str
) -> None:
    run = run_job(
        source_dir=probe_source(tmp_path),
        entry_point="probe.py",
        hyperparameters={},
        mpi_options=options,
    )
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    seen = {
        int(rank): (host, debug, mechanism)
        for host, rank, debug, mechanism in PROBE_LINE.findall(run.output)
    }
    assert seen == {rank: (HOSTS[rank // 2], nccl_debug, vader) for rank in range(6)}, run.output


def test_mask_rcnn_entry_script_contract(run_job: Callable[..., JobRun], tmp_path: Path) -> None:
    """The Mask R-CNN post's SageMaker entry script: a shell script that starts the training;
    algo-1 leads, and the non-master hosts exit with the job's real code (here rank 3's)."""
    source = probe_source(tmp_path)
    (source / "train.sh").write_text(
        "#!/bin/sh\n"
        'echo "entry script on $SM_CURRENT_HOST"\n'
        'if [ "$OMPI_COMM_WORLD_RANK" = 3 ]; then echo "rank 3 giving up" >&2; exit 9; fi\n'
        'exec python "$(dirname "$0")/probe.py"\n'
    )
    run = run_job(source_dir=source, entry_point="train.sh", hyperparameters={})
    assert "[ringleader algo-1] " in run.output and "leader of ['algo-1'" in run.output
    assert run.codes() == dict.fromkeys(HOSTS, 9), run.output
    for host in HOSTS:
        assert run.failure(host).startswith("Rank 3 on host algo-2 exited with code 9."), host
