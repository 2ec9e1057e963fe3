"""Peers that stop reading (a frozen host, a partition) hold nothing up, over real TCP on
127.0.0.1: the leader's sends to such a worker are bounded, its close of a lost worker's
connection resets it instead of lingering, and a worker's own messages never wait behind its
ranks' output."""

import os
import queue
import socket
import threading
import time

from ringleader.wire.control import Liveness
from ringleader.wire.events import LeaderLost, LeaderMessage, WorkerLost
from ringleader.wire.leader_link import LeaderLink
from ringleader.wire.messages import PULSE_LINK, Bye, Exit, Launched
from ringleader.wire.protocol import Channel, output_frame
from tests.unit.test_core_control import FAST, Leader, next_event

SEND_BOUND = 0.5  # the leader's ringleader_leader_timeout in the first test
# Far more than any bounded send takes, however loaded the machine: a send that is not bounded
# never returns at all.
ROOM = 10.0


def connected_pair(server: socket.socket) -> tuple[Channel, socket.socket]:
    ours = Channel(socket.create_connection(server.getsockname()))
    theirs, _ = server.accept()
    return ours, theirs


def test_a_worker_that_stops_reading_cannot_hold_up_the_leaders_sends() -> None:
    """Its receive window fills; each send then fails after ringleader_leader_timeout at most,
    and the worker's connection is dropped (so the next message does not wait on it again)."""
    leader = Leader(Liveness(interval=600.0, timeout=SEND_BOUND))
    longest = 0.0

    def broadcast_until_dropped() -> None:
        nonlocal longest
        while leader.events.empty():
            before = time.monotonic()
            leader.server.broadcast(Exit(75, "x" * 900))
            longest = max(longest, time.monotonic() - before)

    try:
        leader.join("algo-2")  # says hello, then never reads
        sender = threading.Thread(target=broadcast_until_dropped, daemon=True)
        sender.start()
        sender.join(60.0)
        assert not sender.is_alive(), "a send to a worker that does not read never returned"
        dropped = next_event(leader.events)
        assert isinstance(dropped, WorkerLost), dropped
        assert dropped.host == "algo-2" and "control connection closed" in dropped.reason
        assert SEND_BOUND * 0.9 <= longest < SEND_BOUND + ROOM  # it did block, then gave up
    finally:
        leader.close()


def leader_side_states(leader_port: int, worker: Channel) -> set[str]:
    """TCP states of the leader's end of `worker`'s connection, as /proc/net/tcp shows them
    (hex codes: 01 established, 05 FIN-WAIT-2, ...; nothing once the socket is gone)."""
    with socket.socket(fileno=os.dup(worker.fileno())) as same:
        worker_port = same.getsockname()[1]
    states = set()
    with open("/proc/net/tcp") as table:
        next(table)
        for row in table:
            fields = row.split()
            local, remote, state = fields[1], fields[2], fields[3]
            if int(local.split(":")[1], 16) == leader_port and (
                int(remote.split(":")[1], 16) == worker_port
            ):
                states.add(state)
    return states


def test_the_leaders_close_does_not_linger_after_the_verdict() -> None:
    """The verdict still reaches every worker's kernel, a lost one's too (a frozen host reads
    it when it runs again); then the leader's end of each connection is gone at once (reset),
    not left closing gracefully on a peer that may never read or answer."""
    leader = Leader(FAST)
    try:
        silent = leader.join("algo-2")
        leader.connect("algo-2", PULSE_LINK)  # and then never a pulse: lost after a while
        alive = leader.join("algo-3")
        lost = next_event(leader.events, timeout=ROOM)
        assert isinstance(lost, WorkerLost) and lost.host == "algo-2", lost
        leader.server.finish(75, "the verdict\n")
        leader.server.close()
        for worker in (silent, alive):
            assert worker.receive_message(timeout=ROOM) == Exit(75, "the verdict\n")
        # Neither worker has closed its end: a graceful close would leave the leader's end in
        # FIN-WAIT-2 for as long as the worker does not answer.
        deadline = time.monotonic() + ROOM
        left = {"?"}
        while left and time.monotonic() < deadline:
            left = leader_side_states(leader.port, silent) | leader_side_states(leader.port, alive)
            time.sleep(0.05)
        assert not left, f"the leader's end lingers in TCP states {left}"
    finally:
        leader.close()


