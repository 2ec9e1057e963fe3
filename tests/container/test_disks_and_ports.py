"""Full disks, a wedged MPI daemon and a busy control port on real containers (3 hosts x 2 ranks):
every host's exit code is the job's, nothing blocks, and the log says what went wrong.

The job is bench/probe/disk_job.py: every rank prints --megabytes, rank 0 can fill a disk, a
rank can fail, and a rank can stop its host's orted once every rank has finalized MPI."""

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.container.conftest import REPO, Capture, JobRun, make_spec, rank_lines, run_to_end
from tests.container.mounts import HOLD_PORT_THEN_TRAIN, MountedJob, Tmpfs

pytestmark = pytest.mark.container

HOSTS = ["algo-1", "algo-2", "algo-3"]
JOBS = REPO / "bench" / "probe"
LOGS = "/opt/ml/output/data/logs"
NO_SPACE = "No space left on device"


@pytest.fixture
def run_mounted(docker_client: docker.DockerClient, tmp_path: Path) -> Callable[..., JobRun]:
    def run(tmpfs: Tmpfs | None = None, **overrides: Any) -> JobRun:
        values: dict[str, Any] = {"source_dir": JOBS, "entry_point": "disk_job.py"}
        capture = Capture()
        spec = make_spec(tmp_path, **{**values, **overrides})
        return run_to_end(MountedJob(tmpfs or {}, spec, capture, docker_client), capture)

    return run


def shown_lines(output: str, rank: int) -> list[int]:
    """The indexes of rank `rank`'s numbered lines the leader printed whole."""
    pattern = re.compile(rf"\[algo-\d rank {rank}\] R{rank} L(\d+) x+ END(\d+)$")
    return [
        int(match.group(1))
        for line in output.splitlines()
        if (match := pattern.search(line)) and match.group(1) == match.group(2)
    ]


def toolkit_lines(output: str, host: str) -> list[str]:
    return [line for line in output.splitlines() if f"[ringleader {host}] " in line]


def test_a_full_log_volume_on_a_worker_stops_its_logs_not_the_job(run_mounted):
    # 2 MB from each rank; algo-2's logs have 1 MB between them.
    run = run_mounted(
        tmpfs={"algo-2": {LOGS: "size=1m"}},
        hyperparameters={"megabytes": "2"},
        settings={"startup_timeout": "60"},
    )
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    every = list(range(2000))
    for rank in range(6):
        assert shown_lines(run.output, rank) == every, f"rank {rank}"
    kept = {}
    for rank in (2, 3):
        warning = re.search(
            rf"\[algo-2 rank {rank}\] \[ringleader\] the rank's log {LOGS}/algo-2/rank-{rank}.log"
            rf" stopped after (\d+) line\(s\): {NO_SPACE}; its output still goes to the leader",
            run.output,
        )
        assert warning is not None, f"no warning for rank {rank}"
        kept[rank] = int(warning.group(1))
    assert sum(kept.values()) <= 1100  # what 1 MB holds, about
    for rank in (4, 5):  # the other hosts' logs are whole
        log = run.job.output_dir / "algo-3" / "output" / "data" / "logs" / "algo-3"
        assert len((log / f"rank-{rank}.log").read_text().splitlines()) == 2001
    assert run.has_success_file("algo-2")
    print(f"job took {run.seconds:.1f} s; the logs kept {kept}")


