"""The same end-to-end jobs with SageMaker Python SDK v3 (`sagemaker>=3`) local mode.

SDK v3 cannot live in the same virtualenv as v2 (both are the `sagemaker` package), so these
run tests/sdk/v3_job.py with the interpreter named by RINGLEADER_SDK3_PYTHON, e.g.

    python3 -m venv /tmp/sdk3 && /tmp/sdk3/bin/pip install 'sagemaker>=3'
    RINGLEADER_SDK3_PYTHON=/tmp/sdk3/bin/python .venv/bin/pytest tests/sdk -k v3

`make test` (and so CI) sets it to build/sdk3-venv, which scripts/setup.sh creates; without
it they fail under CI and are skipped elsewhere; a missing Docker or image fails them like
every other test here.

What v3 does differently (sagemaker/train/local/local_container.py, 3.27): hosts are plain
algo-1..algo-N, resourceconfig.json names the interface `ethwe` (absent in a Docker container:
ringleader warns and uses the interface that reaches the other hosts), the compose file has no
`command` (the image's CMD `train` runs), the compose project is the container root's name, and
output.tar.gz stays in <root>/compressed_artifacts.
"""

import os
from pathlib import Path
from typing import Any

import pytest

from tests.container.conftest import EXAMPLES, HOROVOD_IMAGE
from tests.sdk.conftest import IMAGE, SdkJob, assert_hosts_agree, rank_records
from tests.sdk.v3_runner import new_root, remove_containers, run_v3_job, v3_spec

# One pytest-xdist worker runs these jobs: SDK v3 names its local-mode hosts algo-1..algo-3 on
# the shared sagemaker-local network, so two at once reach each other's leader (seen: a worker
# refused the other job's leader at algo-1:29100 and exited 78).
ONE_WORKER = pytest.mark.xdist_group("sdk-v3")
pytestmark = [pytest.mark.sdk, pytest.mark.container, ONE_WORKER]

SDK3_PYTHON = os.environ.get("RINGLEADER_SDK3_PYTHON")


@pytest.fixture
def sdk3_job(docker_client, tmp_path):
    if not SDK3_PYTHON:
        message = "RINGLEADER_SDK3_PYTHON is not set (sagemaker>=3; make test sets it)"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI must run these, never skip them
        pytest.skip(message)
    jobs = []

    def run(code: Path, channel: Path, *, image: str = IMAGE, **options: Any) -> SdkJob:
        """tests/sdk/v3_runner.py's v3_spec: `distributed`, `entry_script`, `instance_count`,
        `construct_only`; the rest are the user's hyperparameters."""
        named = ("distributed", "entry_script", "instance_count", "construct_only")
        chosen = {key: options.pop(key) for key in named if key in options}
        spec = v3_spec(new_root(tmp_path), code, channel, image, hyperparameters=options, **chosen)
        job = run_v3_job(SDK3_PYTHON, tmp_path, docker_client, spec)
        jobs.append(job)
        return job

    yield run
    for job in jobs:
        remove_containers(docker_client, job)


# ------------------------------------------------- ModelTrainer(distributed=Ringleader(...))
RINGLEADER_MPI = {
    "distribution": "mpi",
    "processes_per_host": 2,
    "mpi_options": "-x RINGLEADER_PROBE_OPTION=from-custom-options",
}
# ringleader:latest before ringleader's own layer (scripts/lib-images.sh, stage_tag): Python and
# pip on PATH, no ringleader, as a user's image that was never prepared.
NO_RINGLEADER_IMAGE = "ringleader-stage/ringleader-latest:runtime"
# A script written for AWS's PyTorch container: one process per host, no distribution, the
# process group from MASTER_ADDR and MASTER_PORT (init_method env://, the default).
ENV_INIT_PY = """\
import json, os
import torch
import torch.distributed as dist

hosts = json.loads(os.environ["SM_HOSTS"])
rank = hosts.index(os.environ["SM_CURRENT_HOST"])
dist.init_process_group("gloo", rank=rank, world_size=len(hosts))
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
master = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
print(f"env-init host={hosts[rank]} rank={rank} master={master} sum={total.item():g}", flush=True)
dist.destroy_process_group()
"""


# Each mpi job both ways: the image's own entry point (no source_code, the sagemaker_*
# hyperparameters), and ModelTrainer(source_code=..., distributed=Ringleader(...)), where the
# SDK's sm_train.sh runs Ringleader's driver in every container.
BOTH_WAYS = pytest.mark.parametrize(
    "distributed", [None, RINGLEADER_MPI], ids=["entry-point", "ringleader"]
)


@BOTH_WAYS
def test_v3_mpi_job_on_three_hosts(sdk3_job, code_dir, channel, distributed):
    """The code from the source directory, the hyperparameters as arguments, requirements.txt
    installed, mpirun's options passed: the same either way."""
    job = sdk3_job(code_dir(), channel, distributed=distributed, rounds=2)
    assert job.error is None
    assert job.hosts == ["algo-1", "algo-2", "algo-3"]
    assert_hosts_agree(job, 0, host_pattern=r"algo-[1-3]")
    files = job.output_tar()
    assert "success" in files
    records = rank_records(files)
    assert sorted(records) == list(range(6))
    for rank, record in records.items():
        assert record["host"] == f"algo-{rank // 2 + 1}"
        assert record["probe"] == "1.0"  # requirements.txt, installed
        assert record["argv"] == ["--rounds", "2"]
        assert record["channel_files"] == ["sample.csv"]
        assert record["option"] == "from-custom-options"


