"""The leader's control server, pulses, and a worker's links to it, over real TCP on 127.0.0.1."""

import contextlib
import os
import queue
import re
import signal
import socket
import threading
import time

import pytest

from ringleader.core.errors import ConfigError
from ringleader.core.records import RankRecord
from ringleader.core.timeline import Mark
from ringleader.wire.control import (
    Admission,
    ControlServer,
    LeaderAddress,
    Liveness,
    bye_message,
    connect_to_leader,
    hello_message,
    listen_backlog,
)
from ringleader.wire.events import (
    LeaderLost,
    LeaderMessage,
    RankEnded,
    RankStarted,
    SigtermReceived,
    WorkerBye,
    WorkerHello,
    WorkerLost,
)
from ringleader.wire.leader_link import LeaderLink
from ringleader.wire.liveness import PULSE_FRAME
from ringleader.wire.messages import (
    CONTROL_LINK,
    PULSE_LINK,
    Bye,
    Greeting,
    Join,
    Launched,
    RankEnd,
    RankStart,
    Refused,
    Sigterm,
    Terminate,
)
from ringleader.wire.protocol import Channel, ChannelClosed, output_frame
from ringleader.wire.pulse_process import STOP_SECONDS, PulseHub
from tests.unit.pulse_peer import Pulse

WORKERS = ("algo-2", "algo-3")
SLOW = Liveness(interval=60.0, timeout=600.0)  # pulses play no part
FAST = Liveness(interval=0.05, timeout=0.3)
QUIET = 1.0  # how long nothing must happen, where that is what a test checks
PULSE_PROCESS_START = 30.0  # at most, for the leader's pulse process to send its first pulse
JOB = "job-1"  # the job every leader here leads
GREETING_TIMEOUT = 5.0


def address(
    port: int, job: str = JOB, greeting_timeout: float = GREETING_TIMEOUT, secret=None
) -> LeaderAddress:
    return LeaderAddress("127.0.0.1", port, job, greeting_timeout, secret)


def join(port: int, host: str, link: str = CONTROL_LINK, deadline: float = 5.0, **where):
    """A worker's connection, joined."""
    joined = connect_to_leader(
        address(port, **where), host, link, time.monotonic() + deadline, threading.Event()
    )
    assert joined is not None
    return joined


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def next_event(events, timeout=5.0):
    return events.get(timeout=timeout)


def assert_no_event(events, within=QUIET):
    with pytest.raises(queue.Empty):
        unexpected = events.get(timeout=within)
        pytest.fail(f"unexpected event {unexpected!r}")


def record_of(rank, host, exit_code=3):
    return RankRecord(
        rank=rank,
        host=host,
        exit_code=exit_code,
        signal=None,
        started_at=100.0,
        ended_at=101.5,
        terminated=False,
        stderr_tail=("Traceback", "ValueError: x"),
    )


class Leader:
    def __init__(self, liveness=SLOW, addresses=frozenset({"127.0.0.1"}), admission=None):
        self.port = free_port()
        self.events: queue.Queue = queue.Queue()
        self.outputs: list[bytes] = []
        self.logs: queue.Queue[str] = queue.Queue()
        self.admission = admission or Admission(JOB)
        self.server = ControlServer(
            self.port,
            self.events,
            liveness,
            self.outputs.append,
            WORKERS,
            self.logs.put,
            self.admission,
            addresses_of=lambda _host: addresses,
        )
        self.channels: list[Channel] = []
        self.pulses: list[Pulse] = []

    def connect(self, host: str, link: str = CONTROL_LINK) -> Channel:
        channel = join(self.port, host, link, secret=self.admission.secret).channel
        self.channels.append(channel)
        return channel

    def join(self, host) -> Channel:
        channel = self.connect(host)
        channel.send(hello_message(host))
        assert next_event(self.events) == WorkerHello(host)
        return channel

    def next_log(self, timeout=5.0) -> str:
        return self.logs.get(timeout=timeout)

    def close(self):
        for pulse in self.pulses:
            pulse.stop()
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
    running = Leader(FAST)
    yield running
    running.close()


