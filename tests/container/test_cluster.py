"""`ringleader cluster` on "instances": containers of the image on a private Docker network,
started with only their sshd (no SageMaker environment); the job is launched from inside the
first one, as a user would from the leader instance."""

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from ringleader.core.jobfile import parse_job_file
from tests.container.conftest import IMAGE
from tests.container.instances import Instances

pytestmark = pytest.mark.container

JOB = b"""\
import os, sys, time
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
total = comm.allreduce(rank)
print(f"rank {rank} of {size} on {os.uname().nodename}: sum {total}", flush=True)
mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
if mode == "env":
    print(f"rank {rank} sees PROBE_X={os.environ.get('PROBE_X')} "
          f"SECRET_Y={os.environ.get('SECRET_Y')}", flush=True)
if mode == "late-fail":
    time.sleep(4)
    mode = "fail"
if mode == "fail" and rank == int(os.environ.get("FAIL_RANK", "3")):
    print(f"rank {rank} gives up", file=sys.stderr, flush=True)
    sys.exit(3)
if mode == "sleep":
    print(f"rank {rank} sleeping", flush=True)
    time.sleep(600)
comm.Barrier()
"""

TORCH_JOB = b"""\
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
value = torch.tensor([float(dist.get_rank())])
dist.all_reduce(value)
print(f"rank {dist.get_rank()} of {dist.get_world_size()} local {os.environ['LOCAL_RANK']}: "
      f"sum {value.item():g}", flush=True)
dist.destroy_process_group()
"""

NO_JOB_PROCESS_WITHIN = 15.0  # the bound for "nothing left behind"


@contextlib.contextmanager
def cluster_of(
    client: docker.DockerClient, image: str, without_sshd: tuple[str, ...] = ()
) -> Iterator[Instances]:
    """3 instances with the test jobs in /work, removed afterwards whatever happened."""
    cluster = Instances(client, image, 3, without_sshd)
    try:
        cluster.put_everywhere("/work/job.py", JOB)
        cluster.put_everywhere("/work/torch_job.py", TORCH_JOB)
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture
def instances(docker_client: docker.DockerClient) -> Iterator[Instances]:
    with cluster_of(docker_client, IMAGE) as cluster:
        yield cluster


def wait_for_line(process: "subprocess.Popen[str]", text: str, timeout: float) -> list[str]:
    """Lines of `process` until one holds `text` (bounded by the test's own timeout)."""
    return wait_for_lines(process, [text], timeout)


def wait_for_lines(process: "subprocess.Popen[str]", texts: list[str], timeout: float) -> list[str]:
    """Lines of `process` until each of `texts` has been in one (each rank's output comes
    through its own pipes: one rank's line says nothing about another's)."""
    assert process.stdout is not None
    seen: list[str] = []
    missing = list(texts)
    deadline = time.monotonic() + timeout
    for line in process.stdout:
        seen.append(line)
        missing = [text for text in missing if text not in line]
        if not missing:
            return seen
        assert time.monotonic() < deadline, f"no {missing!r} within {timeout} s:\n{''.join(seen)}"
    raise AssertionError(f"output ended without {missing!r}:\n{''.join(seen)}")


def assert_every_mpi_rank_ran(output: str) -> None:
    """JOB's line from each of the 6 ranks, 2 per node in order, with the right allreduce."""
    for rank in range(6):
        assert f"rank {rank} of 6 on node{rank // 2 + 1}: sum 15" in output


def test_mpi_job_on_three_hosts(instances: Instances) -> None:
    code, output = instances.ringleader(
        ["cluster", "run", "--hostfile", "hosts", "--output", "/work/out", "--", "python", "job.py"]
    )
    assert code == 0, output
    assert "preflight" in output
    assert_every_mpi_rank_ran(output)
    for name in instances.nodes:
        assert instances.sh("node1", f"test -f /work/out/{name}/output/success")[0] == 0
    code, job = instances.sh("node1", "cat /work/out/node1/output/data/job.json")
    assert code == 0 and '"exit_code": 0' in job
    assert instances.sh("node1", "ls /work/out/node2/output/data/logs/node2")[1].split() == [
        "rank-2.log",
        "rank-3.log",
        "ringleader.log",  # the host's own lines and details (pulse statistics)
    ]
    code, kept = instances.sh("node1", "cat /work/out/node2/output/data/logs/node2/ringleader.log")
    assert code == 0 and "pulses from the leader: " in kept
    assert "pulses from" not in output  # a detail: not on the console
    # ringleader's own plumbing (ssh masters, its helpers) is gone before the sweep: a clean
    # job leaves nothing for it to end.
    assert "leftover" not in output, output
    assert instances.wait_until_clean(NO_JOB_PROCESS_WITHIN) == {}


