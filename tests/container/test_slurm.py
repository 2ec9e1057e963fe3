"""`ringleader slurm` in a real Slurm cluster of containers (slurmctld, 3 slurmd, munge):
success with mpi and torch_distributed, a failing rank's code everywhere, scancel and a lost
node. Jobs are submitted from /shared, the project's examples copied there."""

import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# One pytest-xdist worker owns the Slurm cluster: its containers have fixed names.
ONE_WORKER = pytest.mark.xdist_group("slurm")
pytestmark = [pytest.mark.container, ONE_WORKER]

ROOT = Path(__file__).resolve().parents[2]
NODES = ("ringleader-slurm-node1", "ringleader-slurm-node2", "ringleader-slurm-node3")
LEADER = NODES[0]
JOB_END = 120.0  # seconds a test job may take on 2 busy cores
NOTHING_LEFT_WITHIN = 15.0
# What a job leaves if it leaves anything: not the containers' own init, whose name matches too.
JOB_PROCESSES = r"ringleader slurm|ringleader\.tools|-m ringleader|examples/|hang_jobs/|orted"

SECRET = """RINGLEADER_JOB_SECRET=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
export RINGLEADER_JOB_SECRET
"""


RINGLEADER = "srun --ntasks-per-node=1 ringleader slurm --processes-per-host 2"
LONG_JOB = "python examples/mpi_allreduce.py --rounds 100 --sleep 2"  # runs until stopped


def batch_script(srun: str, name: str, directives: str = "") -> str:
    """A batch script of 3 nodes that runs `srun` from /shared and says srun's own code."""
    return (
        f"#!/bin/bash\n#SBATCH --job-name={name}\n#SBATCH --nodes=3\n{directives}"
        f"#SBATCH --ntasks-per-node=1\n#SBATCH --output=/shared/%x-%j.out\n"
        f"cd /shared\n{SECRET}{srun}\ncode=$?\necho srun-exit=$code\nexit $code\n"
    )


def submit_batch(cluster: Any, name: str, srun: str, directives: str = "") -> int:
    (cluster.shared / f"{name}.sbatch").write_text(batch_script(srun, name, directives))
    return submit(cluster, [f"{name}.sbatch"])


def failure_of(cluster: Any, job: int, node: str) -> str:
    return (node_dir(cluster, job, node) / "output" / "failure").read_text()


@pytest.fixture(scope="module")
def cluster(slurm_cluster: Any) -> Iterator[Any]:
    shutil.copytree(ROOT / "examples", slurm_cluster.shared / "examples", dirs_exist_ok=True)
    hang_jobs = ROOT / "tests" / "container" / "hang_jobs"
    shutil.copytree(
        hang_jobs, slurm_cluster.shared / "tests/container/hang_jobs", dirs_exist_ok=True
    )
    yield slurm_cluster