def assert_closed_by_the_leader(channel: Channel) -> None:
    with pytest.raises(ChannelClosed):
        channel.receive(timeout=5.0)


def test_hello_becomes_worker_hello(leader):
    leader.join("algo-2")
    assert leader.events.empty()


def test_hello_with_an_error(leader):
    channel = leader.connect("algo-3")
    channel.send(hello_message("algo-3", (78, "Configuration error in sagemaker_program: x")))
    assert next_event(leader.events) == WorkerHello(
        "algo-3", 78, "Configuration error in sagemaker_program: x"
    )


def test_rank_events_are_relayed(leader):
    channel = leader.join("algo-2")
    record = record_of(3, "algo-2")
    channel.send(RankStart(3, "algo-2"))
    channel.send(RankEnd(record))
    channel.send(Sigterm("algo-2"))
    channel.send(Bye("algo-2"))
    assert next_event(leader.events) == RankStarted(3, "algo-2")
    assert next_event(leader.events) == RankEnded(record)
    assert next_event(leader.events) == SigtermReceived("algo-2")
    assert next_event(leader.events) == WorkerBye("algo-2")


def test_a_bye_carries_the_workers_last_timeline_marks(leader):
    channel = leader.join("algo-2")
    marks = (Mark("algo-2", "verdict received", 12.5), Mark("algo-2", "exited", 12.75))
    channel.send(bye_message("algo-2", marks))
    assert next_event(leader.events) == WorkerBye("algo-2", marks)


def test_output_frames_are_handed_on_still_encoded_and_in_order(leader):
    channel = leader.join("algo-2")
    frames = [
        output_frame({"rank": 2, "host": "algo-2", "stream": "stdout", "lines": [f"line {n}"]})
        for n in range(3)
    ]
    for frame in frames:
        channel.send_frame(frame)
    channel.send(Bye("algo-2"))
    # The frames and the bye are handled in order on the connection's thread.
    assert next_event(leader.events) == WorkerBye("algo-2")
    assert leader.outputs == frames


def test_unknown_message_type_is_logged_and_ignored(leader):
    channel = leader.join("algo-2")
    channel.send_frame(b'{"type":"from-the-future","x":1}')
    channel.send(Bye("algo-2"))
    assert next_event(leader.events) == WorkerBye("algo-2")
    assert "from-the-future" in leader.next_log()


def test_finish_reaches_connected_and_later_workers(leader):
    early = leader.join("algo-2")
    leader.server.finish(3, "Rank 4 on host algo-3 exited with code 3.\n")
    expected = {"type": "exit", "code": 3, "failure": "Rank 4 on host algo-3 exited with code 3.\n"}
    assert early.receive(timeout=5.0) == expected
    late = leader.join("algo-3")
    assert late.receive(timeout=5.0) == expected


def test_broadcast(leader):
    channels = [leader.join(host) for host in WORKERS]
    leader.server.broadcast(Terminate(5.0))
    for channel in channels:
        assert channel.receive(timeout=5.0) == {"type": "terminate", "grace": 5.0}


def test_closing_the_client_is_worker_lost(leader):
    channel = leader.join("algo-2")
    before = time.time()
    channel.close()
    event = next_event(leader.events)
    assert isinstance(event, WorkerLost)
    assert event.host == "algo-2"
    assert "control connection closed" in event.reason
    assert event.protocol_error is False
    assert before <= event.last_heard <= time.time()


