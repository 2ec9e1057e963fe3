"""One thread accepting and reading every connection (wire.server_loop), on loopback."""

import contextlib
import queue
import socket
import threading

import pytest

from ringleader.wire.protocol import Channel, ChannelClosed
from ringleader.wire.server_loop import CallPool, ServerLoop

WAIT = 5.0


class Recorder:
    """A reader that records what it is told; `then` runs on the loop after each frame."""

    def __init__(self, then=None) -> None:
        self.got: queue.Queue = queue.Queue()
        self._then = then

    def frame(self, channel: Channel, frame: bytes) -> None:
        self.got.put(frame)
        if self._then is not None:
            self._then(channel, frame)

    def ended(self, channel: Channel, error: ChannelClosed | TimeoutError) -> None:
        self.got.put(error)
        channel.close()


class Rig:
    def __init__(self, make_reader, limit=None, timeout=None) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.readers: queue.Queue = queue.Queue()
        self.logs: list[str] = []

        def accepted(connection: socket.socket) -> None:
            reader = make_reader()
            self.readers.put(reader)
            self.loop.read(Channel(connection), reader, limit, timeout)

        self.loop = ServerLoop(
            self.listener, accepted, lambda error: None, "test-loop", self.logs.append
        )
        self.loop.start()

    def connect(self) -> tuple[socket.socket, Recorder]:
        sock = socket.create_connection(("127.0.0.1", self.port))
        return sock, self.readers.get(timeout=WAIT)


@pytest.fixture
def rigs():
    made: list[Rig] = []

    def make(*args, **kwargs) -> Rig:
        made.append(Rig(*args, **kwargs))
        return made[-1]

    yield make
    for rig in made:
        rig.loop.stop()


def test_frames_arrive_whole_and_in_order_from_many_connections(rigs):
    rig = rigs(Recorder)
    peers = [rig.connect() for _ in range(20)]
    for index, (sock, _) in enumerate(peers):
        sock.sendall(b"a%d\nb" % index)  # the second frame in two pieces
    for index, (sock, _) in enumerate(peers):
        sock.sendall(b"%d\n" % index)
    for index, (sock, reader) in enumerate(peers):
        assert reader.got.get(timeout=WAIT) == b"a%d" % index
        assert reader.got.get(timeout=WAIT) == b"b%d" % index
        sock.close()
        assert isinstance(reader.got.get(timeout=WAIT), ChannelClosed)


def test_a_connection_past_its_deadline_ends_with_timeout(rigs):
    rig = rigs(Recorder, timeout=0.3)
    sock, reader = rig.connect()
    sock.sendall(b"partial")
    assert isinstance(reader.got.get(timeout=WAIT), TimeoutError)
    sock.close()


def test_a_frame_longer_than_the_limit_ends_the_connection(rigs):
    rig = rigs(Recorder, limit=10)
    sock, reader = rig.connect()
    sock.sendall(b"x" * 100)
    error = reader.got.get(timeout=WAIT)
    assert isinstance(error, ChannelClosed) and "longer than 10 bytes" in str(error)
    sock.close()


def test_a_new_reader_gets_the_frames_already_buffered(rigs):
    """The first frame hands the connection to a second reader: the frames that came with
    it go to that reader, in order."""
    second = Recorder()

    def hand_over(channel: Channel, _frame: bytes) -> None:
        rig.loop.read(channel, second, None, None)

    rig = rigs(lambda: Recorder(hand_over))
    sock, first = rig.connect()
    sock.sendall(b"one\ntwo\nthree\n")
    assert first.got.get(timeout=WAIT) == b"one"
    assert [second.got.get(timeout=WAIT) for _ in range(2)] == [b"two", b"three"]
    assert first.got.empty()
    sock.close()


def test_held_connections_wait_in_the_listen_queue(rigs):
    rig = rigs(Recorder)
    held = threading.Event()
    rig.loop.call_soon(lambda: (rig.loop.hold_connections(True), held.set()))
    assert held.wait(WAIT)
    sock = socket.create_connection(("127.0.0.1", rig.port))
    with pytest.raises(queue.Empty):
        rig.readers.get(timeout=0.3)
    rig.loop.call_soon(lambda: rig.loop.hold_connections(False))
    assert isinstance(rig.readers.get(timeout=WAIT), Recorder)
    sock.close()


