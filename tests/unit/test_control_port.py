"""A control port held by another process: the leader's bind failure names the port and its
holder, and a worker learns fast that what answers there is not its job's leader (the greeting).
Real TCP on 127.0.0.1; the entry point's parts faked as in test_entrypoint.py."""

import errno
import os
import queue
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from ringleader.core import exitcodes
from ringleader.core.errors import ConfigError
from ringleader.supervise.context import job_identity
from ringleader.supervise.entrypoint import EntryPoint
from ringleader.wire.control import (
    Admission,
    ControlPortTaken,
    ControlServer,
    LeaderAddress,
    Liveness,
    connect_to_leader,
)
from ringleader.wire.messages import CONTROL_LINK
from ringleader.wire.ports import PortVisits, await_visits, listen_problem, port_holder
from tests.unit.test_entrypoint import Rig

SLOW = Liveness(interval=60.0, timeout=600.0)
JOB = "job-1"
WORKERS = ("algo-2",)


def listener() -> socket.socket:
    """Another process's listener, as far as the port is concerned."""
    return socket.create_server(("127.0.0.1", 0))


def port_of(sock: socket.socket) -> int:
    return int(sock.getsockname()[1])


def server(port: int, job: str = JOB) -> ControlServer:
    return ControlServer(
        port,
        queue.Queue(),
        SLOW,
        lambda _frame: None,
        WORKERS,
        lambda _line: None,
        Admission(job),
        addresses_of=lambda _host: {"127.0.0.1"},
    )


def connect(port: int, greeting_timeout: float = 5.0, deadline: float = 5.0, stop=None):
    address = LeaderAddress("127.0.0.1", port, JOB, greeting_timeout)
    joined = connect_to_leader(
        address, "algo-2", CONTROL_LINK, time.monotonic() + deadline, stop or threading.Event()
    )
    return None if joined is None else joined.channel


HELD: list[socket.socket] = []  # connections the listeners here hold open


@pytest.fixture(autouse=True)
def _release_held():
    yield
    while HELD:
        HELD.pop().close()


def serve_once(sock: socket.socket, answer: bytes | None, close: bool = False) -> None:
    """Accept one connection: send `answer`, then close it (`close`) or hold it open."""

    def run() -> None:
        connection, _ = sock.accept()
        HELD.append(connection)
        if answer is not None:
            connection.sendall(answer)
        if close:
            connection.close()

    threading.Thread(target=run, daemon=True).start()


# The leader's side: a port it cannot listen on is a configuration error naming the holder.


def test_a_taken_control_port_is_a_config_error_naming_the_port_and_its_holder():
    with listener() as taken:
        port = port_of(taken)
        with pytest.raises(ConfigError) as caught:
            server(port)
    error = caught.value
    assert error.field == "ringleader_control_port"
    assert error.exit_code == exitcodes.CONFIG_ERROR
    assert f"port {port} is already in use on this host, by " in error.problem
    assert f"(pid {os.getpid()}: " in error.problem  # this test's process holds it
    assert error.problem.endswith("choose another port or stop that process")


def test_the_holder_of_a_port_is_found_and_a_free_port_has_none():
    with listener() as taken:
        port = port_of(taken)
        holder = port_holder(port)
        assert holder is not None and f"pid {os.getpid()}" in holder
    assert port_holder(port) is None  # closed now


def test_a_bind_failure_other_than_in_use_says_what_it_is():
    problem = listen_problem(80, OSError(errno.EACCES, "Permission denied"))
    assert problem == "cannot listen on port 80: Permission denied"


# A worker's side: what answers must greet it as its own job's leader.


def test_a_worker_is_greeted_by_its_own_leader():
    with listener() as probe:
        port = port_of(probe)
    leader = server(port)
    try:
        channel = connect(port)
        assert channel is not None
        channel.close()
    finally:
        leader.close()


def test_another_jobs_leader_on_the_port_is_a_config_error_at_once():
    with listener() as probe:
        port = port_of(probe)
    other = server(port, job="job-2")
    try:
        started = time.monotonic()
        with pytest.raises(ConfigError) as caught:
            connect(port, greeting_timeout=30.0)
        assert time.monotonic() - started < 5.0
        # ... and the second job's own leader cannot listen there either
        with pytest.raises(ConfigError, match=f"port {port} is already in use"):
            server(port)
    finally:
        other.close()
    error = caught.value
    assert error.field == "ringleader_control_port"
    assert f"what answers on 127.0.0.1:{port} is not this job's leader" in error.problem
    assert "the leader of another job, 'job-2', answers there" in error.problem


