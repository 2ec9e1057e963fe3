"""A real Slurm cluster of containers for container tests: the session fixture `slurm_cluster`.

scripts/slurm-cluster.sh starts it (Slurm 22.05 from Debian bookworm in ringleader:slurm,
`make image-slurm`): ringleader-slurm-head runs slurmctld, ringleader-slurm-node1..3 run slurmd
and sshd, every container has the session's shared directory at /shared. Jobs are submitted from
/shared/jobs in the head, so their output (slurm-<id>.out) is on this host too. There is no
slurmdbd: a job's state and exit code come from `scontrol show job`, which keeps an ended job for
MinJobAge (300 s). The cluster's container names are fixed: a session's cluster replaces one a
user started with `make slurm-up`.
"""

import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import pytest

from ringleader.config.slurm import FINAL_JOB_STATES

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SCRIPT = REPO / "scripts" / "slurm-cluster.sh"
SLURM_IMAGE = os.environ.get("RINGLEADER_SLURM_IMAGE", "ringleader:slurm")
HEAD = "ringleader-slurm-head"
NODE_COUNT = 3
UP_TIMEOUT = 90  # SLURM_UP_TIMEOUT of `slurm-cluster.sh up`


def parse_job_line(line: str) -> dict[str, str]:
    """The fields of one `scontrol show job -o` line. A value can hold spaces (a job name, a
    reason): a word without "=" belongs to the value before it."""
    fields: dict[str, str] = {}
    key = None
    for word in line.split():
        name, sep, value = word.partition("=")
        if sep and name:
            key = name
            fields[key] = value
        elif key is not None:
            fields[key] += " " + word
    return fields