def test_stop_ends_every_connection_and_the_listener(rigs):
    rig = rigs(Recorder)
    sock, reader = rig.connect()
    rig.loop.stop()
    error = reader.got.get(timeout=WAIT)
    assert isinstance(error, ChannelClosed) and "the server stopped" in str(error)
    assert rig.loop.call_soon(lambda: None) is False
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", rig.port), timeout=1.0).close()
    sock.close()


def test_a_stop_without_waiting_leaves_the_closing_to_the_loops_thread(rigs):
    """ControlServer.close(): the caller goes on while the loop's thread, when it runs, ends
    every connection (the peer sees the end), closes the listener and ends."""
    rig = rigs(Recorder)
    sock, reader = rig.connect()
    release = threading.Event()
    rig.loop.call_soon(lambda: release.wait(WAIT))  # the loop's thread is busy meanwhile
    rig.loop.stop(wait=False)
    assert rig.loop.call_soon(lambda: None) is False
    assert reader.got.empty()  # not ended yet: nothing was waited for
    release.set()
    error = reader.got.get(timeout=WAIT)
    assert isinstance(error, ChannelClosed) and "the server stopped" in str(error)
    sock.settimeout(WAIT)
    with contextlib.suppress(ConnectionResetError):  # a FIN, or the reset that follows it
        assert sock.recv(16) == b""  # the peer sees the end
    rig.loop._thread.join(WAIT)
    assert not rig.loop._thread.is_alive()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", rig.port), timeout=1.0).close()
    sock.close()


def test_nothing_is_accepted_before_start_so_the_owner_holds_the_loop_first():
    """A connection already waiting when the loop is made is greeted by an owner that can use
    its loop: the control server's `_greet` once found no `_loop` and dropped a worker."""
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    greeted: queue.Queue = queue.Queue()

    class Owner:
        def __init__(self) -> None:
            self.loop = ServerLoop(listener, self.greet, lambda error: None, "owner-loop", print)
            assert "owner-loop" not in {thread.name for thread in threading.enumerate()}
            self.loop.start()

        def greet(self, connection: socket.socket) -> None:
            greeted.put(self.loop)
            connection.close()

    owner = Owner()
    try:
        assert greeted.get(timeout=WAIT) is owner.loop
    finally:
        owner.loop.stop()
        client.close()


def test_a_loop_stopped_before_it_started_closes_its_listener():
    listener = socket.create_server(("127.0.0.1", 0))
    ServerLoop(listener, lambda connection: None, lambda error: None, "idle-loop", print).stop()
    assert listener.fileno() == -1


def test_a_reader_that_fails_ends_only_its_connection(rigs):
    def broken(_channel: Channel, frame: bytes) -> None:
        if frame == b"boom":
            raise ValueError("a bug")

    rig = rigs(lambda: Recorder(broken))
    bad, bad_reader = rig.connect()
    good, good_reader = rig.connect()
    bad.sendall(b"boom\n")
    assert bad_reader.got.get(timeout=WAIT) == b"boom"
    error = bad_reader.got.get(timeout=WAIT)
    assert isinstance(error, ChannelClosed) and "ValueError: a bug" in str(error)
    good.sendall(b"fine\n")
    assert good_reader.got.get(timeout=WAIT) == b"fine"
    bad.close()
    good.close()


def test_the_pool_runs_calls_on_at_most_its_threads():
    logs: queue.Queue[str] = queue.Queue()
    pool = CallPool(2, "test-pool", logs.put)
    release = threading.Event()
    names: queue.Queue = queue.Queue()

    def call() -> None:
        names.put(threading.current_thread().name)
        release.wait(WAIT)

    for _ in range(4):
        pool.submit(call)
    first = {names.get(timeout=WAIT) for _ in range(2)}
    with pytest.raises(queue.Empty):  # both threads are busy: the other calls wait
        names.get(timeout=0.3)
    release.set()
    later = {names.get(timeout=WAIT) for _ in range(2)}
    assert first | later <= {"test-pool-0", "test-pool-1"}
    pool.submit(lambda: 1 / 0)  # a failing call is logged; its thread stays
    # on the other thread, "after" may come before the failure's log line
    assert "ZeroDivisionError" in logs.get(timeout=WAIT)
    pool.submit(lambda: names.put("after"))
    assert names.get(timeout=WAIT) == "after"
    pool.close()
    with pytest.raises(RuntimeError):
        pool.submit(call)
