"""The health gate's checks on this machine's real resources (disk, memory, ports, processes, a
user's command), the failure text they make, and the settings that drive them."""

import os
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ringleader.config.job import PAIRS_ALL, HealthConfig, JobConfig, Timeouts, parse_job_config
from ringleader.config.topology import parse_topology
from ringleader.core import exitcodes, paths
from ringleader.core.errors import ConfigError
from ringleader.core.health import (
    FAILED,
    NOT_CHECKED,
    OK,
    CheckResult,
    LinkSpeed,
    health_outcome,
    summary,
)
from ringleader.launch.health import HostChecks, job_ports, run_checks
from ringleader.supervise.eventloop import Now
from ringleader.supervise.leading.effects import Broadcast, Deadline, JobBegins, Log, PrepareAttempt
from ringleader.supervise.leading.state import LeaderSetup, LeaderState, Phase
from ringleader.supervise.leading.table import step
from ringleader.wire.events import WorkerHello, WorkerProbed
from ringleader.wire.messages import ProbePeers

HOSTS = ["algo-1", "algo-2", "algo-3"]


def config(
    tmp_path: Path, host: str = "algo-1", distribution: str = "", **settings: Any
) -> JobConfig:
    topology = parse_topology({}, {"hosts": HOSTS, "current_host": host})
    (tmp_path / "code").mkdir(exist_ok=True)
    values = {
        "sagemaker_program": "train.py",
        "sagemaker_submit_directory": str(tmp_path / "code"),
        **{f"ringleader_{key}": value for key, value in settings.items()},
    }
    if distribution:
        values[f"sagemaker_{distribution}_enabled"] = "true"
    return parse_job_config(topology, values, {})


def checks(
    tmp_path: Path, host: str = "algo-1", distribution: str = "", **settings: Any
) -> HostChecks:
    ml = tmp_path / "ml"
    for part in ("output", "model"):
        (ml / part).mkdir(parents=True, exist_ok=True)
    return HostChecks(
        config(tmp_path, host, distribution, **settings),
        host,
        ml_root=ml,
        gpu_dir=tmp_path / "gpus",
        infiniband_dir=tmp_path / "infiniband",
        environ={},
    )


def by_name(results: tuple[CheckResult, ...]) -> dict[str, CheckResult]:
    return {result.name: result for result in results}


def test_a_healthy_host_passes_every_check_and_says_what_it_did_not_check(
    tmp_path: Path,
) -> None:
    found = by_name(checks(tmp_path).run(0))
    output = f"free disk {tmp_path / 'ml' / 'output'}"
    assert found[output].status == OK
    assert found[output].detail.endswith("free, at least 1.0 GiB wanted (ringleader_min_free_disk)")
    assert found["/dev/shm"].status == OK and found["free memory"].status == OK
    assert found["GPUs"] == CheckResult("GPUs", NOT_CHECKED, "no GPU on this host")
    assert found["EFA"] == CheckResult(
        "EFA", NOT_CHECKED, "instance type not known: no EFA expected"
    )
    assert "last attempt's processes" not in found  # only before a restart


def test_too_little_disk_shm_or_memory_fails_with_its_numbers(tmp_path: Path) -> None:
    (tmp_path / "ml" / "checkpoints").mkdir(parents=True)
    huge = "100000g"
    found = by_name(checks(tmp_path, min_free_disk=huge, min_shm=huge, min_free_memory=huge).run(0))
    disk = found[f"free disk {tmp_path / 'ml' / 'checkpoints'}"]
    assert disk.status == FAILED
    assert disk.detail.endswith("free, at least 100000.0 GiB wanted (ringleader_min_free_disk)")
    assert found["/dev/shm"].detail.endswith(
        "in all, at least 100000.0 GiB wanted (ringleader_min_shm)"
    )
    assert found["free memory"].detail.endswith(
        "available, at least 100000.0 GiB wanted (ringleader_min_free_memory)"
    )
    assert all(found[name].failed for name in ("/dev/shm", "free memory"))


