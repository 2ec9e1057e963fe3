"""A real 3-host x 2-process job: success, failing ranks, signals, lost hosts."""

import time

import pytest

from tests.container.conftest import rank_lines

pytestmark = pytest.mark.container

HOSTS = ["algo-1", "algo-2", "algo-3"]


def test_success_every_rank_runs_and_every_host_exits_0(run_job):
    run = run_job(hyperparameters={"rounds": "3"})
    assert run.codes() == dict.fromkeys(HOSTS, 0)
    assert rank_lines(run.output, "allreduce_sum=15 ok") == set(range(6))
    assert "done: 3 rounds on 6 ranks" in run.output
    for host in HOSTS:
        assert run.has_success_file(host)
    # each rank saw its own host's SM_CURRENT_HOST
    for rank, host in [(0, "algo-1"), (2, "algo-2"), (5, "algo-3")]:
        assert f"[{host} rank {rank}] rank {rank}/6 on {host} " in run.output


def test_worker_rank_exit_code_reaches_every_host(run_job):
    run = run_job(hyperparameters={"rounds": "2", "fail-rank": "4", "fail-code": "3"})
    assert run.codes() == dict.fromkeys(HOSTS, 3)
    for host in HOSTS:
        failure = run.failure(host)
        assert failure.startswith("Rank 4 on host algo-3 exited with code 3."), failure
        assert "failing on purpose with code 3" in failure
        assert len(failure.encode()) <= 1024


def test_leader_rank_failure(run_job):
    run = run_job(hyperparameters={"rounds": "2", "fail-rank": "0", "fail-code": "5"})
    assert run.codes() == dict.fromkeys(HOSTS, 5)
    assert run.failure("algo-2").startswith("Rank 0 on host algo-1 exited with code 5.")


def test_rank_killed_by_sigkill_gives_137_everywhere(run_job):
    run = run_job(hyperparameters={"rounds": "2", "fail-rank": "3", "fail-signal": "KILL"})
    assert run.codes() == dict.fromkeys(HOSTS, 137)
    failure = run.failure("algo-1")
    assert failure.startswith("Rank 3 on host algo-2 was killed by signal 9 (SIGKILL)"), failure


def test_docker_stop_forwards_sigterm_and_every_host_exits_143(start_job, docker_client):
    run = start_job(hyperparameters={"rounds": "100", "sleep": "5"})
    run.capture.wait_for(lambda text: len(rank_lines(text, "round 1:")) == 6, timeout=60)
    started = time.monotonic()
    for container_id in run.job.container_ids.values():
        docker_client.api.kill(container_id, signal="SIGTERM")  # what `docker stop` sends first
    run.join(timeout=60)
    assert run.codes() == dict.fromkeys(HOSTS, 143)
    assert rank_lines(run.output, "received SIGTERM") == set(range(6))
    assert "stopped by SIGTERM" in run.failure("algo-1")
    print(f"stop to exit: {time.monotonic() - started:.1f} s")


def test_sigterm_on_one_worker_stops_the_whole_job(start_job, docker_client):
    run = start_job(hyperparameters={"rounds": "100", "sleep": "5"})
    run.capture.wait_for(lambda text: len(rank_lines(text, "round 1:")) == 6, timeout=60)
    docker_client.api.kill(run.job.container_ids["algo-2"], signal="SIGTERM")
    run.join(timeout=60)
    assert run.codes() == dict.fromkeys(HOSTS, 143)
    assert rank_lines(run.output, "received SIGTERM") == set(range(6))
    assert "SIGTERM received on host algo-2" in run.failure("algo-3")


def test_host_that_never_starts_is_named(run_job):
    run = run_job(absent_hosts=frozenset({"algo-3"}), settings={"startup_timeout": "5"})
    codes = run.codes()
    assert codes == {"algo-1": 69, "algo-2": 69, "algo-3": None}
    assert "algo-3 never answered within 5 s (ringleader_startup_timeout)" in run.failure("algo-1")
    assert "algo-3" in run.failure("algo-2")


def test_workers_exit_nonzero_soon_after_the_leader_dies(start_job, docker_client):
    run = start_job(hyperparameters={"rounds": "100", "sleep": "5"})
    run.capture.wait_for(lambda text: len(rank_lines(text, "round 1:")) == 6, timeout=60)
    killed = time.monotonic()
    docker_client.api.kill(run.job.container_ids["algo-1"], signal="SIGKILL")
    run.join(timeout=60)
    seconds = time.monotonic() - killed
    codes = run.codes()
    assert codes["algo-1"] == 137
    assert codes["algo-2"] == 75 and codes["algo-3"] == 75
    assert run.failure("algo-2").startswith("Host algo-1 (the leader): ")
    assert seconds < 15, f"workers took {seconds:.1f} s to give up"


def test_hosts_named_like_sdk_local_mode(run_job):
    run = run_job(random_suffix=True, hosts=2)
    assert set(run.codes().values()) == {0}
    hosts = [host.name for host in run.result.hosts]
    assert all(host.startswith(f"algo-{index + 1}-") for index, host in enumerate(hosts))


def test_missing_interface_falls_back_with_a_warning(run_job):
    overrides = {}
    run = run_job(
        hosts=2,
        config_overrides=overrides,
        env_overrides={
            host: {
                "SM_HOSTS": '["algo-1","algo-2"]',
                "SM_CURRENT_HOST": host,
                "SM_NETWORK_INTERFACE_NAME": "ethwe",
            }
            for host in ["algo-1", "algo-2"]
        },
    )
    assert set(run.codes().values()) == {0}
    assert "interface 'ethwe' does not exist here; using 'eth0'" in run.output


def test_a_job_without_distribution_runs_the_script_directly(run_job):
    """Only "no distribution" means one process without mpirun (one host of an mpi job runs
    mpirun: tests/container/test_one_host.py)."""
    run = run_job(
        hosts=1,
        processes_per_host=1,
        distribution="none",
        hyperparameters={"rounds": "1", "fail-rank": "0", "fail-code": "7"},
    )
    assert run.codes() == {"algo-1": 7}
    assert run.failure("algo-1").startswith("Rank 0 on host algo-1 exited with code 7.")
    assert "mpirun" not in run.output.split("launching:")[1].splitlines()[0]
