"""The health gate on real containers (3 hosts x 2 ranks): sick hosts are named with each check
and its numbers, every host exits 71, no rank starts; before a restart a process of the last
attempt still running is waited for, then named; a worker cut off from the leader on the job's
network interface is named; with ringleader_health_pairs=all every pair is probed."""

import contextlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest

from ringleader.tools.local.plan import HostPlan
from ringleader.tools.local.run import LocalJob
from tests.container.conftest import (
    IMAGE,
    Capture,
    JobRun,
    make_spec,
    rank_lines,
    run_to_end,
)
from tests.container.mounts import HOLD_PORT_THEN_TRAIN, MountedJob, Tmpfs

pytestmark = pytest.mark.container

HOSTS = ["algo-1", "algo-2", "algo-3"]
RANK_OUTPUT = re.compile(r"\[algo-\d rank \d+\]")
HEALTH_CHECK_FAILED = 71
RINGLEADER = [sys.executable, "-m", "ringleader.tools.cli"]
JOBS = Path(__file__).resolve().parent / "restart_jobs"
# the user's own check: fails on algo-2 only, saying why
SCRATCH_CHECK = (
    'sh -c \'test "$SM_CURRENT_HOST" != algo-2 || '
    "{ echo no scratch on $SM_CURRENT_HOST; exit 1; }'"
)


@pytest.fixture
def run_mounted(docker_client: docker.DockerClient, tmp_path: Path) -> Callable[..., JobRun]:
    def run(tmpfs: Tmpfs, **overrides: Any) -> JobRun:
        capture = Capture()
        job = MountedJob(tmpfs, make_spec(tmp_path, **overrides), capture, docker_client)
        return run_to_end(job, capture)

    return run


def test_every_sick_host_is_named_with_its_check_and_no_rank_starts(
    run_mounted: Callable[..., JobRun], horovod_image: str
) -> None:
    """torch_distributed with its master port held on algo-1; on algo-2 a 1 MB checkpoint
    disk and the user's check failing; on algo-3 a 1 MB /dev/shm."""
    run = run_mounted(
        {
            "algo-2": {"/opt/ml/checkpoints": "size=1m"},
            "algo-3": {"/dev/shm": "size=1m"},
        },
        image=horovod_image,
        distribution="torch_distributed",
        entry_point="ddp_train.py",
        entrypoint=("python3", "-c", HOLD_PORT_THEN_TRAIN),
        host_env={"algo-1": {"HOLD_PORT": "7777"}},
        settings={"startup_timeout": "60", "health_check": SCRATCH_CHECK},
    )
    assert run.codes() == dict.fromkeys(HOSTS, HEALTH_CHECK_FAILED), run.output
    failure = run.failure("algo-3")
    assert all(run.failure(host) == failure for host in HOSTS)
    lines = failure.splitlines()
    assert lines[0].startswith(
        "Hosts algo-1, algo-2, algo-3 failed their health checks before the job started; first "
        "algo-1: port 7777: cannot be bound (ringleader_master_port): held by pid "
    ), failure
    assert "python3 -m http.server 7777" in lines[0] and lines[0].endswith("No rank was started.")
    assert (
        "  algo-2: free disk /opt/ml/checkpoints: 1.0 MiB free, at least 1.0 GiB wanted "
        "(ringleader_min_free_disk)" in lines
    ), failure
    assert "  algo-2: health check: sh exited with code 1: no scratch on algo-2" in lines, failure
    assert (
        "  algo-3: /dev/shm: 1.0 MiB in all, at least 64.0 MiB wanted (ringleader_min_shm)" in lines
    ), failure
    assert not any("algo-3: free disk" in line or "algo-1: health" in line for line in lines)
    assert RANK_OUTPUT.search(run.output) is None  # no rank ever started