def test_doctor_checks_every_host_of_the_hostfile_over_ssh(instances: Instances) -> None:
    """`ringleader doctor cluster`: every host's checks in one table; a setting no host meets
    fails on each of them with its numbers, exit 71."""
    code, output = instances.ringleader(
        ["doctor", "cluster", "--hostfile", "hosts", "--setting", "min_free_memory=100000g"]
    )
    assert code == 71, output
    lines = output.splitlines()
    assert lines[0].split() == ["host", "check", "status", "detail"], output
    for name in instances.nodes:
        memory = [line for line in lines if line.startswith(name) and "free memory" in line]
        assert len(memory) == 1 and " failed " in memory[0], output
        assert "at least 100000.0 GiB wanted (ringleader_min_free_memory)" in memory[0]
        assert any(
            line.startswith(name) and "/dev/shm" in line and " ok " in line for line in lines
        )


def test_the_dlami_posts_hostfile_with_eight_slots(instances: Instances) -> None:
    """The 256-GPU DLAMI post's hostfile: one `HOST slots=8` line per instance (here 2 of the
    8 slots used per host: no GPU, 2 cores)."""
    instances.put("node1", "/work/dlami-hosts", instances.hostfile(instances.nodes, 8).encode())
    code, output = instances.ringleader(
        [
            "cluster",
            "run",
            "--hostfile",
            "dlami-hosts",
            "--processes-per-host",
            "2",
            "--",
            "python",
            "job.py",
        ]
    )
    assert code == 0, output
    assert_every_mpi_rank_ran(output)
    assert instances.wait_until_clean(NO_JOB_PROCESS_WITHIN) == {}


def test_failing_rank_is_the_jobs_code_and_named(instances: Instances) -> None:
    """The DLAMI post's way of passing a variable (`env NAME=VALUE python script.py`) still
    gets mpi4py's abort on exit: without it rank 4 blocked in MPI_Finalize and the job hung."""
    code, output = instances.ringleader(
        [
            "cluster",
            "run",
            "-H",
            "node1:2,node2:2,node3:2",
            "--output",
            "/work/out",
            "--",
            "env",
            "FAIL_RANK=4",
            "python",
            "job.py",
            "fail",
        ]
    )
    assert code == 3, output
    for name in instances.nodes:
        failure = instances.sh("node1", f"cat /work/out/{name}/output/failure")[1]
        assert failure.startswith("Rank 4 on host node3 exited with code 3."), (name, failure)
    assert "rank 4 gives up" in output
    assert instances.wait_until_clean(NO_JOB_PROCESS_WITHIN) == {}


def test_torch_distributed_job(docker_client: docker.DockerClient, horovod_image: str) -> None:
    with cluster_of(docker_client, horovod_image) as cluster:
        code, output = cluster.ringleader(
            [
                "cluster",
                "run",
                "--hostfile",
                "hosts",
                "--distribution",
                "torch_distributed",
                "--",
                "python",
                "torch_job.py",
            ]
        )
        assert code == 0, output
        for rank in range(6):
            assert f"rank {rank} of 6 local {rank % 2}: sum 15" in output
        assert cluster.wait_until_clean(NO_JOB_PROCESS_WITHIN) == {}


def test_unreachable_host_is_named_and_nothing_launched(docker_client: docker.DockerClient) -> None:
    with cluster_of(docker_client, IMAGE, without_sshd=("node3",)) as instances:
        check_unreachable(instances)


def check_unreachable(instances: Instances) -> None:
    code, output = instances.ringleader(
        ["cluster", "run", "--hostfile", "hosts", "--", "python", "job.py"]
    )
    assert code == 69, output
    assert "error: node3 (hosts:4): unreachable over ssh" in output
    assert "nothing was launched" in output
    for name in ("node1", "node2"):
        assert instances.sh(name, "ls -d /tmp/ringleader-jobs*")[0] != 0


