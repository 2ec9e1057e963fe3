"""TensorFlow's distributions on the `spawn` launch strategy, 3 fake hosts, image
ringleader:tensorflow: parameter_server in SageMaker's layout (master + workers run the
script) and with TF2's chief roles (ParameterServerStrategy + ClusterCoordinator), and
multi_worker_mirrored_strategy. Parameter servers are started by ringleader and stopped once
the main task ended; a dying one is the root cause."""

import json
import re
import time
from collections.abc import Callable
from typing import Any

import docker
import pytest

from tests.container.conftest import JobRun

pytestmark = pytest.mark.container

HOSTS = ["algo-1", "algo-2", "algo-3"]
CLUSTER = {
    "master": ["algo-1:2222"],
    "ps": ["algo-1:2223", "algo-2:2223", "algo-3:2223"],
    "worker": ["algo-2:2222", "algo-3:2222"],
}
TF_CONFIG = re.compile(r"\[(algo-\d) rank (\d)\] TF_CONFIG (\S+) (\{.*\})$", re.MULTILINE)
LOSS = re.compile(r"\[algo-1 rank 0\] step \d+ loss=([0-9.]+)")


def tf_configs(output: str) -> dict[str, tuple[str, int, dict[str, Any]]]:
    """role -> (host, rank, TF_CONFIG) as each process printed it."""
    return {
        role: (host, int(rank), json.loads(text))
        for host, rank, role, text in TF_CONFIG.findall(output)
    }


def losses(output: str) -> list[float]:
    return [float(value) for value in LOSS.findall(output)]


@pytest.fixture
def ps_job(tensorflow_image: str) -> dict[str, Any]:
    return {
        "image": tensorflow_image,
        "distribution": "parameter_server",
        "processes_per_host": None,
        "entry_point": "tf_ps_train.py",
        "settings": {"startup_timeout": "60"},
    }


def test_parameter_server_in_sagemakers_layout(run_job: Callable[..., JobRun], ps_job) -> None:
    run = run_job(**ps_job, hyperparameters={"steps": "100", "log-interval": "25"})
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    seen = tf_configs(run.output)
    expected = {"master:0": ("algo-1", 0), "worker:0": ("algo-2", 2), "worker:1": ("algo-3", 4)}
    assert {role: seen[role][:2] for role in seen} == expected
    for role, (_, _, config) in seen.items():
        job, index = role.split(":")
        assert config == {
            "cluster": CLUSTER,
            "environment": "cloud",
            "task": {"type": job, "index": int(index)},
        }
    for index, host in enumerate(HOSTS):  # one parameter server per host, started by ringleader
        assert f"[{host} rank {2 * index + 1}] serving ps:{index} at grpc://" in run.output
    # The master logs every 25 of its own steps; workers that join take steps off it. The loss
    # of the untrained model is above 1: a logged loss under 0.1 shows the steps moved it.
    values = losses(run.output)
    assert values and values[-1] < 0.1, values
    assert "done: master:0 ran" in run.output
    assert "every main task ended: stopping the rest (ranks 1, " in run.output  # ps, maybe workers


def test_parameter_server_with_tf2_chief_roles(run_job: Callable[..., JobRun], ps_job) -> None:
    settings = {**ps_job["settings"], "tf_roles": "chief"}
    run = run_job(**{**ps_job, "settings": settings}, hyperparameters={"steps": "60"})
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    assert set(tf_configs(run.output)) == {"chief:0"}  # the workers are servers
    assert "[algo-2 rank 2] serving worker:0" in run.output
    assert "[algo-3 rank 5] serving ps:2" in run.output
    values = losses(run.output)
    # it learns; a fast run may reach loss=0.0000 (four decimals) by its first report
    assert len(values) >= 2 and values[-1] <= values[0]


def test_a_worker_task_failing_is_named_with_its_role(
    run_job: Callable[..., JobRun], ps_job
) -> None:
    failing = {"fail-task": "worker:1", "fail-code": "3", "fail-step": "0"}
    run = run_job(**ps_job, hyperparameters=failing)
    assert run.codes() == dict.fromkeys(HOSTS, 3), run.output
    for host in HOSTS:
        assert run.failure(host).startswith("Rank 4 (worker:1) on host algo-3 exited with code 3.")


