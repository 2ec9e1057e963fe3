"""The leader's control server and a worker's connection to it, over real TCP on 127.0.0.1."""

import queue
import socket
import threading
import time

import pytest

from ringleader.core.records import RankRecord
from ringleader.wire.control import ControlServer, connect_to_leader, hello_message
from ringleader.wire.events import (
    RankEnded,
    RankStarted,
    SigtermReceived,
    WorkerBye,
    WorkerHello,
    WorkerLost,
)
from ringleader.wire.protocol import Channel, ChannelClosed


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def next_event(events, timeout=5.0):
    return events.get(timeout=timeout)


class Leader:
    def __init__(self, heartbeat_interval=60.0):
        self.port = free_port()
        self.events: queue.Queue = queue.Queue()
        self.outputs: list[dict] = []
        self.server = ControlServer(self.port, self.events, heartbeat_interval, self.outputs.append)
        self.channels: list[Channel] = []

    def connect(self, deadline_seconds=5.0) -> Channel:
        channel = connect_to_leader(
            "127.0.0.1", self.port, time.monotonic() + deadline_seconds, threading.Event()
        )
        assert channel is not None
        self.channels.append(channel)
        return channel

    def join(self, host) -> Channel:
        channel = self.connect()
        channel.send(hello_message(host))
        assert next_event(self.events) == WorkerHello(host)
        return channel

    def close(self):
        for channel in self.channels:
            channel.close()
        self.server.close()


@pytest.fixture
def leader():
    running = Leader()
    yield running
    running.close()


@pytest.fixture
def fast_leader():
    running = Leader(heartbeat_interval=0.05)
    yield running
    running.close()


def test_hello_becomes_worker_hello(leader):
    leader.join("algo-2")
    assert leader.events.empty()


def test_hello_with_an_error(leader):
    channel = leader.connect()
    channel.send(hello_message("algo-3", (78, "Configuration error in sagemaker_program: x")))
    assert next_event(leader.events) == WorkerHello(
        "algo-3", 78, "Configuration error in sagemaker_program: x"
    )


def test_rank_events_are_relayed(leader):
    channel = leader.join("algo-2")
    record = RankRecord(
        rank=3,
        host="algo-2",
        exit_code=3,
        signal=None,
        started_at=100.0,
        ended_at=101.5,
        terminated=False,
        stderr_tail=("Traceback", "ValueError: x"),
    )
    channel.send({"type": "rank-start", "rank": 3, "host": "algo-2"})
    channel.send({"type": "rank-end", "record": record.to_json()})
    channel.send({"type": "sigterm"})
    channel.send({"type": "bye"})
    assert next_event(leader.events) == RankStarted(3, "algo-2")
    assert next_event(leader.events) == RankEnded(record)
    assert next_event(leader.events) == SigtermReceived("algo-2")
    assert next_event(leader.events) == WorkerBye("algo-2")


def test_heartbeats_arrive_at_the_interval(fast_leader):
    channel = fast_leader.join("algo-2")
    arrivals = []
    for _ in range(4):
        assert channel.receive(timeout=2.0) == {"type": "heartbeat"}
        arrivals.append(time.monotonic())
    span = arrivals[-1] - arrivals[0]  # three intervals of 0.05 s
    assert 0.1 <= span < 1.5


def test_no_heartbeat_before_hello(fast_leader):
    channel = fast_leader.connect()
    with pytest.raises(TimeoutError):
        channel.receive(timeout=0.3)


def test_finish_reaches_connected_and_later_workers(leader):
    early = leader.join("algo-2")
    leader.server.finish(3, "Rank 4 on host algo-3 exited with code 3.\n")
    expected = {"type": "exit", "code": 3, "failure": "Rank 4 on host algo-3 exited with code 3.\n"}
    assert early.receive(timeout=5.0) == expected
    late = leader.join("algo-3")
    assert late.receive(timeout=5.0) == expected


def test_broadcast(leader):
    channels = [leader.join(host) for host in ("algo-2", "algo-3")]
    leader.server.broadcast({"type": "terminate"})
    for channel in channels:
        assert channel.receive(timeout=5.0) == {"type": "terminate"}


def test_closing_the_client_is_worker_lost(leader):
    channel = leader.join("algo-2")
    channel.close()
    event = next_event(leader.events)
    assert isinstance(event, WorkerLost)
    assert event.host == "algo-2"
    assert event.reason


def test_garbled_message_is_worker_lost(leader):
    channel = leader.join("algo-2")
    channel.send({"type": "rank-end", "record": {"rank": 1}})  # KeyError inside
    event = next_event(leader.events)
    assert isinstance(event, WorkerLost)
    assert event.host == "algo-2"


def test_non_hello_first_message_is_dropped(leader):
    channel = leader.connect()
    channel.send({"type": "bye"})
    with pytest.raises(ChannelClosed):
        channel.receive(timeout=5.0)
    assert leader.events.empty()


def test_server_close_disconnects_workers(leader):
    channel = leader.join("algo-2")
    leader.server.close()
    with pytest.raises(ChannelClosed):
        channel.receive(timeout=5.0)


def test_server_close_stops_accepting(leader):
    leader.server.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", leader.port), timeout=1.0).close()


def test_connect_gives_up_at_the_deadline():
    port = free_port()
    started = time.monotonic()
    channel = connect_to_leader("127.0.0.1", port, started + 0.3, threading.Event())
    elapsed = time.monotonic() - started
    assert channel is None
    assert 0.25 <= elapsed < 2.0


def test_connect_stops_when_told():
    stop = threading.Event()
    stop.set()
    started = time.monotonic()
    assert connect_to_leader("127.0.0.1", free_port(), started + 30, stop) is None
    assert time.monotonic() - started < 1.0


def test_connect_retries_until_the_leader_is_up():
    port = free_port()
    events: queue.Queue = queue.Queue()
    servers = []
    timer = threading.Timer(
        0.2, lambda: servers.append(ControlServer(port, events, 60.0, lambda _message: None))
    )
    timer.start()
    try:
        channel = connect_to_leader("127.0.0.1", port, time.monotonic() + 5.0, threading.Event())
        assert channel is not None
        channel.send(hello_message("algo-9"))
        assert next_event(events) == WorkerHello("algo-9")
        channel.close()
    finally:
        timer.join()
        for server in servers:
            server.close()