def test_host_without_ringleader_is_named_and_bootstrap_fixes_it(instances: Instances) -> None:
    assert instances.sh("node2", "pip uninstall --yes --quiet ringleader")[0] == 0
    code, output = instances.ringleader(
        ["cluster", "run", "--hostfile", "hosts", "--", "python", "job.py"]
    )
    assert code == 78, output
    assert "error: node2 (hosts:3): ringleader is not installed" in output
    code, output = instances.ringleader(
        ["cluster", "run", "--hostfile", "hosts", "--bootstrap", "--", "python", "job.py"]
    )
    assert code == 0, output
    assert "bootstrap node2: installing ringleader-" in output
    assert "rank 3 of 6 on node2: sum 15" in output
    assert instances.sh("node2", "test -x /root/.ringleader/venv/bin/python")[0] == 0


# Another CPython for some hosts: this machine's pyenv build of 3.13, copied in at the same path
# (it is not relocatable). The image's own is 3.11.
OTHER_PYTHONS = sorted(Path("/root/.pyenv/versions").glob("3.13.*/bin/python3"))
HOST_PYTHON = "/opt/hostpython/python3"  # the --python PATH, on node1 the image's own Python


def give_other_python(instances: Instances, name: str, python: Path) -> None:
    """`python`'s installation into the node, HOST_PYTHON running it, and pip limited to an
    (empty) local wheelhouse: the host's own package index, as on an offline cluster."""
    root = python.parent.parent
    tar = subprocess.Popen(
        ["tar", "-C", "/", "--exclude", "test", "-cf", "-", str(root.relative_to("/"))],
        stdout=subprocess.PIPE,
    )
    container = instances.nodes[name].name
    untar = subprocess.run(
        ["docker", "exec", "-i", container, "tar", "-C", "/", "-xf", "-"],
        stdin=tar.stdout,
        capture_output=True,
        timeout=300,
    )
    assert tar.wait(timeout=60) == 0 and untar.returncode == 0, untar.stderr
    instances.put(name, HOST_PYTHON, f'#!/bin/sh\nexec {python} "$@"\n'.encode())
    instances.put(name, "/etc/pip.conf", b"[global]\nno-index = true\nfind-links = /wheelhouse\n")
    assert instances.sh(name, f"chmod +x {HOST_PYTHON} && mkdir -p /wheelhouse")[0] == 0