def _inject_leftover(
    run: JobRun, docker_client: docker.DockerClient, host: str, seconds: int
) -> None:
    """A process of attempt 0 that no rank's tree holds (as one stuck in a driver would be):
    started from outside once attempt 0 runs, it ignores SIGTERM and lives `seconds`."""
    run.capture.wait_for(lambda text: "rank 3 attempt 0" in text, 120)
    container = docker_client.containers.get(run.container_id(host))
    command = f"trap '' TERM; exec sleep {seconds}"
    container.exec_run(["sh", "-c", command], environment={"RINGLEADER_ATTEMPT": "0"}, detach=True)


def _restart_with_leftover(
    start_job: Callable[..., JobRun],
    docker_client: docker.DockerClient,
    health_timeout: int,
    lives: int,
) -> JobRun:
    """restart_jobs/flaky.py: rank 3 fails once after 4 s, one restart allowed; a leftover
    of attempt 0 on algo-3 that lives `lives` seconds. Run to its end."""
    run = start_job(
        source_dir=JOBS,
        entry_point="flaky.py",
        hyperparameters={"mode": "once", "seconds": "4"},
        settings={
            "startup_timeout": "60",
            "max_restarts": "1",
            "health_timeout": str(health_timeout),
        },
    )
    _inject_leftover(run, docker_client, "algo-3", lives)
    run.join(180)
    return run


def test_a_leftover_of_the_last_attempt_is_waited_for_then_the_restart_goes_on(
    start_job: Callable[..., JobRun], docker_client: docker.DockerClient
) -> None:
    started = time.monotonic()
    run = _restart_with_leftover(start_job, docker_client, health_timeout=60, lives=20)
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    assert rank_lines(run.output, "sum 15") == set(range(6))
    assert "last attempt's processes: 1 of attempt 0 ended meanwhile [ok]" in run.output
    print(f"the job took {time.monotonic() - started:.1f} s")


def test_a_leftover_of_the_last_attempt_still_running_is_named_and_no_attempt_starts(
    start_job: Callable[..., JobRun], docker_client: docker.DockerClient
) -> None:
    run = _restart_with_leftover(start_job, docker_client, health_timeout=5, lives=600)
    assert run.codes() == dict.fromkeys(HOSTS, HEALTH_CHECK_FAILED), run.output
    lines = run.failure("algo-1").splitlines()
    assert lines[0].startswith(
        "Host algo-3 failed its health check before attempt 1: last attempt's processes: 1 of "
        "attempt 0 still running at the end of ringleader_health_timeout (5 s): pid "
    ), lines
    assert "sleep 600" in lines[0] and lines[0].endswith("Attempt 1 was not started.")
    assert any(line.startswith("Earlier attempt 0: exit code 5 (rank-failure)") for line in lines)
    assert not re.search(r"\[algo-\d rank \d+\] rank \d+ attempt 1", run.output)