@pytest.mark.parametrize(
    "frame",
    [
        b"not json",
        b"{not json",
        b'{"host": "algo-2"}',  # no type
        b"Onot json",  # an output frame that does not decode
        b'O{"rank": 1}',  # an output frame without its fields
        b'{"type": "rank-end", "record": {"rank": 1}}',  # a record without its fields
        b'{"type": "rank-start", "rank": "one", "host": "algo-2"}',
    ],
)
def test_garbled_frame_is_worker_lost_by_protocol_error(frame):
    # The real output printer: it decodes output frames, as on the leader.
    from ringleader.config.selection import ALL_RANKS
    from ringleader.output.printer import OutputPrinter

    port = free_port()
    events: queue.Queue = queue.Queue()
    logs: queue.Queue[str] = queue.Queue()
    printer = OutputPrinter(ALL_RANKS, ALL_RANKS, None)
    server = ControlServer(
        port,
        events,
        SLOW,
        printer.deliver,
        WORKERS,
        logs.put,
        Admission(JOB),
        addresses_of=lambda _host: {"127.0.0.1"},
    )
    channel = join(port, "algo-2").channel
    try:
        channel.send(hello_message("algo-2"))
        assert next_event(events) == WorkerHello("algo-2")
        channel.send_frame(frame)
        event = next_event(events)
        assert isinstance(event, WorkerLost)
        assert (event.host, event.protocol_error) == ("algo-2", True)
        assert "protocol error" in event.reason
        assert "protocol error from algo-2" in logs.get(timeout=5.0)
        assert_closed_by_the_leader(channel)
    finally:
        channel.close()
        server.close()


@pytest.mark.parametrize(
    "message",
    [
        RankStart(4, "algo-3"),
        RankEnd(record_of(4, "algo-3")),
    ],
)
def test_rank_event_for_another_host_is_a_protocol_error(leader, message):
    channel = leader.join("algo-2")
    channel.send(message)
    event = next_event(leader.events)
    assert isinstance(event, WorkerLost)
    assert (event.host, event.protocol_error) == ("algo-2", True)
    assert "algo-3" in event.reason
    assert "protocol error from algo-2" in leader.next_log()
    assert_closed_by_the_leader(channel)
    assert leader.events.empty()  # in particular no RankStarted/RankEnded for algo-3


def greeted(port: int) -> tuple[Channel, Greeting]:
    """A raw connection to the control port, and the leader's greeting on it."""
    channel = Channel(socket.create_connection(("127.0.0.1", port), timeout=5.0))
    greeting = channel.receive_message(timeout=5.0)
    assert isinstance(greeting, Greeting)
    return channel, greeting


def assert_refused(channel: Channel, why: str) -> None:
    answer = channel.receive_message(timeout=5.0)
    assert isinstance(answer, Refused) and why in answer.reason, answer
    assert_closed_by_the_leader(channel)


def test_a_connection_that_does_not_join_is_refused(leader):
    channel, _ = greeted(leader.port)
    channel.send(Bye("algo-2"))
    assert_refused(channel, "expected a join, got 'bye'")
    assert "refused a connection from 127.0.0.1: expected a join" in leader.next_log()
    assert leader.events.empty()


def test_something_else_than_a_hello_after_the_welcome_is_a_protocol_error(leader):
    channel = leader.connect("algo-2")
    channel.send(Bye("algo-2"))
    event = next_event(leader.events)
    assert isinstance(event, WorkerLost) and event.protocol_error
    assert "expected a hello from algo-2, got 'bye'" in event.reason


@pytest.mark.parametrize("link", [CONTROL_LINK, PULSE_LINK])
def test_a_join_for_another_job_is_refused(leader, link):
    channel, _ = greeted(leader.port)
    channel.send(Join("algo-2", "another-job", link, "n"))
    assert_refused(channel, "it joins another job, 'another-job'")
    assert leader.events.empty()
    leader.join("algo-2")  # the job's own worker is not held up by it


def test_a_join_from_a_host_that_is_not_a_worker_is_refused(leader):
    channel, _ = greeted(leader.port)
    channel.send(Join("intruder", JOB, PULSE_LINK, "n"))
    assert_refused(channel, "'intruder' is not one of the job's worker hosts")
    assert "refused a connection from 127.0.0.1" in leader.next_log()
    assert leader.events.empty()


