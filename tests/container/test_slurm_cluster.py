"""The Slurm test cluster itself (scripts/slurm-cluster.sh, the `slurm_cluster` fixture): its nodes
come up idle, batch jobs and srun steps run on all of them and their exit codes reach
`scontrol show job`, Slurm's host list syntax expands the way ringleader's parser does, and
mpirun reaches every node over their sshd (what ringleader's mpi strategy relies on)."""

import time

import pytest

from ringleader.config.hostlist import expand_hostlist
from ringleader.core.errors import ConfigError
from tests.container.slurm import SlurmCluster

# One pytest-xdist worker owns the Slurm cluster: its containers have fixed names.
ONE_WORKER = pytest.mark.xdist_group("slurm")
pytestmark = [pytest.mark.container, ONE_WORKER]

# Each compared with `scontrol show hostnames` in the head. Slurm refuses text after an item's
# last bracket (n[1-2]-ib: "Invalid hostlist", as in 22.05 so in a recent hostlist.c), though
# a bracket may follow such text (n[1-2]-ib[1]).
HOSTLISTS = [
    "node[01-03,07]",
    "a1,b[2-3]",
    "n[8-10]",
    "n[08-10]",
    "rack[1-2]-node[1-2]",
    "n[1-2]-ib",
    "x",
    "n[5]",
    "n[3,1,2]",
    "n[1-3],n2",
    "n[1-2]-ib[1]",
    "n[1-02]",
]
MARK = "== "


def wait_until_clean(cluster: SlurmCluster, pattern: str, timeout: float = 30) -> None:
    """Until no node runs a process matching `pattern`; AssertionError naming what is left."""
    deadline = time.monotonic() + timeout
    while True:
        left = {node: cluster.processes(node, pattern) for node in cluster.nodes}
        left = {node: found for node, found in left.items() if found}
        if not left:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"still running {timeout} s after the job: {left}")
        time.sleep(0.5)


def test_every_node_is_idle(slurm_cluster: SlurmCluster) -> None:
    assert slurm_cluster.node_states() == dict.fromkeys(slurm_cluster.nodes, "idle")


def test_srun_runs_on_every_node(slurm_cluster: SlurmCluster) -> None:
    job_id = slurm_cluster.sbatch("#!/bin/sh\n#SBATCH -N3\nsrun hostname\n", "hostnames")
    fields = slurm_cluster.wait(job_id, timeout=60)
    output = slurm_cluster.output(job_id)
    assert fields["JobState"] == "COMPLETED", output
    assert slurm_cluster.exit_code(job_id) == "0:0"
    assert sorted(output.split()) == slurm_cluster.nodes
    wait_until_clean(slurm_cluster, "slurmstepd")


def test_a_step_exit_code_is_the_jobs(slurm_cluster: SlurmCluster) -> None:
    job_id = slurm_cluster.sbatch("#!/bin/sh\n#SBATCH -N3\nsrun -N3 sh -c 'exit 3'\n", "exit3")
    fields = slurm_cluster.wait(job_id, timeout=60)
    output = slurm_cluster.output(job_id)
    assert fields["JobState"] == "FAILED", output
    assert fields["ExitCode"] == "3:0", output
    assert output.count("Exited with exit code 3") == 3, output
    wait_until_clean(slurm_cluster, "slurmstepd")


@pytest.fixture(scope="module")
def slurm_hostnames(slurm_cluster: SlurmCluster) -> dict[str, list[str]]:
    """What `scontrol show hostnames` prints (stdout and stderr) for each of HOSTLISTS."""
    loop = f'for s; do printf "{MARK}%s\\n" "$s"; scontrol show hostnames "$s" 2>&1; done'
    result = slurm_cluster.exec(slurm_cluster.head, ["sh", "-c", loop, "sh", *HOSTLISTS])
    assert result.returncode == 0, result.stderr
    printed: dict[str, list[str]] = {}
    current: list[str] = []
    for line in result.stdout.splitlines():
        if line.startswith(MARK):
            current = printed.setdefault(line[len(MARK) :], [])
        else:
            current.append(line)
    assert list(printed) == HOSTLISTS, result.stdout
    return printed


@pytest.mark.parametrize("hostlist", HOSTLISTS)
def test_hostlist_expands_as_slurm_does(
    slurm_hostnames: dict[str, list[str]], hostlist: str
) -> None:
    printed = slurm_hostnames[hostlist]
    # scontrol says so on stderr and still exits 0
    if any("Invalid hostlist" in line for line in printed):
        with pytest.raises(ConfigError):
            expand_hostlist(hostlist)
    else:
        assert expand_hostlist(hostlist) == tuple(printed)


def test_mpirun_reaches_every_node_over_ssh(slurm_cluster: SlurmCluster) -> None:
    hosts = ",".join(slurm_cluster.nodes)
    result = slurm_cluster.exec(
        slurm_cluster.nodes[0],
        ["mpirun", "--allow-run-as-root", "-H", hosts, "-np", "3", "hostname"],
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(result.stdout.split()) == slurm_cluster.nodes, result.stdout + result.stderr