def test_doctor_on_fake_hosts_prints_every_hosts_checks() -> None:
    """`ringleader doctor local`: the image's own checks in 3 containers, one table; a /dev/shm
    below the setting on every host is named on each, exit 71."""
    doctor = [*RINGLEADER, "doctor", "local", "--hosts", "3", "--image", IMAGE]
    done = subprocess.run(
        [*doctor, "--shm-size", "1g", "--setting", "min_shm=2g"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == HEALTH_CHECK_FAILED, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["host", "check", "status", "detail"]
    for host in HOSTS:
        (shm,) = [line for line in lines if line.startswith(host) and "/dev/shm" in line]
        assert shm.split()[2:5] == ["failed", "1.0", "GiB"], done.stdout
        assert shm.endswith("at least 2.0 GiB wanted (ringleader_min_shm)")
        assert any(line.startswith(host) and "free disk /opt/ml/output" in line for line in lines)


class JobNetwork(LocalJob):
    """A LocalJob whose hosts train on a second network, the job's interface (eth1): an
    internal Docker network that only the hosts in `on_it` join. The control connections stay
    on the first (eth0), as a cluster's management network would."""

    def __init__(self, on_it: set[str], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_it = on_it
        self._job_network: Any = None

    def _write_config(self, host: HostPlan) -> Path:
        config_dir = super()._write_config(host)
        resource_config = {**host.resource_config, "network_interface_name": "eth1"}
        (config_dir / "resourceconfig.json").write_text(json.dumps(resource_config))
        return config_dir

    def _create(self) -> None:
        super()._create()
        self._job_network = self._client.networks.create(
            f"{self.job_id}-job", driver="bridge", internal=True
        )
        for host in sorted(self._on_it):
            self._job_network.connect(self._containers[host])

    def _cleanup(self) -> None:
        super()._cleanup()
        if self._job_network is not None:
            with contextlib.suppress(docker.errors.APIError):
                self._job_network.remove()


def run_on_job_network(
    docker_client: docker.DockerClient, tmp_path: Path, on_it: set[str], **overrides: Any
) -> JobRun:
    capture = Capture()
    job = JobNetwork(on_it, make_spec(tmp_path, **overrides), capture, docker_client)
    return run_to_end(job, capture)


def test_a_worker_that_cannot_reach_the_leader_on_the_jobs_interface_is_named(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """algo-2 is not on the job's network (eth1): its probe of the leader's address there
    fails, named with the address and interface; algo-3's gets through; every host exits 71
    and no rank starts."""
    run = run_on_job_network(
        docker_client,
        tmp_path,
        {"algo-1", "algo-3"},
        settings={"startup_timeout": "60", "health_timeout": "5"},
    )
    assert run.codes() == dict.fromkeys(HOSTS, HEALTH_CHECK_FAILED), run.output
    failure = run.failure("algo-1")
    first = failure.splitlines()[0]
    assert re.match(
        r"Host algo-2 failed its health check before the job started: reach leader algo-1: "
        r"cannot connect to \d+\.\d+\.\d+\.\d+:29100 on eth1 within [\d.]+ s "
        r"\(ringleader_health_timeout\)\. No rank was started\.$",
        first,
    ), failure
    assert RANK_OUTPUT.search(run.output) is None
    summary = json.loads((run.job.output_dir / "algo-1/output/data/job.json").read_text())
    (reached,) = [c for c in summary["health"]["algo-3"] if c["name"] == "reach leader algo-1"]
    assert reached["status"] == "ok" and reached["link"]["bandwidth"] > 0, reached


def test_every_pair_of_workers_is_probed_and_the_job_runs(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """ringleader_health_pairs=all, every host on the job's network: each worker reaches the
    leader and the other worker, the leader names the slowest links, the job succeeds."""
    run = run_on_job_network(
        docker_client,
        tmp_path,
        set(HOSTS),
        settings={"startup_timeout": "60", "health_pairs": "all"},
    )
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    assert "probing every pair of the 2 workers" in run.output
    assert "slowest of 3 link(s) probed: " in run.output
    summary = json.loads((run.job.output_dir / "algo-1/output/data/job.json").read_text())
    links = [
        (check["link"]["source"], check["link"]["target"])
        for host in ("algo-2", "algo-3")
        for check in summary["health"][host]
        if "link" in check
    ]
    assert sorted(links) in (
        [("algo-2", "algo-1"), ("algo-2", "algo-3"), ("algo-3", "algo-1")],
        [("algo-2", "algo-1"), ("algo-3", "algo-1"), ("algo-3", "algo-2")],
    ), summary["health"]


def test_a_worker_whose_checks_outlast_the_leader_timeout_is_not_lost(
    run_job: Callable[..., JobRun],
) -> None:
    """algo-2's own check takes 5 s, the leader timeout is 3 s: its pulses flow while it
    checks, the leader waits for its hello, and the job runs."""
    slow_on_algo_2 = "sh -c 'test \"$SM_CURRENT_HOST\" != algo-2 || sleep 5'"
    run = run_job(
        settings={"startup_timeout": "60", "leader_timeout": "3", "health_check": slow_on_algo_2}
    )
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    assert RANK_OUTPUT.search(run.output), run.output  # the ranks ran