def test_a_worker_whose_name_is_wrong_reports_its_error(leader):
    """Its own name is not in the job's host list: it is known by its address, for its
    error's sake."""
    reporting = leader.connect("algo-99")
    reporting.send(hello_message("algo-99", (78, "Configuration error in current_host: x")))
    assert next_event(leader.events) == WorkerHello(
        "algo-2", 78, "Configuration error in current_host: x"
    )


def test_a_host_not_in_the_job_may_report_nothing_but_an_error(leader):
    posing = leader.connect("algo-98")  # from a worker's address (every one is 127.0.0.1)
    posing.send(hello_message("algo-98"))
    assert_closed_by_the_leader(posing)
    assert any("may report only its error" in line for line in drain(leader.logs))
    assert leader.events.empty()


def drain(lines: queue.Queue) -> list[str]:
    found = []
    while True:
        try:
            found.append(lines.get(timeout=QUIET))
        except queue.Empty:
            return found


@pytest.mark.parametrize("link", [CONTROL_LINK, PULSE_LINK])
def test_a_join_from_an_address_that_is_not_the_workers_is_refused(link):
    impostor_target = Leader(addresses=frozenset({"10.9.9.9"}))
    try:
        channel, _ = greeted(impostor_target.port)
        channel.send(Join("algo-2", JOB, link, "n"))
        assert_refused(channel, "claims to be algo-2, but algo-2 resolves to 10.9.9.9")
        assert "refused a connection from 127.0.0.1" in impostor_target.next_log()
        assert impostor_target.events.empty()
    finally:
        impostor_target.close()


@pytest.mark.parametrize("link", [CONTROL_LINK, PULSE_LINK])
def test_a_second_join_never_replaces_a_live_link(leader, link):
    """Issue 26: a second hello for a live worker replaced its link, and the job died."""
    first = leader.join("algo-2")
    if link == PULSE_LINK:
        leader.connect("algo-2", PULSE_LINK)
    with pytest.raises(ConfigError, match="refused this host: algo-2 joined already"):
        join(leader.port, "algo-2", link)
    leader.server.broadcast(Launched())
    assert first.receive(timeout=5.0) == {"type": "launched"}  # the first link lives on
    first.send(Bye("algo-2"))
    assert next_event(leader.events) == WorkerBye("algo-2")


def test_a_worker_that_left_cannot_join_again(leader):
    leader.join("algo-2").close()
    event = next_event(leader.events)
    assert isinstance(event, WorkerLost) and event.host == "algo-2"
    with pytest.raises(ConfigError, match="an entry point that restarted is a lost host"):
        join(leader.port, "algo-2")


def test_server_close_disconnects_workers(leader):
    channel = leader.join("algo-2")
    leader.server.close()
    assert_closed_by_the_leader(channel)


def test_server_close_stops_accepting(leader):
    leader.server.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", leader.port), timeout=1.0).close()


# Pulses: liveness on a second connection per worker.


def open_pulse(leader: Leader, host: str) -> Channel:
    return leader.connect(host, PULSE_LINK)


def test_a_silent_pulse_connection_is_worker_lost(fast_leader):
    before = time.time()
    open_pulse(fast_leader, "algo-2")  # and then nothing
    event = next_event(fast_leader.events)
    assert isinstance(event, WorkerLost)
    assert event.host == "algo-2"
    assert "no pulse for" in event.reason
    assert "ringleader_leader_timeout" in event.reason
    assert event.protocol_error is False
    assert before <= event.last_heard <= time.time()


def test_a_pulsing_worker_is_not_lost(fast_leader):
    channel = open_pulse(fast_leader, "algo-2")
    # The leader's pulse process is up: it is a Python start-up of its own, begun with the
    # server, which on a busy machine took all of QUIET (no pulse reached the worker at all).
    assert channel.receive(timeout=PULSE_PROCESS_START) == {"type": "pulse"}
    worker_lost: queue.Queue = queue.Queue()
    pulse = Pulse(
        channel,
        FAST.interval,
        FAST.timeout,
        "ringleader_leader_timeout",
        lambda reason, _last_heard: worker_lost.put(reason),
    )
    fast_leader.pulses.append(pulse)
    started = time.time()
    assert_no_event(fast_leader.events)  # more than three times the timeout
    assert worker_lost.empty()  # and the leader's pulses reached the worker
    assert pulse.last_heard > started
    pulse.stop()  # the worker goes away: now it is lost
    event = next_event(fast_leader.events)
    assert isinstance(event, WorkerLost)
    assert event.host == "algo-2"
    assert "pulse connection closed" in event.reason