def test_a_workers_own_messages_never_wait_behind_its_ranks_output() -> None:
    """The leader does not read (partitioned): the relay of rank output blocks in its send,
    yet the worker's own sends return at once; they go out, in order, once the leader reads."""
    server = socket.create_server(("127.0.0.1", 0))
    control, leader_control = connected_pair(server)
    pulse, leader_pulse = connected_pair(server)
    events: queue.Queue = queue.Queue()
    link = LeaderLink(
        "algo-2", "algo-1", control, pulse, Liveness(interval=600.0, timeout=600.0), events
    )
    link.hello()
    frame = output_frame({"lines": ["y" * 4000]})
    relayed = 0
    blocked = threading.Event()

    def relay() -> None:  # what the output relay does with each batch of rank output
        nonlocal relayed
        while not blocked.is_set():
            link.channel.send_frame(frame)
            relayed += 1

    relay_thread = threading.Thread(target=relay, daemon=True)
    relay_thread.start()
    try:
        count = -1
        while count != relayed:  # until the relay makes no more progress: it is blocked
            count = relayed
            relay_thread.join(0.5)
        blocked.set()
        sending = threading.Thread(target=link.send, args=(Bye("algo-2"),), daemon=True)
        sending.start()
        sending.join(ROOM)
        assert not sending.is_alive(), "the worker's own send waited behind the output relay"
        assert relay_thread.is_alive()  # still held up: the Bye went nowhere yet
        received = Channel(leader_control)
        frames = [received.receive_frame(timeout=ROOM)]
        while b'"bye"' not in frames[-1]:
            frames.append(received.receive_frame(timeout=ROOM))
        relay_thread.join(ROOM)
        assert b'"hello"' in frames[0]
        assert frames[1:-1] == [frame] * relayed  # every relayed batch, then the Bye
        assert events.empty()
    finally:
        link.close()
        for closable in (leader_control, leader_pulse, server):
            closable.close()


class UnreadUntil(Channel):
    """A control connection whose reader does not run until `ready` is set (a frozen host's
    reader, which runs again only after its pulse process has seen the leader's end)."""

    def __init__(self, sock: socket.socket, ready: threading.Event) -> None:
        super().__init__(sock)
        self._ready = ready

    def receive_frame(self, timeout: float | None, limit: int | None = None) -> bytes:
        self._ready.wait(ROOM)
        return super().receive_frame(timeout, limit)


def test_what_the_leader_sent_before_it_went_comes_before_its_loss(monkeypatch) -> None:
    """A worker that runs again after being frozen finds the leader's verdict and the end of
    both connections; even when its pulse process reports the end first, the verdict is what
    it acts on."""
    pulse_loss_seen = threading.Event()
    report_pulse_loss = LeaderLink._pulse_lost

    def seen_then_reported(link: LeaderLink, reason: str) -> None:
        pulse_loss_seen.set()
        report_pulse_loss(link, reason)

    monkeypatch.setattr(LeaderLink, "_pulse_lost", seen_then_reported)
    server = socket.create_server(("127.0.0.1", 0))
    control_socket = socket.create_connection(server.getsockname())
    leader_control, _ = server.accept()
    pulse, leader_pulse = connected_pair(server)
    events: queue.Queue = queue.Queue()
    slow = Liveness(interval=ROOM, timeout=4 * ROOM)  # the reader gets up to ROOM to catch up
    control = UnreadUntil(control_socket, pulse_loss_seen)
    link = LeaderLink("algo-2", "algo-1", control, pulse, slow, events)
    link.hello()
    try:
        Channel(leader_control).send(Launched())
        Channel(leader_control).send(Exit(75, "the verdict\n"))
        leader_control.close()
        leader_pulse.close()
        assert next_event(events, timeout=ROOM) == LeaderMessage(Launched())
        assert next_event(events, timeout=ROOM) == LeaderMessage(Exit(75, "the verdict\n"))
        assert isinstance(next_event(events, timeout=ROOM), LeaderLost)
    finally:
        link.close()
        server.close()