@dataclass
class SlurmCluster:
    """The running cluster: its shared directory (host side of /shared) and compute nodes."""

    shared: Path
    nodes: list[str]
    head: str = HEAD

    @property
    def jobs_dir(self) -> Path:
        return self.shared / "jobs"

    def exec(
        self,
        container: str,
        argv: Sequence[str],
        timeout: float = 60,
        workdir: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """`docker exec container argv...`, its output captured as text; never raises for its
        exit status (a timeout raises subprocess.TimeoutExpired)."""
        command = ["docker", "exec"]
        if workdir is not None:
            command += ["-w", workdir]
        return subprocess.run(
            [*command, container, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def sbatch(self, script_text: str, name: str) -> int:
        """Writes `script_text` to jobs/<name>.sh and submits it from /shared/jobs in the head
        (`#SBATCH` lines in the script choose nodes and the like); the job's id."""
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        script = self.jobs_dir / f"{name}.sh"
        script.write_text(script_text)
        script.chmod(0o755)
        result = self.exec(
            self.head,
            ["sbatch", "--parsable", f"--job-name={name}", script.name],
            timeout=30,
            workdir="/shared/jobs",
        )
        if result.returncode != 0:
            raise AssertionError(f"sbatch {name} failed ({result.returncode}): {result.stderr}")
        # --parsable prints "<id>" or "<id>;<cluster>"
        return int(result.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """The job's fields as `scontrol show job -o` prints them now."""
        result = self.exec(self.head, ["scontrol", "show", "job", "-o", str(job_id)], timeout=30)
        if result.returncode != 0 or not result.stdout.strip():
            raise AssertionError(
                f"scontrol show job {job_id} failed ({result.returncode}): {result.stderr}"
            )
        return parse_job_line(result.stdout.strip().splitlines()[0])

    def wait(self, job_id: int, timeout: float = 120) -> dict[str, str]:
        """The job's fields once its state is a final one; AssertionError with the last state
        (and the job's output so far) when it is not within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            fields = self.job(job_id)
            if fields.get("JobState") in FINAL_JOB_STATES:
                return fields
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"job {job_id} did not end within {timeout} s: JobState="
                    f"{fields.get('JobState')} Reason={fields.get('Reason')}; output so far:\n"
                    f"{self.output(job_id)}"
                )
            time.sleep(0.5)

    def exit_code(self, job_id: int) -> str:
        """The job's ExitCode field, "<exit status>:<signal>" (e.g. "3:0", "0:9")."""
        return self.job(job_id)["ExitCode"]

    def output(self, job_id: int) -> str:
        """The job's slurm-<id>.out so far ("" before it exists)."""
        path = self.jobs_dir / f"slurm-{job_id}.out"
        return path.read_text(errors="replace") if path.is_file() else ""

    def processes(self, node: str, pattern: str) -> list[str]:
        """Every process on `node` whose command line matches the extended regular expression
        `pattern` (pgrep -af), as "<pid> <command line>"."""
        result = self.exec(node, ["pgrep", "-af", pattern], timeout=30)
        if result.returncode == 1 and not result.stderr.strip():  # none (docker's own errors,
            return []  # such as a container that is not running, also exit 1, saying so)
        if result.returncode != 0:
            raise AssertionError(f"pgrep on {node} failed ({result.returncode}): {result.stderr}")
        return result.stdout.splitlines()

    def kill_node(self, name: str) -> None:
        """docker kill: the node is gone at once; Slurm marks it DOWN about SlurmdTimeout (30 s)
        later and ends its job (NODE_FAIL; the cluster has JobRequeue=0)."""
        subprocess.run(["docker", "kill", name], capture_output=True, check=True, timeout=60)

    def start_node(self, name: str, timeout: float = 60) -> None:
        """Starts a killed node's container again and waits until Slurm has it idle (it registers
        again: ReturnToService=2), so later tests of the session find every node."""
        subprocess.run(["docker", "start", name], capture_output=True, check=True, timeout=60)
        deadline = time.monotonic() + timeout
        while (state := self.node_states().get(name)) != "idle":
            if time.monotonic() >= deadline:
                raise AssertionError(f"{name} is {state}, not idle, {timeout} s after its start")
            time.sleep(0.5)

    def node_states(self) -> dict[str, str]:
        """Each node's compact state as sinfo prints it (idle, alloc, comp, down*, ...)."""
        result = self.exec(self.head, ["sinfo", "-h", "-N", "-o", "%N %t"], timeout=30)
        if result.returncode != 0:
            raise AssertionError(f"sinfo failed ({result.returncode}): {result.stderr}")
        return dict(line.split(None, 1) for line in result.stdout.splitlines() if line.strip())


def ready_slurm_image(client: docker.DockerClient) -> str:
    """The Slurm node image, or a test failure naming the make target that builds it."""
    try:
        client.images.get(SLURM_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"image {SLURM_IMAGE} is not built; run `make image-slurm`")
    return SLURM_IMAGE


def cluster_script(
    action: str, shared: Path, timeout: float, check: bool
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "NODES": str(NODE_COUNT),
        "SLURM_SHARED": str(shared),
        "SLURM_IMAGE": SLURM_IMAGE,
        "SLURM_UP_TIMEOUT": str(UP_TIMEOUT),
    }
    result = subprocess.run(
        [str(CLUSTER_SCRIPT), action],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    print(result.stdout + result.stderr)  # shown by pytest when a test fails
    if check and result.returncode != 0:
        pytest.fail(
            f"slurm-cluster.sh {action} failed ({result.returncode}):\n"
            f"{result.stdout}{result.stderr}"
        )
    return result


@pytest.fixture(scope="session")
def slurm_cluster(
    docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SlurmCluster]:
    """A 3-node Slurm cluster for the whole session; removed at its end."""
    ready_slurm_image(docker_client)
    shared = tmp_path_factory.mktemp("slurm-shared")
    try:
        cluster_script("up", shared, timeout=UP_TIMEOUT + 120, check=True)
        yield SlurmCluster(
            shared=shared, nodes=[f"ringleader-slurm-node{i}" for i in range(1, NODE_COUNT + 1)]
        )
    finally:
        cluster_script("down", shared, timeout=120, check=False)