def test_the_leader_sends_pulses_at_the_interval(fast_leader):
    channel = open_pulse(fast_leader, "algo-2")
    arrivals = []
    for _ in range(4):
        assert channel.receive(timeout=2.0) == {"type": "pulse"}
        arrivals.append(time.monotonic())
    span = arrivals[-1] - arrivals[0]  # three intervals of 0.05 s
    assert 0.1 <= span < 1.5


def test_no_pulse_on_the_control_connection(fast_leader):
    channel = fast_leader.join("algo-2")
    with pytest.raises(TimeoutError):
        channel.receive(timeout=3 * FAST.timeout)
    # and a control connection without pulses is not lost for being quiet
    assert fast_leader.events.empty()


# The worker's side: LeaderLink.


class Worker:
    def __init__(self, leader: Leader, host: str, liveness=FAST, pulse: Channel | None = None):
        self.events: queue.Queue = queue.Queue()
        self.link = LeaderLink(
            host,
            "algo-1",
            leader.connect(host),
            pulse if pulse is not None else leader.connect(host, PULSE_LINK),
            liveness,
            self.events,
        )
        self.link.hello()


def test_leader_link_says_hello_and_receives_messages():
    # Pulses must flow both ways for the whole quiet time, which is longer than the timeout;
    # the timeout leaves room for a loaded test machine.
    roomy = Liveness(interval=0.05, timeout=1.0)
    leader = Leader(roomy)
    worker = Worker(leader, "algo-2", liveness=roomy)
    try:
        assert next_event(leader.events) == WorkerHello("algo-2")
        leader.server.broadcast(Launched())
        assert next_event(worker.events) == LeaderMessage(Launched())
        worker.link.send(Bye("algo-2"))
        assert next_event(leader.events) == WorkerBye("algo-2")
        # Both ends keep pulsing: neither is lost.
        assert_no_event(leader.events, within=1.5 * roomy.timeout)
        assert worker.events.empty()
    finally:
        worker.link.close()
        leader.close()


def test_leader_link_close_reports_nothing(fast_leader):
    worker = Worker(fast_leader, "algo-2")
    assert next_event(fast_leader.events) == WorkerHello("algo-2")
    worker.link.close()
    assert_no_event(worker.events, within=3 * FAST.timeout)
    worker.link.send(Bye("algo-2"))  # sending on a closed link does not raise


def test_leader_closing_is_leader_lost(fast_leader):
    worker = Worker(fast_leader, "algo-2")
    try:
        assert next_event(fast_leader.events) == WorkerHello("algo-2")
        fast_leader.server.close()
        event = next_event(worker.events)
        assert isinstance(event, LeaderLost)
        assert "closed" in event.reason
        assert_no_event(worker.events, within=3 * FAST.timeout)  # reported once
    finally:
        worker.link.close()


def test_leader_whose_pulses_stop_is_leader_lost():
    # The connections stay up but the leader sends no pulse (a hung leader process whose
    # kernel still acknowledges): lost after FROZEN_FACTOR timeouts.
    mute = Leader(Liveness(interval=600.0, timeout=600.0))
    try:
        worker = Worker(mute, "algo-2", liveness=FAST)
        assert next_event(mute.events) == WorkerHello("algo-2")
        event = next_event(worker.events)
        assert isinstance(event, LeaderLost)
        assert "its kernel still answers: frozen or starved" in event.reason
        assert "ringleader_leader_timeout" in event.reason
        worker.link.close()
    finally:
        mute.close()


# Connecting.