def test_a_held_port_is_named_with_its_holder(tmp_path: Path) -> None:
    """torch_distributed's master port on its first host: held by a listening process of
    this test, it cannot be bound, and the holder is named."""
    with socket.socket() as holder:
        holder.bind(("", 0))
        holder.listen()
        port = holder.getsockname()[1]
        leader = by_name(checks(tmp_path, "algo-1", "torch_distributed", master_port=port).run(0))
        worker = by_name(checks(tmp_path, "algo-2", "torch_distributed", master_port=port).run(0))
    result = leader[f"port {port}"]
    assert result.status == FAILED
    assert result.detail.startswith(
        f"cannot be bound (ringleader_master_port): held by pid {os.getpid()} ("
    )
    assert f"port {port}" not in worker  # only the first host binds the master port
    free = by_name(checks(tmp_path, "algo-1", "torch_distributed", master_port=port).run(0))
    assert free[f"port {port}"] == CheckResult(f"port {port}", OK, "free (ringleader_master_port)")


@pytest.mark.parametrize(
    ("distribution", "host", "settings", "expected"),
    [
        ("mpi", "algo-1", {}, []),
        ("torch_distributed", "algo-2", {}, []),
        ("torch_distributed", "algo-1", {}, [(7777, "ringleader_master_port")]),
        (
            "parameter_server",
            "algo-2",
            {"ps_framework": "tensorflow"},
            [(2222, "ringleader_tf_worker_port"), (2223, "ringleader_tf_ps_port")],
        ),
        (
            "parameter_server",
            "algo-1",
            {"ps_framework": "mxnet"},
            [(8000, "ringleader_mxnet_ps_port")],
        ),
        ("parameter_server", "algo-2", {"ps_framework": "mxnet"}, []),
        ("multi_worker_mirrored_strategy", "algo-3", {}, [(8890, "ringleader_tf_mirrored_port")]),
    ],
)
def test_each_distribution_checks_the_ports_its_hosts_bind(
    tmp_path: Path, distribution: str, host: str, settings: dict[str, str], expected: list
) -> None:
    assert job_ports(config(tmp_path, host, distribution, **settings), host) == expected


def test_gpus_fewer_than_expected_fail_and_efa_is_checked_where_the_instance_has_it(
    tmp_path: Path,
) -> None:
    host = checks(tmp_path)
    (tmp_path / "gpus").mkdir()
    for index in range(2):
        (tmp_path / "gpus" / f"0000:00:0{index}.0").mkdir()
    resource = tmp_path / "ml" / "input" / "config" / "resourceconfig.json"
    resource.parent.mkdir(parents=True)
    resource.write_text('{"current_instance_type": "ml.p4d.24xlarge"}')
    (tmp_path / "infiniband").mkdir()
    found = by_name(_with_gpus(host, tmp_path, "8").run(0))
    assert found["GPUs"] == CheckResult("GPUs", FAILED, "2 visible, 8 expected (SM_NUM_GPUS)")
    assert found["EFA"].status == FAILED
    assert found["EFA"].detail.endswith("ml.p4d.24xlarge has EFA")
    device = tmp_path / "infiniband" / "rdmap16s27" / "device"
    device.mkdir(parents=True)
    (device / "driver").symlink_to("../../../bus/pci/drivers/efa")  # as the efa driver binds it
    found = by_name(_with_gpus(host, tmp_path, "2").run(0))
    assert found["GPUs"] == CheckResult("GPUs", OK, "2 visible")
    assert found["EFA"] == CheckResult("EFA", OK, "1 device(s): rdmap16s27")


def _with_gpus(host: HostChecks, tmp_path: Path, expected: str) -> HostChecks:
    return HostChecks(
        host.config,
        "algo-1",
        ml_root=tmp_path / "ml",
        gpu_dir=tmp_path / "gpus",
        infiniband_dir=tmp_path / "infiniband",
        environ={"SM_NUM_GPUS": expected},
    )


def _attempt_process(attempt: int, seconds: float) -> "subprocess.Popen[bytes]":
    """A process of `attempt`, as a rank's child carries it, outside any rank's tree."""
    env = {**os.environ, paths.ATTEMPT_VARIABLE: str(attempt)}
    code = f"import time; time.sleep({seconds})"
    return subprocess.Popen([sys.executable, "-c", code], env=env)


