"""The health gate's reachability probes on loopback: a worker's probe of a real control server
and of a peer's responder, what each refuses, and which pairs each worker probes."""

import queue
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringleader.core.health import FAILED, OK, CheckResult, LinkSpeed, slowest_links
from ringleader.wire.control import Admission, ControlServer, LeaderAddress, Liveness
from ringleader.wire.linkprobe import PROBE_BYTES, ROUND_TRIPS
from ringleader.wire.probe import ProbeResponder, peers_to_probe, probe_check, run_in_turn

JOB = "job-probe"
WORKERS = ("algo-2", "algo-3")
SLOW = Liveness(interval=60.0, timeout=600.0)
SECRET = b"s" * 32


def free_port() -> int:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        return int(taken.getsockname()[1])


@pytest.fixture
def leader() -> Iterator[tuple[int, "queue.Queue[str]"]]:
    port, logs = free_port(), queue.Queue[str]()
    server = ControlServer(
        port, queue.Queue(), SLOW, lambda frame: None, WORKERS, logs.put, Admission(JOB, SECRET)
    )
    yield port, logs
    server.close()


def target(port: int, job: str = JOB, secret: bytes | None = SECRET) -> LeaderAddress:
    return LeaderAddress("127.0.0.1", port, job, 2.0, secret)


def probe(address: LeaderAddress, seconds: float = 10.0, host: str = "algo-2") -> CheckResult:
    check = probe_check(address, host, "algo-1", "lo", threading.Event())
    return check(seconds)


def test_a_worker_reaches_the_leader_and_measures_the_link(leader):
    port, _ = leader
    result = probe(target(port))
    assert result.status == OK, result
    assert result.link is not None
    assert result.link.source == "algo-2" and result.link.target == "algo-1"
    assert 0 < result.link.round_trip < 1.0
    assert result.link.bandwidth > 1e6  # 4 MiB on loopback: far more than 1 MB/s
    assert f"median of {ROUND_TRIPS}" in result.detail
    assert f"{PROBE_BYTES >> 20} MiB" in result.detail
    assert "127.0.0.1 on lo" in result.detail


def test_a_probe_is_admitted_again_before_every_attempt(leader):
    port, _ = leader
    assert [probe(target(port)).status for _ in range(3)] == [OK, OK, OK]


def test_nothing_listening_is_a_failed_check_naming_the_address_and_interface():
    port = free_port()
    result = probe(target(port), seconds=2.0)
    assert result.status == FAILED and result.link is None
    assert f"cannot connect to 127.0.0.1:{port} on lo" in result.detail
    assert "ringleader_health_timeout" in result.detail


def test_a_silent_listener_fails_within_the_time_given():
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        started = time.monotonic()
        result = probe(LeaderAddress("127.0.0.1", port, JOB, 0.5, SECRET), seconds=3.0)
    assert result.status == FAILED
    assert "never greeted" in result.detail, result
    assert time.monotonic() - started < 10.0


def test_a_probe_without_the_jobs_secret_is_refused_and_named(leader):
    port, logs = leader
    result = probe(target(port, secret=b"w" * 32))
    assert result.status == FAILED
    assert "proof" in result.detail, result
    assert "does not match this job's secret" in logs.get(timeout=5)


def test_a_probe_from_a_host_outside_the_job_is_refused(leader):
    port, logs = leader
    result = probe(target(port), host="intruder")
    assert result.status == FAILED and "refused this host" in result.detail, result
    assert "'intruder' is not one of the workers" in logs.get(timeout=5)


def test_another_jobs_leader_is_not_reached(leader):
    port, _ = leader
    result = probe(target(port, job="job-other"))
    assert result.status == FAILED and "another job" in result.detail, result


def test_a_peer_answers_the_probes_of_the_jobs_workers_only():
    port, logs = free_port(), queue.Queue[str]()
    responder = ProbeResponder("127.0.0.1", port, Admission(JOB, SECRET), WORKERS, logs.put)
    try:
        ok = probe_check(target(port), "algo-2", "algo-3", "lo", threading.Event())(10.0)
        outsider = probe_check(target(port), "algo-9", "algo-3", "lo", threading.Event())(10.0)
    finally:
        responder.close()
    assert ok.status == OK and ok.link is not None and ok.link.target == "algo-3"
    assert outsider.status == FAILED
    assert "refused a probe" in logs.get(timeout=5)
    # closed: nothing answers any more
    after = probe_check(target(port), "algo-2", "algo-3", "lo", threading.Event())(1.0)
    assert after.status == FAILED


def test_a_peer_that_cannot_listen_says_so():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(OSError):
            ProbeResponder("127.0.0.1", port, Admission(JOB), WORKERS, lambda line: None)


@settings(deadline=None, database=None, max_examples=200)
@given(st.integers(1, 64))
def test_every_pair_of_workers_is_probed_once_and_the_work_is_shared(count: int) -> None:
    workers = [f"algo-{number}" for number in range(2, count + 2)]
    shares = {host: peers_to_probe(workers, host) for host in workers}
    pairs = [frozenset((host, peer)) for host, peers in shares.items() for peer in peers]
    assert len(pairs) == len(set(pairs)) == count * (count - 1) // 2
    assert all(host not in peers for host, peers in shares.items())
    assert max(map(len, shares.values()), default=0) <= count // 2


def test_a_host_outside_the_list_probes_nobody():
    assert peers_to_probe(["algo-2", "algo-3"], "algo-1") == []


def test_probes_in_turn_share_their_time_and_name_those_left_out():
    def slow(seconds: float) -> CheckResult:
        time.sleep(min(seconds, 0.3))  # a check that uses what time it has
        return CheckResult("", OK, "slow")

    results = run_in_turn([("reach algo-3", slow), ("reach algo-4", slow)], 0.2)
    assert [result.name for result in results] == ["reach algo-3", "reach algo-4"]
    assert results[0].status == OK
    assert results[1].status == FAILED and "not probed" in results[1].detail


def test_the_slowest_links_are_named_by_bandwidth():
    def reached(source: str, target: str, bandwidth: float) -> CheckResult:
        link = LinkSpeed(source, target, 0.001, bandwidth)
        return CheckResult(f"reach {target}", OK, "", link)

    reports = {
        "algo-2": (reached("algo-2", "algo-1", 9e8), reached("algo-2", "algo-3", 2e7)),
        "algo-3": (reached("algo-3", "algo-1", 5e8), CheckResult("/dev/shm", OK, "")),
    }
    line = slowest_links(reports, count=2)
    assert line == (
        "slowest of 3 link(s) probed: algo-2 -> algo-3: round trip 1.00 ms, 20 MB/s; "
        "algo-3 -> algo-1: round trip 1.00 ms, 500 MB/s"
    )
    assert slowest_links({"algo-2": (CheckResult("/dev/shm", OK, ""),)}) is None