def test_connect_gives_up_at_the_deadline():
    port = free_port()
    started = time.monotonic()
    joined = connect_to_leader(
        address(port), "algo-2", CONTROL_LINK, started + 0.3, threading.Event()
    )
    elapsed = time.monotonic() - started
    assert joined is None
    assert 0.25 <= elapsed < 2.0


def test_connect_stops_when_told():
    stop = threading.Event()
    stop.set()
    started = time.monotonic()
    assert (
        connect_to_leader(address(free_port()), "algo-2", CONTROL_LINK, started + 30, stop) is None
    )
    assert time.monotonic() - started < 1.0


def test_connect_retries_until_the_leader_is_up():
    port = free_port()
    events: queue.Queue = queue.Queue()
    servers = []

    def start_leader():
        servers.append(
            ControlServer(
                port,
                events,
                SLOW,
                lambda _frame: None,
                ["algo-9"],
                lambda _line: None,
                Admission(JOB),
                addresses_of=lambda _host: {"127.0.0.1"},
            )
        )

    timer = threading.Timer(0.2, start_leader)
    timer.start()
    try:
        channel = join(port, "algo-9").channel
        channel.send(hello_message("algo-9"))
        assert next_event(events) == WorkerHello("algo-9")
        channel.close()
    finally:
        timer.join()
        for server in servers:
            server.close()


def loss_of_a_silent_peer(setting: str) -> tuple[str, float]:
    """A pulse to a peer that never reads or writes (only its kernel answers): why it was
    declared lost, and how long that took."""
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    lost: queue.Queue = queue.Queue()
    started = time.monotonic()
    pulse = Pulse(Channel(client), 0.05, 0.3, setting, lambda r, t: lost.put(r))
    try:
        return lost.get(timeout=10.0), time.monotonic() - started
    finally:
        pulse.stop()
        peer.close()
        server.close()


def test_a_silent_peer_whose_kernel_still_answers_gets_more_time_then_is_lost():
    """Starved, not partitioned: its TCP stack acknowledges our pulses, so it is lost only after
    FROZEN_FACTOR timeouts of silence, with a message saying so."""
    from ringleader.wire.liveness import FROZEN_FACTOR

    reason, waited = loss_of_a_silent_peer("ringleader_leader_timeout")
    assert "its kernel still answers: frozen or starved" in reason
    assert f"{FROZEN_FACTOR:g} x ringleader_leader_timeout" in reason
    assert waited >= FROZEN_FACTOR * 0.3 - 0.05


def test_a_wall_clock_step_neither_fakes_nor_hides_a_silence(monkeypatch):
    """NTP stepping the wall clock an hour ahead while a starved peer is silent: the silence
    is still the real one (monotonic), so the peer still gets FROZEN_FACTOR timeouts."""
    from ringleader.wire import liveness

    wall = time.time
    monkeypatch.setattr(liveness.time, "time", lambda: wall() + 3600.0)
    reason, waited = loss_of_a_silent_peer("setting")
    assert waited >= liveness.FROZEN_FACTOR * 0.3 - 0.05, reason
    silent = re.search(r"no pulse for (\d+) s", reason)
    assert silent is not None and int(silent[1]) < 60, reason  # seconds of silence, not an hour


def test_the_peer_kernel_answers_keepalive_probes_while_we_send_nothing():
    """A pulse process starved of CPU sends nothing to acknowledge; the kernel's keepalive
    probes still get the peer's ACKs, so last_ack_age stays fresh (it only ages without)."""
    server = socket.create_server(("127.0.0.1", 0))
    asked = Channel(socket.create_connection(server.getsockname()))
    asked_peer, _ = server.accept()
    silent = Channel(socket.create_connection(server.getsockname()))
    silent_peer, _ = server.accept()
    try:
        asked.ask_peer_kernel_when_idle(1)
        for channel in (asked, silent):
            channel.send_frame(b"x")  # acknowledged at once; then nothing more is sent
        sent = time.monotonic()
        deadline = sent + 15.0
        answered = False
        while not answered and time.monotonic() < deadline:
            # an ACK newer than our only send can only answer a keepalive probe
            answered = time.monotonic() - sent - (asked.last_ack_age() or 0.0) > 0.5
            time.sleep(0.05)
        assert answered, f"no keepalive answer in 15 s (ACK age {asked.last_ack_age()})"
        elapsed = time.monotonic() - sent
        assert (silent.last_ack_age() or 0.0) >= elapsed - 0.5  # the control: it only aged
    finally:
        for closable in (asked, silent, asked_peer, silent_peer, server):
            closable.close()


