"""The seeds' MXNet (Gluon) + Horovod job on 3 x 2 fake hosts in ringleader:mxnet: it trains,
Horovod's timeline and autotune log are kept in output/data, and a failing rank is named."""

import csv
import re

import pytest

from ringleader.core.jobfile import read_job_file
from tests.container.test_horovod import load_chrome_trace

pytestmark = pytest.mark.container

HOSTS = ["algo-1", "algo-2", "algo-3"]
EPOCH = re.compile(r"\[algo-1 rank 0\] epoch (\d+) loss=([0-9.]+) accuracy=([0-9.]+)")


def test_gluon_job_trains_with_timeline_and_autotune(run_job, mxnet_image):
    run = run_job(
        image=mxnet_image,
        entry_point="mxnet_horovod_train.py",
        hyperparameters={"epochs": "5", "batches": "60"},
        settings={
            "startup_timeout": "60",
            "horovod_timeline": "true",
            "horovod_autotune": "true",
        },
    )
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    epochs = [(int(e), float(loss), float(acc)) for e, loss, acc in EPOCH.findall(run.output)]
    assert [epoch for epoch, _, _ in epochs] == [1, 2, 3, 4, 5], epochs
    assert epochs[-1][1] < epochs[0][1], f"loss did not go down: {epochs}"
    assert "training on 6 ranks" in run.output
    leader = run.job.output_dir / "algo-1"
    assert (leader / "model" / "mlp-symbol.json").is_file()
    data = leader / "output" / "data"
    events = load_chrome_trace((data / "horovod_timeline.json").read_text())
    assert any(event.get("name") == "ALLREDUCE" for event in events)
    rows = [
        row
        for row in csv.reader((data / "horovod_autotune_log.csv").read_text().splitlines())
        if row
    ]
    assert rows and "cycle_time_ms" in rows[0], rows[:1]


def test_failing_gluon_rank_is_named_with_its_code(run_job, mxnet_image):
    run = run_job(
        image=mxnet_image,
        entry_point="mxnet_horovod_train.py",
        hyperparameters={"epochs": "3", "batches": "10", "fail-rank": "3", "fail-code": "7"},
        settings={"startup_timeout": "60"},
    )
    assert run.codes() == dict.fromkeys(HOSTS, 7), run.output
    for host in HOSTS:
        assert run.failure(host).startswith("Rank 3 on host algo-2 exited with code 7")


# MXNet's parameter servers (`kvstore='dist_sync'`): what SageMaker's MXNet estimator sends for
# distribution={'parameter_server': {'enabled': True}}, and nothing else.
WORKER_FAILING = re.compile(r"\[(algo-\d) rank (\d+)\] worker \d+ failing on purpose")


@pytest.fixture
def mxnet_ps_job(mxnet_image):
    return {
        "image": mxnet_image,
        "distribution": "parameter_server",
        "processes_per_host": None,
        "entry_point": "mxnet_ps_train.py",
        "settings": {"startup_timeout": "60"},
    }


def test_mxnet_parameter_servers_train(run_job, mxnet_ps_job):
    run = run_job(**mxnet_ps_job, hyperparameters={"epochs": "3"})
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    assert "training on 3 workers with dist_sync" in run.output
    losses = [float(value) for value in re.findall(r"epoch \d loss=([0-9.]+)", run.output)]
    assert len(losses) == 3 and losses[-1] < losses[0], losses
    assert (run.job.output_dir / "algo-1" / "model" / "mlp-symbol.json").is_file()
    summary = read_job_file(run.job.output_dir / "algo-1" / "output" / "data" / "job.json")
    roles = {record.role: record.host for record in summary.ranks}
    assert roles == {
        "worker:0": "algo-1",
        "server:0": "algo-1",
        "scheduler:0": "algo-1",
        "worker:1": "algo-2",
        "server:1": "algo-2",
        "worker:2": "algo-3",
        "server:2": "algo-3",
    }, roles


def test_failing_mxnet_worker_is_named_with_its_code(run_job, mxnet_ps_job):
    run = run_job(
        **mxnet_ps_job, hyperparameters={"epochs": "3", "fail-rank": "1", "fail-code": "7"}
    )
    assert run.codes() == dict.fromkeys(HOSTS, 7), run.output
    failing = WORKER_FAILING.search(run.output)
    assert failing is not None, run.output
    host, rank = failing.groups()
    for each in HOSTS:
        assert run.failure(each).startswith(
            f"Rank {rank} (worker:{int(host[-1]) - 1}) on host {host} exited with code 7"
        ), run.failure(each)


def start_long_mxnet_ps_job(start_job, mxnet_ps_job):
    run = start_job(**mxnet_ps_job, hyperparameters={"epochs": "100000"})
    run.capture.wait_for(lambda text: "epoch 2 loss=" in text, timeout=120)
    return run


def test_a_killed_mxnet_server_is_the_root_cause(start_job, mxnet_ps_job, docker_client):
    run = start_long_mxnet_ps_job(start_job, mxnet_ps_job)
    container = docker_client.containers.get(run.container_id("algo-2"))
    # the server itself (its command starts with the interpreter), not its rank wrapper
    result = container.exec_run(["pkill", "-KILL", "-f", "^[^ ]+ -m ringleader.launch.mxnet_ps"])
    assert result.exit_code == 0, result.output
    run.join(timeout=90)
    assert run.codes() == dict.fromkeys(HOSTS, 137), run.output
    for host in HOSTS:
        failure = run.failure(host)
        assert failure.startswith("Rank 4 (server:1) on host algo-2 was killed by signal 9"), (
            failure
        )


def test_docker_stop_stops_every_mxnet_task_with_sigterm(start_job, mxnet_ps_job, docker_client):
    run = start_long_mxnet_ps_job(start_job, mxnet_ps_job)
    docker_client.api.stop(run.container_id("algo-3"), timeout=40)
    run.join(timeout=90)
    assert run.codes() == dict.fromkeys(HOSTS, 143), run.output