def test_a_silent_listener_is_a_config_error_only_at_the_startup_deadline():
    # A leader busy accepting thousands of hosts is silent for a while too: every try gets the
    # greeting timeout, and only the startup deadline ends the tries, naming both settings.
    with listener() as silent:
        port = port_of(silent)
        serve_once(silent, None)  # the other tries wait in its listen queue, as silent
        started = time.monotonic()
        with pytest.raises(ConfigError) as caught:
            connect(port, greeting_timeout=0.3, deadline=1.5)
        elapsed = time.monotonic() - started
    assert 1.5 <= elapsed < 5.0
    assert caught.value.field == "ringleader_control_port"
    assert caught.value.problem.startswith(
        f"what answers on 127.0.0.1:{port} never greeted this host: no greeting within 0.3 s "
        "(ringleader_leader_timeout), on every try until the startup deadline "
        "(ringleader_startup_timeout). Another process holds the port on 127.0.0.1"
    )


def test_a_silent_holder_that_goes_away_is_still_named_at_the_deadline():
    """What held the port stayed silent through a whole try, then went away (its host shut
    down: the leader there gave up on the taken port, exit 78): the later tries are refused,
    and the worker still reports the port's silent holder (78), not a leader that never
    answered (69)."""
    with listener() as silent:
        port = port_of(silent)

        def hold_one_try_then_go() -> None:
            first, _ = silent.accept()
            first.recv(1)  # the worker gave up on it: closed
            first.close()
            silent.close()  # nothing listens any more: every later try is refused

        threading.Thread(target=hold_one_try_then_go, daemon=True).start()
        with pytest.raises(ConfigError) as caught:
            connect(port, greeting_timeout=0.3, deadline=2.0)
    assert caught.value.problem.startswith(
        f"what answers on 127.0.0.1:{port} never greeted this host: no greeting within 0.3 s"
    )


def test_a_leader_that_greets_late_is_tried_again_until_it_answers():
    """The first connection is held without a greeting (the leader busy with other hosts);
    the worker tries again and joins once the leader answers, instead of taking the port for
    another process's (exit 78)."""
    tries: list[socket.socket] = []
    with listener() as busy:
        port = port_of(busy)
        answered = threading.Event()

        def leader_after_the_first_try() -> None:
            first, _ = busy.accept()
            tries.append(first)
            first.recv(1)  # the worker gave up on it: closed
            busy.close()
            tries.append(server(port))  # type: ignore[arg-type]
            answered.set()

        threading.Thread(target=leader_after_the_first_try, daemon=True).start()
        try:
            channel = connect(port, greeting_timeout=0.3, deadline=30.0)
            assert channel is not None
            assert answered.wait(5.0)  # it joined the leader that answered, not the first
            channel.close()
        finally:
            for held in tries:
                held.close()


