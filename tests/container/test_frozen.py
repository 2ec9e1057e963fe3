"""Silent hosts whose kernels still answer, on real containers (3 hosts x 2 ranks).

A worker frozen (every process stopped with SIGSTOP, as `docker pause` would stop them, its
kernel still acknowledging TCP) is named on every other host, with the host-loss code, within
the failure model's bound (docs/failure-model.md, "Bounds"); run again, it exits with the
verdict the leader had sent it. Hosts that are all starved at once (busy processes on every
host, then every process of the cluster stopped for longer than three timeouts) blame nobody:
each observer discounts the time its own timers ran late.
"""

import contextlib
import os
import re
import signal
import threading
import time
from collections.abc import Callable

import docker
import pytest

from tests.container.conftest import JobRun, rank_lines

# Alone: it stops hosts' processes and starves them on purpose; other jobs' CPU on the same 2
# cores would be part of the fault it measures.
pytestmark = [pytest.mark.container, pytest.mark.alone]

HOSTS = ["algo-1", "algo-2", "algo-3"]
LEADER_TIMEOUT = 4.0  # ringleader_leader_timeout for the frozen-worker jobs
# docs/failure-model.md, "Bounds": a frozen host is lost after 3 x ringleader_leader_timeout of
# silence; every other host has ended at most 5 s after that.
FROZEN_BOUND = 3 * LEADER_TIMEOUT + 5.0
ROOM = 60.0  # for what has no documented bound (start-up, a container's own end)
FROZEN_LINE = re.compile(
    r"Host algo-3 \(ranks 4, 5\): no pulse for (\d+) s; its kernel still answers: frozen or "
    r"starved \(3 x ringleader_leader_timeout\)(; this host itself ran late for \d+ s of it)?\. "
    r"Every other rank was stopped\."
)
PYTHON = "/opt/ringleader/venv/bin/python"
LOSS = re.compile(r"lost worker \S+|\(the leader\): ")  # the leader's log line, a worker's verdict


def first_line(run: JobRun, host: str) -> str:
    return run.failure(host).splitlines()[0]


def mpi_job(start_job: Callable[..., JobRun]) -> JobRun:
    run = start_job(
        hyperparameters={"rounds": "100", "sleep": "2"},
        settings={"startup_timeout": "60", "leader_timeout": f"{LEADER_TIMEOUT:g}"},
    )
    run.capture.wait_for(lambda text: len(rank_lines(text, "round 1:")) == 6, timeout=90)
    return run


def torch_job(start_job: Callable[..., JobRun], image: str) -> JobRun:
    run = start_job(
        image=image,
        distribution="torch_distributed",
        entry_point="ddp_train.py",
        hyperparameters={"steps": "100000", "step-sleep": "0.1", "log-interval": "1000000"},
        settings={"startup_timeout": "60", "leader_timeout": f"{LEADER_TIMEOUT:g}"},
    )
    run.capture.wait_for(lambda text: len(rank_lines(text, "env rank=")) == 6, timeout=120)
    return run


@pytest.fixture(params=["mpi", "torch_distributed"])
def long_job(
    request: pytest.FixtureRequest, start_job: Callable[..., JobRun]
) -> Callable[[], JobRun]:
    if request.param == "mpi":
        return lambda: mpi_job(start_job)
    image = request.getfixturevalue("horovod_image")  # PyTorch is in ringleader:horovod
    return lambda: torch_job(start_job, image)


def wait_for_exits(client: docker.DockerClient, run: JobRun, hosts: list[str]) -> None:
    """Until each host's container has exited (bounded)."""
    waiters = [
        threading.Thread(
            target=client.api.wait, args=(run.container_id(host),), kwargs={"timeout": ROOM}
        )
        for host in hosts
    ]
    for waiter in waiters:
        waiter.start()
    for waiter in waiters:
        waiter.join(ROOM + 5)