def test_one_pulse_process_serves_every_peer_and_names_the_one_lost():
    """The leader's pulse links to all its workers live in one child process: a peer that goes
    away is reported under its own host, the others keep pulsing, and stopping the hub gives a
    summary per host without reporting a loss."""
    server = socket.create_server(("127.0.0.1", 0))
    hub = PulseHub(FAST.interval, FAST.timeout, "test_timeout")
    lost: queue.Queue = queue.Queue()
    peers = {}
    try:
        for host in ("algo-2", "algo-3"):
            ours = Channel(socket.create_connection(server.getsockname()))
            theirs, _ = server.accept()
            peers[host] = Pulse(Channel(theirs), FAST.interval, 5.0, "peer", lambda *_: None)
            hub.watch(host, ours, lambda reason, _heard, host=host: lost.put((host, reason)))
        time.sleep(10 * FAST.interval)  # pulses flow both ways on both links
        assert lost.empty()
        peers["algo-3"].stop()
        host, reason = lost.get(timeout=10)
        assert host == "algo-3" and "pulse connection closed" in reason, reason
        time.sleep(10 * FAST.interval)
        assert lost.empty(), "the live peer was reported lost"
        summaries = hub.stop()
        assert set(summaries) == {"algo-2", "algo-3"}
        assert "pulses, gap p50" in summaries["algo-2"], summaries
    finally:
        hub.stop()
        for pulse in peers.values():
            pulse.stop()
        server.close()


def test_stopping_the_pulse_process_gives_the_summaries_then_it_closes_the_links_and_ends():
    """stop() returns once the child has reported; the child then closes each link (its peer
    sees the end) and ends by itself, reaped without anyone waiting for it."""
    server = socket.create_server(("127.0.0.1", 0))
    hub = PulseHub(FAST.interval, FAST.timeout, "test_timeout")
    ours = Channel(socket.create_connection(server.getsockname()))
    theirs, _ = server.accept()
    try:
        hub.watch("algo-2", ours, lambda *_: None)
        assert set(hub.stop()) == {"algo-2"}
        theirs.settimeout(10)
        while theirs.recv(4096):  # pulses, then the end of the connection
            pass
        deadline = time.monotonic() + 10
        while hub._child.returncode is None:  # reaped by the hub's reader
            assert time.monotonic() < deadline, "the pulse process did not end"
            time.sleep(0.01)
    finally:
        theirs.close()
        server.close()


def test_a_stop_while_the_pulse_process_still_starts_waits_for_it_to_run():
    """A Python start-up on a starved machine takes seconds: a stop that comes first must not
    kill the child before it ran (seen under the CI's load: no summaries). The child is held
    (SIGSTOP) until STOP_SECONDS + 1 s after its start, past the stop's own bound."""
    server = socket.create_server(("127.0.0.1", 0))
    hub = PulseHub(FAST.interval, FAST.timeout, "test_timeout")
    os.kill(hub._child.pid, signal.SIGSTOP)
    release = threading.Timer(STOP_SECONDS + 1, os.kill, (hub._child.pid, signal.SIGCONT))
    release.start()
    ours = Channel(socket.create_connection(server.getsockname()))
    theirs, _ = server.accept()
    try:
        hub.watch("algo-2", ours, lambda *_: None)
        assert set(hub.stop()) == {"algo-2"}
    finally:
        release.cancel()
        with contextlib.suppress(ProcessLookupError):  # reaped already, once it had run
            os.kill(hub._child.pid, signal.SIGCONT)
        theirs.close()
        server.close()