def test_a_late_welcome_is_waited_for_until_the_deadline(monkeypatch):
    """A greeting from this job's leader proves the port is its: a welcome later than the
    greeting timeout is a busy leader, waited for (not a configuration error)."""
    from ringleader.wire import control

    real_welcome = control.ControlServer._welcome
    release = threading.Event()

    def slow_welcome(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        release.wait(5.0)
        return real_welcome(self, *args, **kwargs)

    monkeypatch.setattr(control.ControlServer, "_welcome", slow_welcome)
    with listener() as probe:
        port = port_of(probe)
    leader = server(port)
    try:
        threading.Timer(0.8, release.set).start()
        channel = connect(port, greeting_timeout=0.3, deadline=30.0)
        assert channel is not None and release.is_set()
        channel.close()
    finally:
        release.set()
        leader.close()


def test_a_listener_that_answers_something_else_is_a_config_error_at_once():
    with listener() as web:
        serve_once(web, b"HTTP/1.0 400 Bad request\r\n\r\n")
        started = time.monotonic()
        with pytest.raises(ConfigError) as caught:
            connect(port_of(web), greeting_timeout=30.0)
    assert time.monotonic() - started < 5.0
    assert "it sent b'HTTP/1.0 400 Bad request\\r' instead of a greeting" in caught.value.problem


def test_a_connection_closed_before_the_greeting_is_retried_until_the_deadline():
    # Indistinguishable from a leader going down or not up yet: no verdict on the port.
    with listener() as closing:
        for _ in range(3):
            serve_once(closing, None, close=True)
        assert connect(port_of(closing), greeting_timeout=30.0, deadline=0.5) is None


def test_a_stop_while_waiting_for_the_greeting_ends_the_wait():
    stop = threading.Event()
    with listener() as silent:
        serve_once(silent, None)
        threading.Timer(0.2, stop.set).start()
        started = time.monotonic()
        assert connect(port_of(silent), greeting_timeout=30.0, stop=stop) is None
    assert time.monotonic() - started < 5.0


# The job's identity: the same on every host.


@pytest.mark.parametrize(
    ("environ", "identity"),
    [
        ({"TRAINING_JOB_NAME": "sm-job", "RINGLEADER_CLUSTER_JOB": "c1"}, "sm-job"),
        ({"RINGLEADER_CLUSTER_JOB": "c1"}, "c1"),
        ({}, "ringleader-algo-1"),
    ],
)
def test_the_jobs_identity(environ, identity):
    assert job_identity(environ, "algo-1") == identity


# The leader stays until its workers have been to the port (a holder in its container goes
# with it).


@pytest.mark.parametrize(
    ("polls", "done"),
    [
        ([[], [("algo-2", "ESTABLISHED")], []], {"algo-2"}),  # came, and the holder let go
        ([[("algo-2", "ESTABLISHED")], [("algo-2", "CLOSE_WAIT")]], {"algo-2"}),  # it closed
        ([[("algo-2", "LAST_ACK")]], {"algo-2"}),  # came and closed between two looks
        ([[("algo-2", "SYN_RECV")], [("algo-2", "ESTABLISHED")]], set()),  # still waiting
        # the holder closed first: the worker comes again
        ([[("algo-2", "ESTABLISHED")], [("algo-2", "TIME_WAIT")]], set()),
        ([[("algo-2", "FIN_WAIT2")], [("algo-2", "ESTABLISHED")]], set()),
        ([[], []], set()),  # never came
    ],
)
def test_a_workers_visit_is_done_once_it_let_go_first(polls, done):
    visits = PortVisits(["algo-2", "algo-3"])
    for connections in polls:
        visits.update(connections)
    assert visits.done == done
    assert not visits.complete


def test_every_visit_done_is_complete():
    visits = PortVisits(["algo-2", "algo-3"])
    visits.update([("algo-2", "CLOSE_WAIT"), ("algo-3", "CLOSE_WAIT")])
    assert visits.complete


def test_a_visit_to_a_held_port_is_seen_in_the_tcp_table():
    with listener() as holder:
        port = port_of(holder)
        serve_once(holder, None)
        visitor = socket.create_connection(("127.0.0.1", port))
        threading.Timer(0.5, visitor.close).start()
        started = time.monotonic()
        visits = await_visits(
            port, ["algo-2"], lambda _host: {"127.0.0.1"}, started + 10, threading.Event()
        )
    assert visits.done == {"algo-2"}
    assert 0.4 <= time.monotonic() - started < 5.0


def test_waiting_for_visits_ends_at_the_deadline_or_the_stop():
    stop = threading.Event()
    with listener() as holder:
        port = port_of(holder)
        started = time.monotonic()
        visits = await_visits(port, ["algo-2"], lambda _host: set(), started + 0.3, stop)
        assert visits.done == set()
        assert 0.3 <= time.monotonic() - started < 3.0
        threading.Timer(0.2, stop.set).start()
        started = time.monotonic()
        await_visits(port, ["algo-2"], lambda _host: set(), started + 30, stop)
        assert time.monotonic() - started < 3.0


# The entry point: 78 on every host, its result file written, the port named.


def taken_port(*args: object) -> ControlServer:
    raise ConfigError("ringleader_control_port", "port 29100 is already in use on this host")


def foreign_leader(
    leader: LeaderAddress, host: str, link: str, deadline: float, stop: threading.Event
) -> None:
    raise ConfigError("ringleader_control_port", f"what answers on {leader.host}:{leader.port}")


def test_a_leader_whose_control_port_is_taken_exits_78_without_launching(tmp_path: Path):
    rig = Rig(tmp_path, "algo-1", sagemaker_mpi_enabled=True, ringleader_startup_timeout="0.5")
    outcome = EntryPoint(replace(rig.parts, control_server=taken_port)).run()
    assert outcome.exit_code == exitcodes.CONFIG_ERROR
    assert outcome.failure == (
        "Host algo-1: Configuration error in ringleader_control_port: port 29100 is already in "
        "use on this host\n"
    )
    assert rig.launched == []
    assert rig.result_file() == outcome.failure
    # it waited for its workers to find the port taken (here they never come)
    assert "not seen at port 29100: algo-2, algo-3" in rig.logs


def another_jobs_leader(*args: object) -> ControlServer:
    raise ControlPortTaken("port 29100 is already in use on this host, by python", "cluster-1")


@pytest.mark.parametrize("in_container", [False, True])
def test_a_cluster_leader_whose_port_another_jobs_leader_holds_ends_at_once(
    tmp_path: Path, in_container: bool
):
    """Issue 26: two `ringleader cluster run` on one hostfile. The first job's leader outlives
    the second's and greets its workers with its own job: nothing to wait for. In a container
    the holder ends with it, so it waits for the workers' visits as before."""
    rig = Rig(tmp_path, "algo-1", sagemaker_mpi_enabled=True, ringleader_startup_timeout="30")
    parts = replace(rig.parts, control_server=another_jobs_leader, own_sshd=in_container)
    started = time.monotonic()
    stop_early = threading.Timer(1.0, lambda: entry.on_signal(15, None))
    entry = EntryPoint(parts)
    stop_early.start()  # a container's wait (for workers that never come here) is cut short
    try:
        outcome = entry.run()
    finally:
        stop_early.cancel()
    assert outcome.exit_code == exitcodes.CONFIG_ERROR
    assert outcome.failure is not None
    assert "the leader of the job 'cluster-1' is running there" in outcome.failure
    learnt = "the workers learn from the leader of 'cluster-1' that 29100 is taken"
    assert (learnt in rig.logs) is not in_container
    if not in_container:
        assert time.monotonic() - started < 1.0


def test_a_worker_reached_by_another_process_exits_78_naming_the_port(tmp_path: Path):
    rig = Rig(tmp_path, "algo-2", sagemaker_mpi_enabled=True)
    outcome = EntryPoint(replace(rig.parts, connect=foreign_leader)).run()
    assert outcome.exit_code == exitcodes.CONFIG_ERROR
    assert outcome.failure == (
        "Host algo-2: Configuration error in ringleader_control_port: what answers on "
        "algo-1:29100\n"
    )
    assert rig.result_file() == outcome.failure


def test_workers_and_leader_derive_the_same_identity(tmp_path: Path):
    for host in ("algo-1", "algo-2"):
        (tmp_path / host).mkdir()
        rig = Rig(tmp_path / host, host, sagemaker_mpi_enabled=True)
        assert rig.run()[0] == 0
        assert set(rig.jobs) == {"ringleader-algo-1"}


def test_a_leader_error_that_cannot_reach_the_workers_keeps_its_own_code(tmp_path: Path):
    rig = Rig(
        tmp_path,
        "algo-1",
        sagemaker_mpi_enabled=True,
        ringleader_log_ranks="many",
        ringleader_startup_timeout="0.5",
    )
    outcome = EntryPoint(replace(rig.parts, control_server=taken_port)).run()
    assert outcome.exit_code == exitcodes.CONFIG_ERROR
    assert outcome.failure is not None and "ringleader_log_ranks" in outcome.failure
    assert any("could not tell the workers: " in line for line in rig.logs)


def test_a_worker_error_that_cannot_reach_its_leader_keeps_its_own_code(tmp_path: Path):
    rig = Rig(tmp_path, "algo-2", sagemaker_mpi_enabled=True, ringleader_log_ranks="many")
    outcome = EntryPoint(replace(rig.parts, connect=foreign_leader)).run()
    assert outcome.exit_code == exitcodes.CONFIG_ERROR
    assert outcome.failure is not None and "ringleader_log_ranks" in outcome.failure
    assert any("could not report the error to the leader algo-1: " in line for line in rig.logs)