@pytest.mark.parametrize(("fail", "code"), [({}, 0), ({"fail-rank": "4", "fail-code": "3"}, 3)])
def test_a_full_result_disk_on_the_leader_keeps_every_hosts_code(run_mounted, fail, code):
    # The leader's /opt/ml/output is a 2 MB tmpfs that rank 0 fills (a checkpoint) before
    # the job ends: its result files cannot be written. Its ranks' logs have a disk of their
    # own: a log that hits the full disk is cut back to its last whole batch, which would free
    # what that batch took, sometimes room enough for job.json (1 in 3 cold CI runs). The
    # health gate is told 2 MB is enough: the disk fills during the job, not before it.
    run = run_mounted(
        tmpfs={"algo-1": {"/opt/ml/output": "size=2m", LOGS: "size=16m"}},
        hyperparameters={"megabytes": "0.5", "fill": "/opt/ml/output", **fail},
        settings={"startup_timeout": "60", "min_free_disk": "1m"},
    )
    assert run.codes() == dict.fromkeys(HOSTS, code), run.output
    assert "filled the disk under /opt/ml/output" in run.output
    leader = "\n".join(toolkit_lines(run.output, "algo-1"))
    assert f"could not write /opt/ml/output/data/job.json: {NO_SPACE}" in leader
    assert "Traceback" not in run.output
    if code == 0:
        for host in ("algo-2", "algo-3"):
            assert run.has_success_file(host)
        assert "job succeeded: exit code 0" in leader
    else:
        first = "Rank 4 on host algo-3 exited with code 3."
        for host in ("algo-2", "algo-3"):
            assert run.failure(host).startswith(first), run.failure(host)
        assert f"could not write the result file in /opt/ml/output: {NO_SPACE}" in leader
        assert "job failed: exit code 3" in leader
        assert first in leader  # the failure the file could not take is in the log


def test_a_wedged_orted_is_killed_after_the_launcher_exit_timeout(run_mounted):
    # Once every rank has finalized MPI, algo-2's orted is stopped (SIGSTOP): the ranks all
    # end, but mpirun never hears of it from that daemon.
    timeout = 4
    run = run_mounted(
        hyperparameters={"megabytes": "0.01", "wedge-host": "algo-2"},
        settings={"startup_timeout": "60", "launcher_exit_timeout": str(timeout)},
    )
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    assert rank_lines(run.output, "stopped orted") == {2}
    assert "every rank has ended; killing mpirun, still running" in run.output
    summary = json.loads((run.job.output_dir / "algo-1/output/data/job.json").read_text())
    last_rank_end = max(rank["ended_at"] for rank in summary["ranks"])
    assert run.result is not None
    every_host_exited = max(host.finished_at for host in run.result.hosts)
    seconds = every_host_exited - last_rank_end
    print(f"last rank end to every host exited: {seconds:.2f} s")
    assert timeout - 0.5 <= seconds <= timeout + 10


def test_a_busy_control_port_is_a_configuration_error_on_every_host(run_mounted):
    run = run_mounted(
        entrypoint=("python3", "-c", HOLD_PORT_THEN_TRAIN),
        host_env={
            "algo-1": {"HOLD_PORT": "29100"},
            "algo-2": {"AWAIT_PORT": "algo-1:29100"},
            "algo-3": {"AWAIT_PORT": "algo-1:29100"},
        },
        # a silent port is tried again until the startup deadline (a busy leader greets late)
        hyperparameters={"megabytes": "0.01", "ringleader_startup_timeout": "20"},
    )
    assert run.codes() == dict.fromkeys(HOSTS, 78), run.output
    leader = run.failure("algo-1")
    assert leader.startswith(
        "Host algo-1: Configuration error in ringleader_control_port: port 29100 is already "
        "in use on this host, by python"
    ), leader
    assert re.search(r"\(pid \d+: \S*python3? -m http.server 29100\)", leader), leader
    for host in ("algo-2", "algo-3"):
        assert run.failure(host) == (
            f"Host {host}: Configuration error in ringleader_control_port: what answers on "
            "algo-1:29100 never greeted this host: no greeting within 10 s "
            "(ringleader_leader_timeout), on every try until the startup deadline "
            "(ringleader_startup_timeout). Another process holds the port on algo-1 (the "
            "leader's failure file names it), or the leader is too busy to greet its hosts; "
            "choose another port, or raise those timeouts\n"
        )
    assert run.result is not None
    exits = [host.finished_at - host.started_at for host in run.result.hosts]
    print(f"every host exited {max(exits):.1f} s after its start")
    assert max(exits) < 20 + 15  # the startup timeout, and the start of a container