def test_the_summaries_count_every_pulse_that_arrived_before_the_stop():
    """Links handed over just before the stop, their peers' pulses already waiting on them:
    each summary counts them. Taken on the child's main thread before its loop's thread had
    run, summaries counted no pulse on most such links (test_control_scale checks every
    worker's pulses in them: a pulse process behind on a busy machine would fail it)."""
    hub = PulseHub(SLOW.interval, SLOW.timeout, "test_timeout")
    peers = []
    try:
        for index in range(8):
            ours, theirs = socket.socketpair()
            peers.append(theirs)
            theirs.sendall(2 * (PULSE_FRAME + b"\n"))
            hub.watch(f"algo-{index}", Channel(ours), lambda *_: None)
        summaries = hub.stop()
        assert len(summaries) == 8, summaries
        assert all(summary.startswith("2 pulses, ") for summary in summaries.values()), summaries
    finally:
        for peer in peers:
            peer.close()


def test_the_pulse_process_outlives_a_stop_signal_sent_to_every_process_of_the_job():
    """Slurm's scancel and time limit send SIGTERM to every process of the step at once: the
    pulse process must go on until its parent ends it, or its peer takes this host for lost."""
    server = socket.create_server(("127.0.0.1", 0))
    hub = PulseHub(FAST.interval, FAST.timeout, "test_timeout")
    ours = Channel(socket.create_connection(server.getsockname()))
    theirs, _ = server.accept()
    lost: queue.Queue = queue.Queue()
    peer = None
    try:
        hub.watch("algo-2", ours, lambda reason, _heard: lost.put(reason))
        # The child pulses: its handlers are in place. Its peer starts only now: started
        # before, it took the child's own start-up on a busy machine (longer than its
        # FAST.timeout) for a loss, and no pulse came for it.
        channel = Channel(theirs)
        assert channel.receive(timeout=PULSE_PROCESS_START) == {"type": "pulse"}
        peer = Pulse(channel, FAST.interval, FAST.timeout, "peer", lambda *a: lost.put(a))
        for signum in (signal.SIGTERM, signal.SIGINT):
            os.kill(hub._child.pid, signum)
        time.sleep(QUIET + FAST.timeout)
        assert hub._child.poll() is None, "the pulse process ended on a stop signal"
        assert lost.empty(), lost.get()
        assert "algo-2" in hub.stop()
    finally:
        hub.stop()
        if peer is not None:
            peer.stop()
        theirs.close()
        server.close()


def test_the_listen_queue_holds_every_workers_two_connections_at_once():
    """bench/control_plane.py: with a queue of 256, 174 of 1,024 simulated workers got no
    greeting in time and took the port for another job's."""
    assert listen_backlog(2) == 256
    assert listen_backlog(1024) >= 2 * 1024
    assert listen_backlog(4096) >= 2 * 4096


def test_a_workers_hello_may_wait_for_its_health_checks_then_not_longer() -> None:
    """Between its welcome and its hello a worker runs its checks (ringleader_health_timeout):
    the leader waits that long beyond ringleader_leader_timeout, then drops it, saying why."""
    patience = Admission(JOB, checks_within=3.0)
    running = Leader(Liveness(interval=60.0, timeout=0.2), admission=patience)
    try:
        patient = running.connect("algo-2")
        silent = running.connect("algo-3")
        time.sleep(0.5)  # longer than the leader timeout alone: still admitted
        patient.send(hello_message("algo-2"))
        assert next_event(running.events) == WorkerHello("algo-2")
        lost = next_event(running.events, timeout=10.0)
        assert isinstance(lost, WorkerLost) and lost.host == "algo-3"
        assert lost.reason == (
            "control connection closed (no hello within 3.2 s (ringleader_leader_timeout and "
            "ringleader_health_timeout))"
        )
        silent.close()
    finally:
        running.close()