@BOTH_WAYS
def test_v3_failing_rank_is_named_on_every_host(sdk3_job, code_dir, channel, distributed):
    failing = {"fail-rank": 4, "fail-code": 3}
    job = sdk3_job(code_dir(), channel, distributed=distributed, rounds=2, **failing)
    assert job.error is not None and "Process exited with code: 3" in str(job.error)
    headline = "Rank 4 on host algo-3 exited with code 3."
    assert_hosts_agree(job, 3, headline, host_pattern=r"algo-[1-3]")
    assert job.output_tar()["failure"].decode().startswith(headline)


def ddp_job(sdk3_job: Any, channel: Path, **hyperparameters: Any) -> SdkJob:
    """examples/ddp_train.py in our PyTorch image, Ringleader(distribution="torch_distributed")."""
    torch = {"distribution": "torch_distributed", "processes_per_host": 2}
    return sdk3_job(
        EXAMPLES,
        channel,
        distributed=torch,
        entry_script="ddp_train.py",
        image=HOROVOD_IMAGE,
        **hyperparameters,
    )


def test_v3_ringleader_torch_distributed_gives_every_rank_torchrun_s_environment(sdk3_job, channel):
    job = ddp_job(sdk3_job, channel, steps=20, **{"log-interval": 10})
    assert job.error is None
    assert_hosts_agree(job, 0, host_pattern=r"algo-[1-3]")
    files = job.output_tar()
    logs = b"".join(content for name, content in files.items() if name.endswith(".log"))
    for rank in range(6):
        expected = (
            f"env rank={rank} local_rank={rank % 2} world=6 group_rank={rank // 2} "
            f"master=algo-1:7777 host=algo-{rank // 2 + 1} allreduce=15 ok"
        )
        assert expected.encode() in logs, expected


def test_v3_ringleader_torch_distributed_failing_rank_is_named(sdk3_job, channel):
    job = ddp_job(sdk3_job, channel, steps=400, **{"fail-rank": 3, "fail-code": 3})
    assert job.error is not None and "Process exited with code: 3" in str(job.error)
    headline = "Rank 3 on host algo-2 exited with code 3."
    assert_hosts_agree(job, 3, headline, host_pattern=r"algo-[1-3]")


def test_a_script_written_for_aws_pytorch_container_finds_master_addr_and_port(
    sdk3_job, tmp_path, channel
):
    """No distribution, 2 hosts: each runs the script once and it calls
    init_process_group(rank=host index, world_size=hosts) with env://, as SageMaker's classic
    PyTorch examples do: MASTER_ADDR (the first host) and MASTER_PORT (7777) must be set."""
    code = tmp_path / "env-init"
    code.mkdir()
    (code / "train.py").write_text(ENV_INIT_PY)
    job = sdk3_job(
        code, channel, distributed={"distribution": "none"}, image=HOROVOD_IMAGE, instance_count=2
    )
    assert job.error is None
    assert job.hosts == ["algo-1", "algo-2"]
    for host in job.hosts:
        assert job.containers[host].exit_code == 0
    text = b"".join(
        content for snapshot in job.snapshots.values() for content in snapshot.files.values()
    )
    for rank in range(2):
        expected = f"env-init host=algo-{rank + 1} rank={rank} master=algo-1:7777 sum=3"
        assert expected.encode() in text, expected


@pytest.mark.parametrize(
    ("distributed", "message"),
    [
        (
            {"distribution": "ddp"},
            "Configuration error in distribution: expected one of mpi, torch_distributed, "
            "parameter_server, multi_worker_mirrored_strategy, none, got 'ddp'",
        ),
        (
            {"settings": {"hang_timeout": "soon"}},
            "Configuration error in ringleader_hang_timeout: expected a number of seconds",
        ),
        ({"settings": {"hang_timout": 30}}, "ringleader_hang_timout: unknown ringleader setting"),
    ],
)
def test_v3_ringleader_refuses_bad_fields_where_the_user_makes_it(
    sdk3_job, code_dir, channel, distributed, message
):
    job = sdk3_job(code_dir(), channel, distributed=distributed, construct_only=True)
    assert job.error is not None and message in str(job.error), job.error
    assert "Ringleader(...)" in str(job.error)


def test_v3_ringleader_in_an_image_without_ringleader_says_so_on_every_host(
    sdk3_job, code_dir, channel, docker_client
):
    docker_client.images.get(NO_RINGLEADER_IMAGE)  # built with ringleader:latest
    job = sdk3_job(code_dir(), channel, distributed=RINGLEADER_MPI, image=NO_RINGLEADER_IMAGE)
    assert job.error is not None and "Process exited with code: 78" in str(job.error)
    for host in job.hosts:
        assert job.containers[host].exit_code == 78
        failure = job.snapshots[host].files["failure"].decode()
        assert failure.startswith(
            "Configuration error in training_image: ringleader is not installed in this image"
        ), failure
        assert "ringleader image setup" in failure
