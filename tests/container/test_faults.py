"""The failure table on real containers (3 hosts x 2 ranks): hosts killed and partitioned,
leftover processes. Every host's exit code and the failure file's first line are checked."""

import time

import pytest

from tests.container.conftest import rank_lines

pytestmark = pytest.mark.container

HOSTS = ["algo-1", "algo-2", "algo-3"]
LEADER_TIMEOUT = 4  # ringleader_leader_timeout for these jobs: partitions are noticed fast
LONG_JOB = {"rounds": "100", "sleep": "5"}


def first_line(run, host: str) -> str:
    return run.failure(host).splitlines()[0]


def start_long_job(start_job, leader_timeout=LEADER_TIMEOUT):
    run = start_job(
        hyperparameters=LONG_JOB,
        settings={"startup_timeout": "60", "leader_timeout": str(leader_timeout)},
    )
    run.capture.wait_for(lambda text: len(rank_lines(text, "round 1:")) == 6, timeout=90)
    return run


def test_worker_killed_mid_job_is_named_on_every_surviving_host(start_job, docker_client):
    run = start_long_job(start_job)
    docker_client.api.kill(run.container_id("algo-3"), signal="SIGKILL")
    run.join(timeout=60)
    assert run.codes() == {"algo-1": 75, "algo-2": 75, "algo-3": 137}
    for host in ("algo-1", "algo-2"):
        assert first_line(run, host).startswith("Host algo-3 (ranks 4, 5): "), run.failure(host)
    assert "SIGTERM" not in run.failure("algo-1")


def test_worker_partitioned_every_host_exits_host_lost_within_the_bound(start_job, docker_client):
    """docs/failure-model.md, "Bounds": every host, the partitioned one included, ends within
    ringleader_leader_timeout plus 2 s of the partition."""
    timeout = 6
    run = start_long_job(start_job, leader_timeout=timeout)
    network = f"{run.job.job_id}-net"
    cut_at = time.time()
    docker_client.api.disconnect_container_from_network(run.container_id("algo-3"), network)
    run.join(timeout=60)
    assert run.result is not None
    ended = {host.name: round(host.finished_at - cut_at, 2) for host in run.result.hosts}
    assert max(ended.values()) <= timeout + 2, (ended, run.output)
    assert run.codes() == dict.fromkeys(HOSTS, 75)
    silent = f"no pulse for {timeout} s (ringleader_leader_timeout)"
    for host in ("algo-1", "algo-2"):
        assert first_line(run, host) == (
            f"Host algo-3 (ranks 4, 5): {silent}. Every other rank was stopped."
        )
    assert first_line(run, "algo-3") == (
        f"Host algo-1 (the leader): {silent}; noticed by algo-3, which stopped its ranks."
    )


def test_leader_partitioned_every_host_exits_host_lost(start_job, docker_client):
    run = start_long_job(start_job)
    network = f"{run.job.job_id}-net"
    docker_client.api.disconnect_container_from_network(run.container_id("algo-1"), network)
    run.join(timeout=60)
    assert run.codes() == dict.fromkeys(HOSTS, 75)
    assert first_line(run, "algo-1").startswith("Hosts lost: algo-")
    for host in ("algo-2", "algo-3"):
        assert first_line(run, host).startswith("Host algo-1 (the leader): no pulse for ")


def test_rank_leaving_a_background_child_does_not_hold_the_job(run_job):
    run = run_job(hyperparameters={"rounds": "2", "leave-child": "1"})
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    assert len(rank_lines(run.output, "left helper")) == 6
    assert len(rank_lines(run.output, "stopped what it left running: ")) == 6