def host_pids(client: docker.DockerClient, container_id: str) -> set[int]:
    """Every process of the container, as the host numbers them."""
    listing = client.api.top(container_id)
    column = listing["Titles"].index("PID")
    return {int(row[column]) for row in listing["Processes"]}


def signal_each(pids: set[int], signum: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            os.kill(pid, signum)


def stop_every_process(client: docker.DockerClient, container_id: str) -> set[int]:
    """SIGSTOP every process of the container (until a listing shows none that is not stopped
    yet): as `docker pause` stops them, without the cgroup freezer, which runc gives up on
    when a container is this busy ("OCI runtime pause failed: unable to freeze", seen in CI
    with two busy loops in each container). The PIDs stopped."""
    stopped: set[int] = set()
    deadline = time.monotonic() + ROOM
    while pids := host_pids(client, container_id) - stopped:
        assert time.monotonic() < deadline, f"processes still starting in {container_id}"
        signal_each(pids, signal.SIGSTOP)
        stopped |= pids
    return stopped


def test_a_frozen_worker_is_named_on_every_other_host_within_the_bound(
    long_job: Callable[[], JobRun], docker_client: docker.DockerClient
) -> None:
    run = long_job()
    paused_at = time.time()
    # Not `docker pause`: runc's freezer gives up on a busy container (seen in a full run:
    # "OCI runtime pause failed: unable to freeze" with the DDP job's ranks stepping).
    frozen = stop_every_process(docker_client, run.container_id("algo-3"))
    try:
        wait_for_exits(docker_client, run, ["algo-1", "algo-2"])
    finally:
        signal_each(frozen, signal.SIGCONT)  # it runs again, and ends with what it finds
    run.join(timeout=ROOM)
    assert run.result is not None
    ended = {host.name: host.finished_at - paused_at for host in run.result.hosts}
    for host in ("algo-1", "algo-2"):
        assert ended[host] <= FROZEN_BOUND, (host, ended, run.output)
    assert run.codes() == dict.fromkeys(HOSTS, 75), run.output
    verdict = run.failure("algo-1")
    line = first_line(run, "algo-1")
    silence = FROZEN_LINE.fullmatch(line)
    assert silence is not None, verdict
    assert 3 * LEADER_TIMEOUT <= int(silence[1]) <= FROZEN_BOUND, line
    assert "SIGTERM" not in verdict  # no rank that ringleader or mpirun stopped is the cause
    assert run.failure("algo-2") == verdict
    # Run again, the frozen host found the verdict the leader had sent before it went.
    assert run.failure("algo-3") == verdict


def test_hosts_all_starved_at_once_blame_nobody(
    start_job: Callable[..., JobRun], docker_client: docker.DockerClient
) -> None:
    """Busy processes on every host (more than the machine has cores), then every host
    stalled together for longer than three timeouts: each host's pulses stop, and so do its
    own timers; nobody is lost and the job succeeds."""
    timeout = 3.0
    stall = 3 * timeout + 3.0
    run = start_job(
        hyperparameters={"rounds": "12", "sleep": "1"},
        settings={"startup_timeout": "60", "leader_timeout": f"{timeout:g}"},
    )
    run.capture.wait_for(lambda text: len(rank_lines(text, "round 1:")) == 6, timeout=90)
    api = docker_client.api
    for host in HOSTS:
        for _ in range(2):
            busy = api.exec_create(run.container_id(host), [PYTHON, "-c", "while True: pass"])
            api.exec_start(busy["Id"], detach=True)
    run.capture.wait_for(lambda text: len(rank_lines(text, "round 3:")) == 6, timeout=ROOM)
    stopped = {host: stop_every_process(docker_client, run.container_id(host)) for host in HOSTS}
    try:
        time.sleep(stall)  # the fault itself: the whole cluster does not run for this long
    finally:
        for pids in stopped.values():
            signal_each(pids, signal.SIGCONT)
    run.join(timeout=ROOM)
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    assert not LOSS.search(run.output), run.output
    assert len(rank_lines(run.output, "round 12:")) == 6