def start_long_ps_job(start_job: Callable[..., JobRun], ps_job) -> JobRun:
    settings = {**ps_job["settings"], "tf_roles": "chief", "leader_timeout": "4"}
    run = start_job(**{**ps_job, "settings": settings}, hyperparameters={"steps": "1000000"})
    run.capture.wait_for(lambda text: "step 50 loss=" in text, timeout=120)
    return run


def test_a_killed_parameter_server_is_the_root_cause(
    start_job: Callable[..., JobRun], ps_job, docker_client: docker.DockerClient
) -> None:
    run = start_long_ps_job(start_job, ps_job)
    kill = (  # the parameter server itself: not its rank wrapper, not the worker's server
        "import json, psutil, signal\n"
        "killed = 0\n"
        "for p in psutil.process_iter(['cmdline', 'environ']):\n"
        "    server = (p.info['cmdline'] or [])[1:3] == ['-m', 'ringleader.launch.tfconfig']\n"
        "    task = json.loads((p.info['environ'] or {}).get('TF_CONFIG', '{}')).get('task')\n"
        "    if server and task == {'type': 'ps', 'index': 1}:\n"
        "        p.send_signal(signal.SIGKILL)\n"
        "        killed += 1\n"
        "print('killed', killed)\n"
    )
    container = docker_client.containers.get(run.container_id("algo-2"))
    result = container.exec_run(["python", "-c", kill])
    assert result.output.decode().strip() == "killed 1", result.output
    run.join(timeout=90)
    codes = set(run.codes().values())
    assert len(codes) == 1, run.codes()
    failure = run.failure("algo-1")
    assert failure.startswith("Rank 3 (ps:1) on host algo-2 was killed by signal 9"), failure
    assert codes == {137}


def test_docker_stop_stops_every_task_with_sigterm(
    start_job: Callable[..., JobRun], ps_job, docker_client: docker.DockerClient
) -> None:
    run = start_long_ps_job(start_job, ps_job)
    stopped = time.monotonic()
    docker_client.api.stop(run.container_id("algo-3"), timeout=40)
    run.join(timeout=90)
    took = time.monotonic() - stopped
    assert run.codes() == dict.fromkeys(HOSTS, 143), run.output
    # within ringleader's SIGTERM grace (30 s by default): no task was left for SIGKILL
    assert took < 30, f"every host exited {took:.1f} s after docker stop"
    assert run.failure("algo-1").startswith("Job stopped by SIGTERM received on host algo-3")


def test_multi_worker_mirrored_strategy(run_job: Callable[..., JobRun], ps_job) -> None:
    mwms = {**ps_job, "distribution": "multi_worker_mirrored_strategy"}
    run = run_job(**{**mwms, "entry_point": "tf_mwms_train.py"}, hyperparameters={"steps": "50"})
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    seen = tf_configs(run.output)
    assert {role: seen[role][:2] for role in seen} == {
        f"worker:{i}": (host, i) for i, host in enumerate(HOSTS)
    }
    workers = [f"{host}:8890" for host in HOSTS]
    assert all(config["cluster"] == {"worker": workers} for _, _, config in seen.values())
    assert "done: 50 steps on 3 workers" in run.output


def test_multi_worker_mirrored_strategy_failing_worker(
    run_job: Callable[..., JobRun], ps_job
) -> None:
    mwms = {**ps_job, "distribution": "multi_worker_mirrored_strategy"}
    run = run_job(
        **{**mwms, "entry_point": "tf_mwms_train.py"},
        hyperparameters={"fail-worker": "1", "fail-code": "3", "fail-step": "5"},
    )
    assert run.codes() == dict.fromkeys(HOSTS, 3), run.output
    assert run.failure("algo-3").startswith("Rank 1 (worker:1) on host algo-2 exited with code 3.")


def test_a_script_without_tensorflow_is_named_with_its_import_error(
    run_job: Callable[..., JobRun],
) -> None:
    run = run_job(  # ringleader:latest has no TensorFlow
        distribution="multi_worker_mirrored_strategy",
        processes_per_host=None,
        entry_point="tf_mwms_train.py",
        hyperparameters={},
    )
    codes = set(run.codes().values())
    assert codes == {1}, run.codes()
    failure = run.failure("algo-2")
    assert re.match(r"Rank \d \(worker:\d\) on host algo-\d exited with code 1\.", failure)
    assert "ModuleNotFoundError: No module named 'tensorflow'" in failure
