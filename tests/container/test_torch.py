"""torch_distributed on the `spawn` launch strategy: 3 fake hosts x 2 ranks of
examples/ddp_train.py (PyTorch DDP, gloo on CPU) in the image ringleader:horovod, which has
PyTorch. Every host starts its own ranks with torchrun's environment; no ssh, no mpirun."""

import re
from collections.abc import Callable
from typing import Any

import docker
import pytest

from tests.container.conftest import JobRun, rank_lines

pytestmark = pytest.mark.container

HOSTS = ["algo-1", "algo-2", "algo-3"]
ENV_LINE = re.compile(
    r"\[(algo-\d) rank (\d)\] env rank=(\d) local_rank=(\d) world=(\d+) group_rank=(\d) "
    r"master=(\S+) host=(\S+) allreduce=(\S+) ok"
)


@pytest.fixture
def torch_job(horovod_image: str) -> dict[str, Any]:
    return {
        "image": horovod_image,
        "distribution": "torch_distributed",
        "entry_point": "ddp_train.py",
        "settings": {"startup_timeout": "60"},
    }


def test_every_rank_gets_torchruns_environment_and_trains(
    run_job: Callable[..., JobRun], torch_job: dict[str, Any]
) -> None:
    metrics = '[{"Name": "loss", "Regex": "loss=([0-9.]+)"}]'
    settings = {**torch_job["settings"], "metric_definitions": metrics}
    run = run_job(
        **{**torch_job, "settings": settings},
        hyperparameters={"steps": "20", "log-interval": "10"},
    )
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    seen = {}
    for match in ENV_LINE.finditer(run.output):
        tag_host, tag_rank, rank, local, world, group, master, host, total = match.groups()
        assert tag_rank == rank and host == tag_host
        seen[int(rank)] = (int(local), int(world), int(group), master, host, total)
    assert seen == {
        rank: (rank % 2, 6, rank // 2, "algo-1:7777", f"algo-{rank // 2 + 1}", "15")
        for rank in range(6)
    }
    assert (run.job.output_dir / "algo-1" / "model" / "model.pt").is_file()
    metrics_file = run.job.output_dir / "algo-1" / "output" / "data" / "metrics.jsonl"
    assert metrics_file.read_text().count('"loss"') == 2  # steps 10 and 20, rank 0 only
    assert "mpirun" not in run.output and "sshd" not in run.output


def test_a_worker_rank_failing_is_named_and_its_code_is_every_hosts(
    run_job: Callable[..., JobRun], torch_job: dict[str, Any]
) -> None:
    run = run_job(
        **torch_job,
        hyperparameters={"steps": "400", "fail-rank": "3", "fail-code": "3", "fail-step": "5"},
    )
    assert run.codes() == dict.fromkeys(HOSTS, 3), run.output
    for host in HOSTS:
        assert run.failure(host).startswith("Rank 3 on host algo-2 exited with code 3. ")


def test_an_exception_in_a_record_main_is_in_the_failure_file(
    run_job: Callable[..., JobRun], torch_job: dict[str, Any]
) -> None:
    run = run_job(
        **torch_job, hyperparameters={"steps": "400", "raise-rank": "4", "fail-step": "5"}
    )
    assert run.codes() == dict.fromkeys(HOSTS, 1), run.output
    failure = run.failure("algo-1")
    assert failure.startswith("Rank 4 on host algo-3 exited with code 1")
    assert "Its error (recorded by @record):" in failure
    assert failure.rstrip().endswith("ValueError: rank 4 raised on purpose at step 5")
    assert "in main\n" in failure  # the frame that raised


def start_long_job(start_job: Callable[..., JobRun], torch_job: dict[str, Any]) -> JobRun:
    run = start_job(
        **{**torch_job, "settings": {"startup_timeout": "60", "leader_timeout": "4"}},
        hyperparameters={"steps": "100000", "step-sleep": "0.1", "log-interval": "1000000"},
    )
    run.capture.wait_for(lambda text: len(rank_lines(text, "env rank=")) == 6, timeout=120)
    return run


def test_docker_stop_of_one_host_stops_every_rank_with_sigterm(
    start_job: Callable[..., JobRun],
    torch_job: dict[str, Any],
    docker_client: docker.DockerClient,
) -> None:
    run = start_long_job(start_job, torch_job)
    docker_client.api.stop(run.container_id("algo-2"), timeout=40)
    run.join(timeout=90)
    assert run.codes() == dict.fromkeys(HOSTS, 143), run.output
    assert rank_lines(run.output, "got SIGTERM") == set(range(6))
    assert run.failure("algo-1").startswith("Job stopped by SIGTERM received on host algo-2")


def test_a_killed_worker_host_is_the_cause_on_every_surviving_host(
    start_job: Callable[..., JobRun],
    torch_job: dict[str, Any],
    docker_client: docker.DockerClient,
) -> None:
    run = start_long_job(start_job, torch_job)
    docker_client.api.kill(run.container_id("algo-3"), signal="SIGKILL")
    run.join(timeout=60)
    assert run.codes() == {"algo-1": 75, "algo-2": 75, "algo-3": 137}, run.output
    for host in ("algo-1", "algo-2"):
        assert run.failure(host).startswith("Host algo-3 (ranks 4, 5): "), run.failure(host)


def test_a_module_entry_point_runs_with_dash_m(
    run_job: Callable[..., JobRun], torch_job: dict[str, Any]
) -> None:
    run = run_job(**{**torch_job, "entry_point": "-m ddp_train"}, hyperparameters={"steps": "5"})
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    assert len(ENV_LINE.findall(run.output)) == 6
    assert "-- /opt/ringleader/venv/bin/python3 -m ddp_train --steps 5" in run.output  # image.json