def test_hosts_on_another_python_named_with_python_option(
    instances: Instances, tmp_path: Path
) -> None:
    """node1 (the launcher) on the image's 3.11, node2 and node3 on another minor version, all
    named by one --python PATH. --bootstrap ships what fits them: with the lean dependencies
    that is every wheel (pure ones, psutil's stable ABI), so their own package index (an empty
    wheelhouse here, as on an offline cluster) is never asked, and the job runs. (What comes
    from the host's index, and the error when it cannot, are unit-tested: tests/unit/
    test_cluster.py.)

    Slow: the other Python is copied into two stand-in machines, and the job runs over ssh.
    """
    if not OTHER_PYTHONS:
        message = (
            "needs pyenv's CPython 3.13 under /root/.pyenv/versions (this machine's kind has it)"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    python = OTHER_PYTHONS[-1]
    version = python.parent.parent.name
    instances.put("node1", HOST_PYTHON, b'#!/bin/sh\nexec /opt/ringleader/venv/bin/python3 "$@"\n')
    assert instances.sh("node1", f"chmod +x {HOST_PYTHON}")[0] == 0
    for name in ("node2", "node3"):
        give_other_python(instances, name, python)
    run = ["cluster", "run", "--hostfile", "hosts", "--python", HOST_PYTHON, "--bootstrap"]
    code, output = instances.ringleader([*run, "--", "python", "job.py"])
    assert code == 0, output
    line = next((x for x in output.splitlines() if "bootstrap node2: installing" in x), output)
    assert "ringleader-" in line and "psutil-" in line  # psutil: the stable ABI fits
    assert "package index" not in output, output
    assert_every_mpi_rank_ran(output)
    preflight = output.split("==> preflight", 1)[1].split("\n==>", 1)[0]
    rows = dict(re.findall(r"^\s+(node\d)\s+(\S+)\s", preflight, re.MULTILINE))
    assert rows.get("node1", "").startswith("3.11."), output
    assert rows.get("node2") == rows.get("node3") == version, output
    assert instances.wait_until_clean(NO_JOB_PROCESS_WITHIN) == {}


def test_kill_9_of_the_leaders_ringleader_leaves_nothing_running(instances: Instances) -> None:
    process = instances.start(
        ["cluster", "run", "--hostfile", "hosts", "--", "python", "job.py", "sleep"]
    )
    try:
        wait_for_line(process, "rank 5 sleeping", 120)
        assert instances.sh("node1", "pkill -9 -f '[r]ingleader cluster run'")[0] == 0
        left = instances.wait_until_clean(NO_JOB_PROCESS_WITHIN)
        assert left == {}, left
    finally:
        process.kill()
        process.wait()


def test_a_dropped_ssh_connection_to_a_member_ends_the_job_everywhere(
    instances: Instances,
) -> None:
    """The leader's ssh connection that runs node2's agent drops: node2's agent sees its input
    end and ends its whole process tree; the leader takes node2 for lost; nothing is left."""
    process = instances.start(
        ["cluster", "run", "--hostfile", "hosts", "--", "python", "job.py", "sleep"]
    )
    try:
        wait_for_line(process, "rank 5 sleeping", 120)
        drop = "pkill -9 -f '^ssh .* node2 -- .*ringleader[.]tools[.]cluster[.]agent'"
        assert instances.sh("node1", drop)[0] == 0
        output, _ = process.communicate(timeout=60)
        assert process.returncode == 75, output  # a host lost, on the command too
        left = instances.wait_until_clean(NO_JOB_PROCESS_WITHIN)
        assert left == {}, left
    finally:
        process.kill()
        process.wait()


def start_sleeping_job(instances: Instances, *options: str) -> "subprocess.Popen[str]":
    """`cluster run` of JOB's sleep mode with `options`, once every rank sleeps."""
    command = ["cluster", "run", "--hostfile", "hosts", "--output", "/work/out", *options]
    process = instances.start([*command, "--", "python", "job.py", "sleep"])
    wait_for_line(process, "rank 5 sleeping", 120)
    return process


def test_ctrl_c_stops_the_job_everywhere(instances: Instances) -> None:
    process = start_sleeping_job(instances, "--setting", "sigterm_grace=5")
    assert instances.sh("node1", "pkill -INT -f '[r]ingleader cluster run'")[0] == 0
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 143, output
    assert "Ctrl-C: stopping the job" in output
    assert "SIGTERM" in instances.sh("node1", "cat /work/out/node1/output/failure")[1]
    assert instances.wait_until_clean(NO_JOB_PROCESS_WITHIN) == {}


def test_ctrl_backslash_shows_every_ranks_stacks_and_a_hang_ends_the_job(
    instances: Instances,
) -> None:
    """Ctrl-\\ of `cluster run`: every rank's stacks, grouped, and the job goes on; then no
    rank makes progress for --hang-timeout: every host exits 124, the verdict says where."""
    process = start_sleeping_job(instances, "--hang-timeout", "20")
    assert instances.sh("node1", "pkill -QUIT -f '[r]ingleader cluster run'")[0] == 0
    wait_for_line(process, "6 ranks (0-5 on node1, node2, node3)", 30)
    output, _ = process.communicate(timeout=90)
    assert process.returncode == 124, output
    assert "Every rank (6) waits in the same place, in <module> (job.py:" in output
    failure = instances.sh("node1", "cat /work/out/node2/output/failure")[1]
    assert failure.startswith("Every rank (6) waits in the same place"), failure
    assert instances.wait_until_clean(NO_JOB_PROCESS_WITHIN) == {}


def test_exec_with_one_host_failing(instances: Instances) -> None:
    code, output = instances.ringleader(
        [
            "cluster",
            "exec",
            "--hostfile",
            "hosts",
            "--",
            "sh",
            "-c",
            'echo hi from $(hostname); test "$(hostname)" != node2',
        ]
    )
    assert code == 1, output
    for name in instances.nodes:
        assert f"[{name}] hi from {name}" in output
    rows = {
        line.split()[0]: line.split()[1] for line in output.splitlines() if line.startswith("node")
    }
    assert rows == {"node1": "0", "node2": "1", "node3": "0"}


def test_sync_a_thousand_files_resumes_after_an_interruption(instances: Instances) -> None:
    make = (
        "mkdir -p /work/data/sub && for i in $(seq 1 1000); do head -c 2048 /dev/urandom "
        "> /work/data/sub/f$i; done && head -c 300000000 /dev/urandom > /work/data/big.bin"
    )
    assert instances.sh("node1", make)[0] == 0
    sync = ["cluster", "sync", "--hostfile", "hosts", "/work/data", "/data"]
    # 300 MB at 20 MiB/s takes 14 s: the kill lands mid-transfer however fast the network is
    process = instances.start([*sync[:4], "--bwlimit", "20M", *sync[4:]])
    wait_for_line(process, "%", 120)
    instances.sh("node1", "pkill -9 -f '[r]ingleader cluster sync'; pkill -9 -x rsync")
    process.wait(timeout=30)
    checksum = "cd {} && find . -type f | sort | xargs md5sum | md5sum"
    _, expected = instances.sh("node1", checksum.format("/work/data"))
    _, interrupted = instances.sh("node2", checksum.format("/data") + " 2>/dev/null")
    assert interrupted != expected, "the interruption left nothing to resume"
    code, output = instances.ringleader(sync, timeout=300)
    assert code == 0, output
    for name in ("node2", "node3"):
        assert instances.sh(name, checksum.format("/data"))[1] == expected, name
    # a third run finds everything in place and sends no file at all
    code, output = instances.ringleader(sync, timeout=300)
    assert code == 0, output
    for name in ("node2", "node3"):
        transferred = re.findall(rf"^\[{name}\] .*\(xfr#(\d+),", output, re.MULTILINE)
        assert transferred and set(transferred) == {"0"}, output


# ------------------------------------------------------------------------------- detached jobs
def job_id_of(output: str) -> str:
    found = re.search(r"==> job (\S+) runs detached on ", output)
    assert found, output
    return found.group(1)


def test_detached_job_outlives_its_launcher_and_attach_sees_its_output_and_code(
    instances: Instances,
) -> None:
    process = instances.start(
        [
            "cluster",
            "run",
            "--hostfile",
            "hosts",
            "--detach",
            "--output",
            "/work/out",
            "--",
            "env",
            "FAIL_RANK=4",
            "python",
            "job.py",
            "late-fail",
        ]
    )
    try:
        seen = "".join(wait_for_line(process, "runs detached on", 120))
    finally:
        process.kill()  # the launching process is gone, whatever it was doing
        process.wait()
    instances.sh("node1", "pkill -9 -f '[r]ingleader cluster run'")
    job = job_id_of(seen)
    code, status = instances.ringleader(["cluster", "status", "--hostfile", "hosts", job])
    assert code == 0 and f"job {job} is running" in status, status
    code, output = instances.ringleader(["cluster", "attach", "--hostfile", "hosts", job])
    assert code == 3, output
    assert output.startswith(f"==> job {job}: 3 hosts x 2 (mpi)"), output
    assert "==> preflight" in output
    assert_every_mpi_rank_ran(output)
    assert "rank 4 gives up" in output
    assert f"==> job {job} ended: exit code 3\n" in output
    assert f"==> job {job} ended: exit code 3; results on node1 in /work/out/<host>/" in output
    failure = instances.sh("node1", "cat /work/out/node2/output/failure")[1]
    assert failure.startswith("Rank 4 on host node3 exited with code 3."), failure
    # attached again after the end: the same output, the same code, at once
    code, again = instances.ringleader(["cluster", "attach", "--hostfile", "hosts", job], 60)
    assert (code, again) == (3, output)
    code, table = instances.ringleader(["cluster", "status", "--hostfile", "hosts"])
    assert code == 0 and re.search(rf"^{job} +ended +3 ", table, re.MULTILINE), table
    assert instances.wait_until_clean(NO_JOB_PROCESS_WITHIN) == {}


def test_stop_of_a_detached_job_is_a_ctrl_c(instances: Instances) -> None:
    hosts = ["-H", "node1:2,node2:2,node3:2"]
    code, seen = instances.ringleader(
        [
            *("cluster", "run", *hosts, "--detach", "--output", "/work/out"),
            *("--setting", "sigterm_grace=5", "--", "python", "job.py", "sleep"),
        ]
    )
    assert code == 0, seen
    job = job_id_of(seen)
    attach = instances.start(["cluster", "attach", *hosts, job])
    try:
        wait_for_line(attach, "rank 5 sleeping", 120)
        code, stopped = instances.ringleader(["cluster", "stop", *hosts, job])
        assert code == 0 and f"job {job} ended: exit code 143;" in stopped, stopped
        output, _ = attach.communicate(timeout=60)
    finally:
        attach.kill()
        attach.wait()
    assert attach.returncode == 143, output
    assert "SIGTERM: stopping the job on every host" in output
    for name in instances.nodes:
        assert re.search(rf"^    {name} +exit 143 ", output, re.MULTILINE), output
    assert instances.wait_until_clean(NO_JOB_PROCESS_WITHIN) == {}


def test_attach_to_a_job_that_does_not_exist(instances: Instances) -> None:
    code, output = instances.ringleader(["cluster", "attach", "--hostfile", "hosts", "cluster-x"])
    assert code == 66, output
    assert "no job 'cluster-x' in /tmp/ringleader-jobs-0 on this leader" in output
    assert "ringleader-exit-code" not in output


def test_mpi_options_and_env_reach_every_rank(instances: Instances) -> None:
    code, output = instances.ringleader(
        [
            *("cluster", "run", "--hostfile", "hosts", "--mpi-options", "-x PROBE_X=from-mpi"),
            *("--env", "SECRET_Y=hush-42", "--", "python", "job.py", "env"),
        ]
    )
    assert code == 0, output
    for rank in range(6):
        assert f"rank {rank} sees PROBE_X=from-mpi SECRET_Y=hush-42" in output
    assert output.count("hush-42") == 6, output  # only where the job printed it
    # never in what the job writes to disk as its configuration
    for name in instances.nodes:
        assert instances.sh(name, "grep -rl hush-42 /tmp/ringleader-jobs-0/*/ml/input")[0] == 1
        # root's own job root (the tests' ssh user), closed to everyone else
        assert instances.sh(name, "stat -c %a:%u /tmp/ringleader-jobs-0") == (0, "700:0\n")


SPARE_JOB = b"""\
import os, sys, time
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
attempt = os.environ["RINGLEADER_ATTEMPT"]
total = comm.allreduce(rank)
print(f"rank {rank} of {size} on {os.uname().nodename} attempt {attempt}: sum {total}", flush=True)
if attempt == "0":
    print(f"rank {rank} sleeping", flush=True)
    time.sleep(600)
comm.Barrier()
"""


def test_a_lost_host_is_replaced_by_a_spare_and_the_job_completes(
    docker_client: docker.DockerClient,
) -> None:
    """4 instances, the last a spare (--spares 1): node2 dies mid-job (its container is
    killed); the job ends on node1 and node3 with 75, then starts again on node1, node3 and
    the spare node4 as attempt 1 of the same job and succeeds."""
    instances = Instances(docker_client, IMAGE, 4)
    try:
        instances.put_everywhere("/work/job.py", SPARE_JOB)
        command = ["cluster", "run", "--hostfile", "hosts", "--output", "/work/out"]
        options = ["--spares", "1", "--max-restarts", "1"]
        process = instances.start([*command, *options, "--", "python", "job.py"])
        try:
            every_rank = [f"rank {rank} sleeping" for rank in range(6)]
            seen = "".join(wait_for_lines(process, every_rank, 120))
            instances.nodes["node2"].kill()
            output, _ = process.communicate(timeout=180)
        finally:
            process.kill()
            process.wait()
        output = seen + output
        assert process.returncode == 0, output
        assert "3 hosts x 2 (mpi), 1 spare (node4)" in output
        assert (
            "==> node2 lost: restarting the job on node1 node4 node3 (spare node4 replaces "
            "node2), attempt 1 (restart 1 of 1)"
        ) in output
        for rank in range(6):
            assert f"rank {rank} of 6 on node{(1, 2, 3)[rank // 2]} attempt 0: sum 15" in output
        ran = re.findall(r"rank \d of 6 on (node\d) attempt 1: sum 15", output)
        assert sorted(ran) == ["node1", "node1", "node3", "node3", "node4", "node4"], output
        code, text = instances.sh("node1", "cat /work/out/node1/output/data/job.json")
        assert code == 0, text
        summary = parse_job_file(text)
        assert summary.exit_code == 0
        first, second = summary.attempts
        assert (first.attempt, first.lost, first.exit_code) == (0, ("node2",), 75)
        assert first.cause is not None and first.cause.endswith("(node2 replaced by spare node4)")
        assert (second.attempt, second.exit_code, second.lost) == (1, 0, ())
        assert sorted(second.hosts) == ["node1", "node3", "node4"]
        # the first run's results kept beside the final run's
        for name in ("node1", "node3"):
            assert instances.sh("node1", f"test -f /work/out/run-0/{name}/output/failure")[0] == 0
        for name in ("node1", "node3", "node4"):
            assert instances.sh("node1", f"test -f /work/out/{name}/output/success")[0] == 0
        assert instances.wait_until_clean(NO_JOB_PROCESS_WITHIN) == {}
    finally:
        instances.remove()