def test_before_a_restart_a_process_of_the_last_attempt_is_waited_for(tmp_path: Path) -> None:
    process = _attempt_process(4, 0.5)
    try:
        found = by_name(checks(tmp_path, health_timeout="20").run(5))
    finally:
        process.wait()
    assert found["last attempt's processes"] == CheckResult(
        "last attempt's processes", OK, "1 of attempt 4 ended meanwhile"
    )


LISTENER = """
import socket, sys, time
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("", 0))
server.listen()
print(server.getsockname()[1], flush=True)
time.sleep(float(sys.argv[1]))
"""


def test_before_a_restart_a_port_is_tried_once_the_last_attempts_rank_has_ended(
    tmp_path: Path,
) -> None:
    """ci31: the master port was still held by the last attempt's rank 0, ending after its
    launcher was killed; tried at once, the port check failed the restart with 71."""
    env = {**os.environ, paths.ATTEMPT_VARIABLE: "2"}
    rank = subprocess.Popen(
        [sys.executable, "-c", LISTENER, "1.5"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert rank.stdout is not None
        port = rank.stdout.readline().strip()
        host = checks(
            tmp_path, "algo-1", "torch_distributed", master_port=port, health_timeout="20"
        )
        found = by_name(host.run(3))
    finally:
        rank.kill()
        rank.wait()
    assert found["last attempt's processes"].detail == "1 of attempt 2 ended meanwhile"
    assert found[f"port {port}"] == CheckResult(f"port {port}", OK, "free (ringleader_master_port)")


def test_before_a_restart_a_process_of_the_last_attempt_still_running_is_named(
    tmp_path: Path,
) -> None:
    process = _attempt_process(6, 60)
    try:
        started = time.monotonic()
        found = by_name(checks(tmp_path, health_timeout="2").run(7))
        waited = time.monotonic() - started
    finally:
        process.kill()
        process.wait()
    result = found["last attempt's processes"]
    assert result.status == FAILED
    assert result.detail.startswith(
        "1 of attempt 6 still running at the end of ringleader_health_timeout (2 s): "
        f"pid {process.pid} "
    )
    assert "time.sleep(60)" in result.detail
    assert waited < 30  # bounded by the timeout, not by the process


def test_the_users_check_runs_in_the_code_directory_with_its_last_lines_kept(
    tmp_path: Path,
) -> None:
    script = "for n in 1 2 3 4 5 6 7; do echo line $n; done; pwd; exit 4"
    found = by_name(checks(tmp_path, health_check=f"sh -c '{script}'").run(0))
    result = found["health check"]
    assert result.status == FAILED
    assert result.detail == (
        f"sh exited with code 4: line 4 | line 5 | line 6 | line 7 | {tmp_path / 'code'}"
    )
    passing = by_name(checks(tmp_path, health_check="sh -c 'echo fine'").run(0))
    assert passing["health check"] == CheckResult("health check", OK, "sh exited 0: fine")


def test_a_slow_users_check_is_ended_at_the_timeout(tmp_path: Path) -> None:
    found = by_name(checks(tmp_path, health_check="sleep 60", health_timeout="2").run(0))
    assert found["health check"] == CheckResult(
        "health check", FAILED, "sleep did not end within ringleader_health_timeout (2 s)"
    )


def test_a_check_that_does_not_return_in_time_failed_naming_the_timeout() -> None:
    def stuck(seconds: float) -> CheckResult:
        time.sleep(30)
        return CheckResult("", OK, "late")

    def quick(seconds: float) -> CheckResult:
        return CheckResult("", OK, "fine")

    started = time.monotonic()
    results = run_checks([("stuck", stuck), ("quick", quick)], 0.3)
    assert time.monotonic() - started < 10
    assert results == (
        CheckResult("stuck", FAILED, "did not finish within 0.3 s (ringleader_health_timeout)"),
        CheckResult("quick", OK, "fine"),
    )


def test_a_check_that_breaks_fails_named_and_the_others_go_on() -> None:
    def broken(seconds: float) -> CheckResult:
        raise OSError(5, "Input/output error")

    (result,) = run_checks([("free disk /scratch", broken)], 5)
    assert result.status == FAILED
    assert result.detail == "the check itself failed: OSError(5, 'Input/output error')"


# ----------------------------------------------------------------------------- the verdict
def test_the_failure_file_names_each_failing_host_and_check() -> None:
    shm = CheckResult("/dev/shm", FAILED, "1.0 MiB in all, at least 64.0 MiB wanted")
    fine = CheckResult("free memory", OK, "20.0 GiB available")
    assert health_outcome({"algo-1": (fine,), "algo-2": (fine,)}, 0) is None
    outcome = health_outcome({"algo-1": (fine,), "algo-2": (fine, shm)}, 0)
    assert outcome is not None and outcome.exit_code == exitcodes.HEALTH_CHECK_FAILED
    assert outcome.failure == (
        "Host algo-2 failed its health check before the job started: /dev/shm: 1.0 MiB in all, "
        "at least 64.0 MiB wanted. No rank was started.\nEvery failed check:\n"
        "  algo-2: /dev/shm: 1.0 MiB in all, at least 64.0 MiB wanted\n"
    )
    again = health_outcome({"algo-3": (shm,)}, 2)
    assert again is not None and again.failure is not None
    assert again.failure.startswith("Host algo-3 failed its health check before attempt 2: ")
    assert "wanted. Attempt 2 was not started.\n" in again.failure
    assert summary((fine, shm)).startswith("/dev/shm: 1.0 MiB in all")


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("health", "maybe", "expected on or off, got 'maybe'"),
        ("health_timeout", "0", "expected a number of seconds above 0"),
        ("min_free_disk", "lots", "expected a size such as 512m or 2g, got 'lots'"),
        ("min_shm", "-1m", "expected a size such as 512m or 2g"),
        ("min_free_memory", "0", "expected a size such as 512m or 2g"),
        ("health_check", "sh -c 'oops", "cannot split"),
        ("health_pairs", "some", "expected one of leader, all, got 'some'"),
        ("max_clock_offset", "-5", "expected a number of seconds above 0"),
    ],
)
def test_bad_health_settings_are_configuration_errors_naming_the_setting(
    tmp_path: Path, key: str, value: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        config(tmp_path, **{key: value})
    assert str(raised.value).startswith(f"Configuration error in ringleader_{key}: ")
    assert problem in str(raised.value)


def test_a_job_port_set_to_ringleaders_control_port_is_left_to_the_launch(tmp_path: Path) -> None:
    """ringleader's own control server holds it on the leader: a configuration error the
    launch names (78), not a sick host (71)."""
    job = config(tmp_path, "algo-1", "torch_distributed", master_port="29100")
    assert job_ports(job, "algo-1") == []


# --------------------------------------------------------------- the pair probes, on the leader
def gathered_with_pairs(
    workers: tuple[str, ...] = ("algo-2", "algo-3"),
) -> tuple[LeaderState, tuple[object, ...]]:
    """A leader of `workers` with ringleader_health_pairs=all, every worker's hello in."""
    setup = LeaderSetup(
        "algo-1", workers, Timeouts(), checks_ssh=False, health=HealthConfig(pairs=PAIRS_ALL)
    )
    state, _ = step(LeaderState(setup), JobBegins(6, ()), Now(0.0, 0.0))
    effects: tuple[object, ...] = ()
    for number, host in enumerate(workers):
        hello = WorkerHello(host, probe_address=f"10.0.2.{number + 2}")
        state, effects = step(state, hello, Now(1.0, 1.0))
    return state, effects


def test_once_every_worker_said_hello_each_is_asked_for_its_pair_probes() -> None:
    state, effects = gathered_with_pairs()
    peers = (("algo-2", "10.0.2.2"), ("algo-3", "10.0.2.3"))
    assert Broadcast(ProbePeers(peers)) in effects
    assert state.phase is Phase.GATHERING  # nothing launched before their reports
    assert not any(isinstance(effect, PrepareAttempt) for effect in effects)


def test_pair_probes_that_failed_end_the_job_with_the_health_code_naming_the_link() -> None:
    state, _ = gathered_with_pairs()
    reached = CheckResult("reach algo-3", OK, "fast", LinkSpeed("algo-2", "algo-3", 0.001, 1e9))
    state, effects = step(state, WorkerProbed("algo-2", (reached,)), Now(2.0, 2.0))
    assert state.phase is Phase.GATHERING
    cut_off = CheckResult("reach algo-2", FAILED, "cannot connect to 10.0.2.2:29100 on eth0")
    state, effects = step(state, WorkerProbed("algo-3", (cut_off,)), Now(2.0, 2.0))
    assert state.outcome is not None
    assert state.outcome.exit_code == exitcodes.HEALTH_CHECK_FAILED
    assert "algo-3 failed its health check" in (state.outcome.failure or "")
    assert "reach algo-2: cannot connect to 10.0.2.2:29100 on eth0" in (state.outcome.failure or "")
    assert Log("slowest of 1 link(s) probed: algo-2 -> algo-3: round trip 1.00 ms, 1000 MB/s") in (
        effects
    )


def test_healthy_pair_probes_let_the_attempt_be_prepared() -> None:
    state, _ = gathered_with_pairs()
    for host in ("algo-2", "algo-3"):
        state, effects = step(state, WorkerProbed(host, ()), Now(2.0, 2.0))
    assert any(isinstance(effect, PrepareAttempt) for effect in effects)
    assert state.outcome is None


def test_pair_probes_not_reported_in_time_are_failed_checks_of_their_host() -> None:
    state, _ = gathered_with_pairs()
    state, _ = step(state, WorkerProbed("algo-2", ()), Now(2.0, 2.0))
    assert state.deadline is not None
    state, _ = step(state, Deadline(), Now(state.deadline, state.deadline))
    assert state.outcome is not None
    assert state.outcome.exit_code == exitcodes.HEALTH_CHECK_FAILED
    assert "algo-3: pair probes: not reported within 30 s (ringleader_health_timeout)" in (
        state.outcome.failure or ""
    )


def test_one_worker_has_no_pairs_to_probe() -> None:
    _, effects = gathered_with_pairs(("algo-2",))
    assert not any(isinstance(effect, Broadcast) for effect in effects)
    assert any(isinstance(effect, PrepareAttempt) for effect in effects)


# ------------------------------------------------------------------ the clock, at each hello
def leader_hearing(offset: float, **health: Any) -> LeaderState:
    """A leader of algo-2 that heard its hello, with its clock `offset` from the leader's."""
    setup = LeaderSetup("algo-1", ("algo-2",), Timeouts(), checks_ssh=False)
    setup = replace(setup, health=HealthConfig(**health))
    state, _ = step(LeaderState(setup), JobBegins(2, ()), Now(0.0, 0.0))
    state, _ = step(state, WorkerHello("algo-2", clock_offset=offset), Now(1.0, 1.0))
    return state


def test_a_worker_whose_clock_is_off_fails_its_health_check() -> None:
    state = leader_hearing(-120.0)
    assert state.outcome is not None
    assert state.outcome.exit_code == exitcodes.HEALTH_CHECK_FAILED
    assert (
        "algo-2: clock: -120.000 s from the leader's, at most 60 s allowed "
        "(ringleader_max_clock_offset)" in (state.outcome.failure or "")
    )


def test_a_clock_within_the_bound_is_an_ok_check_kept_with_the_others() -> None:
    state = leader_hearing(0.25, max_clock_offset=1.0)
    assert state.outcome is None
    (clock,) = [result for result in state.health["algo-2"] if result.name == "clock"]
    assert clock.status == OK and clock.detail.startswith("+0.250 s from the leader's")


def test_with_health_off_the_clock_is_not_judged() -> None:
    state = leader_hearing(-3600.0, enabled=False)
    assert state.outcome is None and state.health["algo-2"] == ()