def submit(cluster: Any, argv: list[str]) -> int:
    done = cluster.exec(
        "ringleader-slurm-head", ["sbatch", "--parsable", "--chdir=/shared", *argv], 30
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return int(done.stdout.strip().split(";")[0])


def output_of(cluster: Any, name: str, job: int) -> str:
    path = cluster.shared / f"{name}-{job}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def node_dir(cluster: Any, job: int, node: str) -> Path:
    return cluster.shared / "ringleader-output" / str(job) / node


def node_codes(output: str) -> dict[str, int]:
    """Each node's last word: `[ringleader NODE] HH:MM:SS.mmm job succeeded|failed: exit code N`."""
    found = re.findall(
        r"\[ringleader (\S+)\] \S+ job (?:succeeded|failed): exit code (\d+)", output
    )
    return {node: int(code) for node, code in found}


def wait_for_output(cluster: Any, name: str, job: int, text: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        output = output_of(cluster, name, job)
        if text in output:
            return output
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not in job {job}'s output within {timeout} s:\n{output}")


def assert_nothing_left(cluster: Any, nodes: tuple[str, ...]) -> None:
    deadline = time.monotonic() + NOTHING_LEFT_WITHIN
    left: dict[str, list[str]] = {}
    while time.monotonic() < deadline:
        left = {node: cluster.processes(node, JOB_PROCESSES) for node in nodes}
        if not any(left.values()):
            return
        time.sleep(0.5)
    raise AssertionError(f"still running {NOTHING_LEFT_WITHIN} s after the job ended: {left}")


def test_the_allreduce_example_runs_on_3_nodes_x_2_ranks(cluster: Any) -> None:
    job = submit(cluster, ["examples/slurm/allreduce.sbatch", "--rounds", "3"])
    state = cluster.wait(job, JOB_END)
    output = output_of(cluster, "allreduce", job)
    assert (state["JobState"], state["ExitCode"]) == ("COMPLETED", "0:0"), output
    assert node_codes(output) == {node: 0 for node in NODES}, output
    for rank in range(6):
        assert f"rank {rank}] round 3: allreduce_sum=15 ok" in output, output
    summary = (node_dir(cluster, job, LEADER) / "output" / "data" / "job.json").read_text()
    assert '"exit_code": 0' in summary
    for node in NODES:
        assert not (node_dir(cluster, job, node) / "output" / "failure").exists()
    assert_nothing_left(cluster, NODES)


def test_the_ddp_example_runs_with_torch_distributed(cluster: Any) -> None:
    job = submit(cluster, ["examples/slurm/ddp.sbatch", "--steps", "20", "--log-interval", "10"])
    state = cluster.wait(job, JOB_END)
    output = output_of(cluster, "ddp", job)
    assert (state["JobState"], state["ExitCode"]) == ("COMPLETED", "0:0"), output
    assert node_codes(output) == {node: 0 for node in NODES}, output
    assert len(re.findall(r"env rank=\d+ .* ok", output)) == 6, output
    assert (node_dir(cluster, job, LEADER) / "model" / "model.pt").is_file()
    metrics = node_dir(cluster, job, LEADER) / "output" / "data" / "metrics.jsonl"
    assert '"loss"' in metrics.read_text()


def test_a_failing_rank_gives_its_code_to_srun_every_node_and_the_job(cluster: Any) -> None:
    job = submit_batch(
        cluster,
        "fail",
        f"{RINGLEADER} -- python examples/mpi_allreduce.py --rounds 3 --fail-rank 4 --fail-code 3",
    )
    state = cluster.wait(job, JOB_END)
    output = output_of(cluster, "fail", job)
    assert state["ExitCode"] == "3:0", output
    assert "srun-exit=3" in output
    assert node_codes(output) == {node: 3 for node in NODES}, output
    for node in NODES:
        failure = failure_of(cluster, job, node)
        assert "Rank 4" in failure and "ringleader-slurm-node3" in failure, failure
    assert_nothing_left(cluster, NODES)


def test_a_failure_the_policy_refuses_is_do_not_retry_and_slurm_does_not_requeue(
    cluster: Any,
) -> None:
    """examples/slurm/requeue.sbatch with --restart-on codes:137,139 and rank 4 exiting 1:
    every node ends with 79 (do not retry) naming rank 4's own code, ringleader slurm marks
    the job not requeueable: the script does not requeue it, and `scontrol requeue` from
    outside is refused."""
    sbatch = ["sbatch", "--parsable", "--chdir=/shared", "examples/slurm/requeue.sbatch"]
    arguments = ["--rounds", "3", "--fail-rank", "4", "--fail-code", "1"]
    # the submitter's environment (sbatch's --export would split the value at its comma)
    done = cluster.exec(cluster.head, ["env", "RESTART_ON=codes:137,139", *sbatch, *arguments], 30)
    assert done.returncode == 0, done.stdout + done.stderr
    job = int(done.stdout.strip().split(";")[0])
    state = cluster.wait(job, JOB_END)
    output = output_of(cluster, "requeue", job)
    assert (state["JobState"], state["ExitCode"]) == ("FAILED", "79:0"), output
    assert (state["Requeue"], state["Restarts"]) == ("0", "0"), state
    assert "srun-exit=79 restarts=0" in output, output
    assert node_codes(output) == {node: 79 for node in NODES}, output
    assert "marked not requeueable (scontrol update" in output, output
    requeue = cluster.exec(cluster.head, ["scontrol", "requeue", str(job)], 30)
    assert requeue.returncode != 0, requeue.stdout
    assert "Requested operation is presently disabled" in requeue.stderr, requeue.stderr
    for node in NODES:
        lines = failure_of(cluster, job, node).splitlines()
        assert lines[0].startswith("Rank 4 on host ringleader-slurm-node3 exited with code 1")
        assert lines[1] == (
            "Not retried: exit code 1 is not in ringleader_restart_on's codes:137,139; exit "
            "code 79 (do not retry) instead of 1."
        )
    assert_nothing_left(cluster, NODES)


def test_doctor_checks_every_node_of_the_allocation(cluster: Any) -> None:
    job = submit_batch(cluster, "doctor", "ringleader doctor slurm --setting min_shm=100000g")
    state = cluster.wait(job, JOB_END)
    output = output_of(cluster, "doctor", job)
    assert state["ExitCode"] == "71:0" and "srun-exit=71" in output, output
    for node in NODES:
        (shm,) = [
            line for line in output.splitlines() if line.startswith(node) and "/dev/shm" in line
        ]
        assert " failed " in shm and shm.endswith("(ringleader_min_shm)"), output


def test_scancel_ends_every_node_with_143_and_leaves_nothing(cluster: Any) -> None:
    job = submit_batch(cluster, "cancel", f"{RINGLEADER} -- {LONG_JOB}")
    wait_for_output(cluster, "cancel", job, "rank 5] round 1:", JOB_END)
    cancelled = time.monotonic()
    cluster.exec(cluster.head, ["scancel", str(job)], 30)
    state = cluster.wait(job, JOB_END)
    assert state["JobState"] == "CANCELLED"
    assert_nothing_left(cluster, NODES)
    ended = time.monotonic() - cancelled
    for node in NODES:
        failure = failure_of(cluster, job, node)
        assert "SIGTERM" in failure, failure
    codes = node_codes(output_of(cluster, "cancel", job))
    assert set(codes.values()) <= {143}, codes
    assert ended < 30, f"the nodes took {ended:.1f} s after scancel"


def test_a_hung_rank_is_named_and_every_node_ends_with_124(cluster: Any) -> None:
    job = submit_batch(
        cluster,
        "hang",
        f"{RINGLEADER} --hang-timeout 20 -- python tests/container/hang_jobs/mpi_stuck.py",
    )
    state = cluster.wait(job, JOB_END)
    output = output_of(cluster, "hang", job)
    assert state["ExitCode"] == "124:0", output
    assert node_codes(output) == {node: 124 for node in NODES}, output
    failure = failure_of(cluster, job, LEADER)
    assert failure.startswith("Rank 4 on host ringleader-slurm-node3 is in load_batch_forever")
    assert_nothing_left(cluster, NODES)


def test_the_time_limit_is_named_in_every_nodes_failure_file(cluster: Any) -> None:
    """Slow: Slurm's shortest time limit is a minute, and the job ends when slurmctld enforces
    it (69 to 92 s in full runs)."""
    job = submit_batch(cluster, "limit", f"{RINGLEADER} -- {LONG_JOB}", "#SBATCH --time=1\n")
    state = cluster.wait(job, 60 + JOB_END)  # Slurm's shortest limit is a minute
    output = output_of(cluster, "limit", job)
    assert state["JobState"] == "TIMEOUT", output
    for node in NODES:
        failure = failure_of(cluster, job, node)
        assert failure.startswith("Slurm's time limit was reached"), failure + output
        assert "SIGTERM" in failure.splitlines()[1], failure + output
    assert set(node_codes(output).values()) <= {143}, output
    assert_nothing_left(cluster, NODES)


def test_bad_launches_are_refused_with_the_configuration_code(cluster: Any) -> None:
    outside = cluster.exec(NODES[0], ["ringleader", "slurm", "--", "true"], 60)
    assert outside.returncode == 78, outside.stdout + outside.stderr
    assert "SLURM_JOB_ID: missing: not inside a Slurm job step" in outside.stderr
    srun = (
        "srun --ntasks=6 --ntasks-per-node=2 ringleader slurm -- true\n"
        "echo two-per-node=$?\n"
        "srun --ntasks-per-node=1 ringleader slurm --processes-per-host 3 -- true"
    )
    job = submit_batch(cluster, "bad", srun)
    state = cluster.wait(job, JOB_END)
    output = output_of(cluster, "bad", job)
    assert state["ExitCode"] == "78:0", output
    assert "two-per-node=78" in output and "srun-exit=78" in output, output
    assert output.count("6 tasks on 3 node(s); start one per node") == 6, output
    assert "3 ranks on ringleader-slurm-node2, but the allocation gave it 2 CPUs" in output
    assert not (cluster.shared / "ringleader-output" / str(job)).exists()


def test_a_lost_node_ends_the_survivors_with_the_host_loss_code_naming_it(cluster: Any) -> None:
    """Slow (50 to 66 s in CI runs): the survivors end within ringleader_leader_timeout, but the
    batch job ends only once slurmctld marks the killed node down (SlurmdTimeout), and the node
    is started again for the next tests."""
    job = submit_batch(cluster, "lost", f"{RINGLEADER} -- {LONG_JOB}")
    try:
        wait_for_output(cluster, "lost", job, "rank 5] round 1:", JOB_END)
        cluster.kill_node(NODES[2])
        cluster.wait(job, JOB_END)
        output = output_of(cluster, "lost", job)
        codes = node_codes(output)
        assert {node: codes.get(node) for node in NODES[:2]} == {NODES[0]: 75, NODES[1]: 75}, output
        for node in NODES[:2]:
            failure = failure_of(cluster, job, node)
            assert NODES[2] in failure, failure
        assert_nothing_left(cluster, NODES[:2])
    finally:  # the next tests get all three nodes again
        cluster.start_node(NODES[2])
