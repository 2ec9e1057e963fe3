"""Issue 26 on real containers: a process inside a worker cannot stop the job, idle
connections to the control port cost the leader little and change nothing, a second
`ringleader cluster run` on the same hosts leaves the first alone, and the image holds no ssh
key while its mpi jobs run."""

import socket
import time
from typing import Any

import docker
import pytest

from tests.container.conftest import IMAGE
from tests.container.test_cluster import cluster_of, wait_for_line

pytestmark = pytest.mark.container

HOSTS = ["algo-1", "algo-2", "algo-3"]
CONTROL_PORT = 29100
IDLE_CONNECTIONS = 300

# Run inside algo-2 by the image's Python: the attack of the issue (a hello as algo-2, then a
# stop), then the same with everything a root process in that container can find (the job's
# name and secret, from PID 1's environment). Each answer of the leader is printed.
ROGUE = r"""
import socket
from ringleader.wire import auth
from ringleader.wire.messages import CONTROL_LINK, Join, Sigterm
from ringleader.wire.protocol import Channel

def attempt(label, send):
    channel = Channel(socket.create_connection(("algo-1", 29100), timeout=10))
    greeting = channel.receive_message(timeout=10)
    send(channel, greeting)
    try:
        print(label, channel.receive_frame(timeout=10).decode(), flush=True)
    except Exception as error:
        print(label, "closed:", type(error).__name__, flush=True)
    channel.close()

def as_found(channel, greeting):
    channel.send_frame(b'{"type":"hello","host":"algo-2"}')
    channel.send_frame(b'{"type":"sigterm","host":"algo-2"}')

attempt("as-found:", as_found)
environ = dict(
    item.split("=", 1) for item in open("/proc/1/environ").read().split("\0") if "=" in item
)
secret, job = bytes.fromhex(environ["RINGLEADER_JOB_SECRET"]), environ["TRAINING_JOB_NAME"]

def with_secret(channel, greeting):
    nonce = auth.new_nonce()
    proof = auth.join_proof(secret, job, "algo-2", CONTROL_LINK, greeting.nonce, nonce)
    channel.send(Join("algo-2", job, CONTROL_LINK, nonce, proof))
    channel.send(Sigterm("algo-2"))

attempt("with-secret:", with_secret)
"""

# The leader's entry point (PID 1's child that runs ringleader's supervision): its resident
# memory in KiB.
LEADER_RSS = r"""
import os
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{pid}/stat").read()
        status = open(f"/proc/{pid}/status").read()
    except OSError:
        continue
    if stat.rsplit(")", 1)[1].split()[1] == "1" and "ringleader" in stat + open(
        f"/proc/{pid}/cmdline"
    ).read():
        print(next(l.split()[1] for l in status.splitlines() if l.startswith("VmRSS:")))
"""


def long_job(start_job: Any, rounds: int = 12) -> Any:
    run = start_job(
        hyperparameters={"rounds": str(rounds), "sleep": "1"}, settings={"startup_timeout": "60"}
    )
    run.capture.wait_for(lambda text: "round 1:" in text, timeout=90)
    return run


def exec_python(client: docker.DockerClient, container: str, code: str) -> str:
    python = "/opt/ringleader/venv/bin/python3"
    result = client.containers.get(container).exec_run([python, "-c", code])
    assert result.exit_code == 0, result.output.decode(errors="replace")
    return str(result.output.decode(errors="replace"))


def test_a_process_inside_a_worker_cannot_stop_the_job(start_job, docker_client) -> None:
    """Issue 26: it said hello as algo-2 and sent a stop; every host exited 75 within 1.2 s."""
    run = long_job(start_job)
    said = exec_python(docker_client, run.container_id("algo-2"), ROGUE)
    run.join(timeout=120)
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    assert "as-found:" in said and "expected a join, got 'hello'" in said, said
    assert "with-secret:" in said and "algo-2 joined already" in said, said
    assert "refused a connection from" in run.output


def leader_rss_kib(client: docker.DockerClient, container: str) -> int:
    return int(exec_python(client, container, LEADER_RSS).split()[0])


def test_idle_connections_to_the_control_port_change_nothing(start_job, docker_client) -> None:
    """300 connections that never join, during a job: the leader stays within bounds (at most
    64 wait for their join, 10 s each, and are refused then; the rest wait in the listen queue)
    and the job ends 0."""
    run = long_job(start_job, rounds=40)
    leader = docker_client.api.inspect_container(run.container_id("algo-1"))
    address = leader["NetworkSettings"]["Networks"][f"{run.job.job_id}-net"]["IPAddress"]
    before = leader_rss_kib(docker_client, run.container_id("algo-1"))
    idle = []
    try:
        for _ in range(IDLE_CONNECTIONS):
            idle.append(socket.create_connection((address, CONTROL_PORT), timeout=10))
        during = leader_rss_kib(docker_client, run.container_id("algo-1"))
        run.capture.wait_for(lambda text: "no join within" in text, timeout=90)
    finally:
        for sock in idle:
            sock.close()
    run.join(timeout=120)
    print(f"leader RSS: {before} KiB before, {during} KiB with {IDLE_CONNECTIONS} idle")
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    assert "refused a connection from" in run.output and "no join within" in run.output
    assert during - before < 16 * 1024, (before, during)  # 64 waiting, 16 KiB buffers


def test_the_image_holds_no_ssh_key_and_its_mpi_jobs_run(run_job, docker_client) -> None:
    """Every mpi job makes its own keys: the image has none to steal."""
    listing = docker_client.containers.run(
        IMAGE, ["ls", "-A", "/etc/ringleader/ssh"], entrypoint=[], remove=True
    ).decode()
    assert sorted(listing.split()) == ["ssh_config", "sshd_config"]
    run = run_job(hyperparameters={"rounds": "2"})
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output


WAITING_JOB = b"""\
import os, time
from mpi4py import MPI

comm = MPI.COMM_WORLD
print(f"rank {comm.Get_rank()} waiting", flush=True)
while not os.path.exists("/work/go"):
    time.sleep(0.1)
comm.Barrier()
print(f"rank {comm.Get_rank()} done", flush=True)
"""


def test_a_second_cluster_job_on_the_same_hosts_fails_fast_and_leaves_the_first_alone(
    docker_client,
) -> None:
    """Issue 26: the second leader could not bind and exited 70, its workers joined the first
    job's leader, which then died with 75."""
    with cluster_of(docker_client, IMAGE) as instances:
        instances.put_everywhere("/work/waiting_job.py", WAITING_JOB)
        run = ["cluster", "run", "--hostfile", "hosts"]
        first = instances.start([*run, "--output", "/work/out1", "--", "python", "waiting_job.py"])
        lines = wait_for_line(first, "rank 5 waiting", 120)
        job_id = next(line.split()[2].rstrip(":") for line in lines if "==> job " in line)
        started = time.monotonic()
        code, second = instances.ringleader([*run, "--output", "/work/out2", "--", "true"])
        took = time.monotonic() - started
        assert code == 78, second
        assert f"port {CONTROL_PORT} is already in use" in second, second
        assert f"the leader of the job {job_id!r} is running there" in second, second
        assert f"the leader of another job, {job_id!r}, answers there" in second, second
        # it does not wait for its workers' visits (the startup timeout): they learn it at once
        assert f"the workers learn from the leader of {job_id!r}" in second, second
        print(f"the second job failed in {took:.1f} s")
        for name in instances.nodes:
            assert instances.sh(name, "touch /work/go")[0] == 0
        output, _ = first.communicate(timeout=120)
        assert first.returncode == 0, "".join(lines) + output
        assert "rank 5 done" in output
