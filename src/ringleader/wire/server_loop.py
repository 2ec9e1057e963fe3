"""One thread that accepts a listener's connections and reads every one of them.

Why not a thread per connection: starting one cost the leader's accept thread 0.38 ms per
connection, one after another (4.2 s before the last of 4,096 simulated workers was even
greeted: bench/control_plane.py), and each idle thread holds a stack. Here a selector tells
which connections have something to read; a connection's frames go to the `FrameReader` it was
given, on this thread, so readers must not block (what may take long, such as resolving a host
name, goes to a pool of its own and comes back with `call_soon`).

Each reader has a limit on a frame's length and may have a deadline (a monotonic time) by which
it must be done: a connection that has not delivered by then ends with TimeoutError.
"""

import contextlib
import heapq
import itertools
import queue
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ringleader.wire.liveness import close_at_once, cut
from ringleader.wire.protocol import Channel, ChannelClosed, close_listener

STOP_SECONDS = 5.0  # how long stop() waits for the thread to finish what it is doing
_ACCEPTS_PER_WAKE = 64  # then the connections already open get their turn
_ACCEPT_RETRY_SECONDS = 0.1  # after accept() failed for want of descriptors or memory


class FrameReader(Protocol):
    def frame(self, channel: Channel, frame: bytes) -> None:
        """One whole frame; raising ChannelClosed (ProtocolError included) ends the
        connection."""

    def ended(self, channel: Channel, error: ChannelClosed | TimeoutError) -> None:
        """The connection ended (closed, garbled, or its deadline passed): no more frames. The
        reader owns the channel now (closes it)."""


# Takes an accepted connection, on the loop's thread.
OnAccept = Callable[[socket.socket], None]
# Told why accept() failed (out of descriptors or memory): the loop tries again shortly.
OnAcceptError = Callable[[OSError], None]


@dataclass
class _Reading:
    reader: FrameReader
    limit: int | None
    deadline: float | None


class ServerLoop:
    def __init__(
        self,
        listener: socket.socket,
        on_accept: OnAccept,
        on_accept_error: OnAcceptError,
        name: str,
        log: Callable[[str], None],
    ) -> None:
        self._listener = listener
        self._log = log
        self._on_accept = on_accept
        self._on_accept_error = on_accept_error
        self._selector = selectors.DefaultSelector()
        self._reading: dict[Channel, _Reading] = {}
        self._deadlines: list[tuple[float, int, Channel]] = []  # stale entries are skipped
        self._order = itertools.count()
        self._soon: deque[Callable[[], None]] = deque()
        self._lock = threading.Lock()  # _stopping and _soon, with call_soon's other threads
        self._stopping = False
        self._accept_again_at: float | None = None  # after accept() failed
        self._held = False  # the owner holds new connections in the listen queue
        self._listening = True
        self._wake_in, self._wake_out = socket.socketpair()
        self._wake_in.setblocking(False)
        self._wake_out.setblocking(False)
        listener.setblocking(False)
        self._selector.register(listener, selectors.EVENT_READ)
        self._selector.register(self._wake_in, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Begin accepting. Separate from construction: `on_accept` may use the loop through
        its owner, who holds it only once the constructor has returned (a connection accepted
        before then was dropped with an AttributeError, at 32 fake hosts)."""
        self._thread.start()

    # On the loop's thread (from on_accept, a reader or a call_soon callback):

    def read(
        self, channel: Channel, reader: FrameReader, limit: int | None, timeout: float | None
    ) -> None:
        """Hand `channel`'s frames to `reader` from now on (frames it holds already first),
        for at most `timeout` seconds; `limit`: the longest frame accepted."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if channel not in self._reading:
            self._selector.register(channel, selectors.EVENT_READ)
        self._reading[channel] = _Reading(reader, limit, deadline)
        if deadline is not None:
            heapq.heappush(self._deadlines, (deadline, next(self._order), channel))
        self._soon.append(lambda: self._deliver(channel))

    def hold_connections(self, held: bool) -> None:
        """Leave new connections in the listen queue (the kernel's, up to its backlog), or
        accept them again."""
        self._held = held
        self._listen_if_free()

    def pause(self, channel: Channel) -> None:
        """Stop reading `channel` (its frames wait in it); the caller owns it again."""
        if self._reading.pop(channel, None) is not None:
            self._unregister(channel)

    # On any thread:

    def call_soon(self, callback: Callable[[], None]) -> bool:
        """Run `callback` on the loop's thread; False (and it never runs) once stopping."""
        with self._lock:
            if self._stopping:
                return False
            self._soon.append(callback)
        with contextlib.suppress(OSError):  # full: a wake-up is pending already
            self._wake_out.send(b"\0")
        return True

    def stop(self, wait: bool = True) -> None:
        """Stop accepting and reading: the loop's thread closes the listener, ends every
        connection still read here (its reader is told, and its close resets it: no
        lingering) and ends. `wait`: until it has (at most STOP_SECONDS); without, the caller
        leaves those connections to it (closing one here could free its descriptor's number
        while the selector still watches it)."""
        with self._lock:
            self._stopping = True
        # Refused from now on, not once the loop's thread gets a CPU: shutdown() ends the
        # listening at once and keeps the descriptor's number, which the selector still holds.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._wake_out.send(b"\0")
        if self._thread.ident is None:  # never started: nothing else closes what it holds
            self._close_all()
        elif wait and threading.current_thread() is not self._thread:
            self._thread.join(STOP_SECONDS)

    def _run(self) -> None:
        try:
            while not self._stopping:
                for key, _ in self._selector.select(self._timeout()):
                    if key.fileobj is self._listener:
                        self._accept()
                    elif key.fileobj is self._wake_in:
                        with contextlib.suppress(OSError):
                            self._wake_in.recv(4096)
                    else:
                        self._readable(key.fileobj)  # type: ignore[arg-type]
                self._run_soon()
                self._expire()
        finally:
            self._close_all()

    def _timeout(self) -> float | None:
        if self._soon:
            return 0.0
        due = [at for at in (self._accept_again_at,) if at is not None]
        while self._deadlines and not self._is_current(*self._deadlines[0]):
            heapq.heappop(self._deadlines)
        if self._deadlines:
            due.append(self._deadlines[0][0])
        return max(min(due) - time.monotonic(), 0.0) if due else None

    def _is_current(self, deadline: float, _order: int, channel: Channel) -> bool:
        reading = self._reading.get(channel)
        return reading is not None and reading.deadline == deadline

    def _listen_if_free(self) -> None:
        listen = not self._held and self._accept_again_at is None
        if listen and not self._listening:
            self._selector.register(self._listener, selectors.EVENT_READ)
        elif self._listening and not listen:
            self._selector.unregister(self._listener)
        self._listening = listen

    def _accept(self) -> None:
        for _ in range(_ACCEPTS_PER_WAKE):
            if not self._listening or self._stopping:  # a stopped listener fails to accept
                return
            try:
                connection, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:
                # Out of descriptors or memory for now: what is queued waits in the backlog.
                self._on_accept_error(error)
                self._accept_again_at = time.monotonic() + _ACCEPT_RETRY_SECONDS
                self._listen_if_free()
                return
            connection.setblocking(True)  # sends block (bounded by SO_SNDTIMEO); reads never
            try:
                self._on_accept(connection)
            except Exception as error:  # a bug: that connection goes, the loop stays
                self._log(f"{self._thread.name}: dropped a connection: {error!r}")
                connection.close()

    def _readable(self, channel: Channel) -> None:
        reading = self._reading.get(channel)
        if reading is None:
            return
        try:
            channel.read_available(reading.limit)
        except ChannelClosed as error:
            self._end(channel, error)
            return
        self._deliver(channel)

    def _deliver(self, channel: Channel) -> None:
        """Hand over every whole frame `channel` holds, while its reader stays the same."""
        reading = self._reading.get(channel)
        while reading is not None and self._reading.get(channel) is reading:
            try:
                frame = channel.buffered_frame(reading.limit)
                if frame is None:
                    return
                reading.reader.frame(channel, frame)
            except ChannelClosed as error:
                self._end(channel, error)
                return
            except Exception as error:  # a bug in one reader must not end every connection
                self._end(channel, ChannelClosed(f"{type(error).__name__}: {error}"))
                return

    def _end(self, channel: Channel, error: ChannelClosed | TimeoutError) -> None:
        reading = self._reading.pop(channel, None)
        if reading is None:
            return
        self._unregister(channel)
        try:
            reading.reader.ended(channel, error)
        except Exception:  # the reader's bug: the connection is closed all the same
            close_at_once(channel)

    def _unregister(self, channel: Channel) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(channel)

    def _run_soon(self) -> None:
        while True:
            try:
                callback = self._soon.popleft()
            except IndexError:
                return
            try:
                callback()
            except Exception as error:  # a bug in one callback must not end the loop
                self._log(f"{self._thread.name}: {error!r}")

    def _expire(self) -> None:
        now = time.monotonic()
        if self._accept_again_at is not None and now >= self._accept_again_at:
            self._accept_again_at = None
            self._listen_if_free()
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, order, channel = heapq.heappop(self._deadlines)
            if self._is_current(deadline, order, channel):
                self._end(channel, TimeoutError("timed out"))

    def _close_all(self) -> None:
        close_listener(self._listener)
        for channel in list(self._reading):
            cut(channel)  # its reader's close resets it: nothing waits on the peer
            self._end(channel, ChannelClosed("the server stopped"))
        self._selector.close()
        self._wake_in.close()
        self._wake_out.close()


class CallPool:
    """At most `size` threads running the calls handed to them, started as calls need them
    (concurrent.futures would do, but it imports logging, which no host should pay for)."""

    def __init__(self, size: int, name: str, log: Callable[[str], None]) -> None:
        self._size = size
        self._name = name
        self._log = log
        self._calls: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._closed = False

    def submit(self, call: Callable[[], None]) -> None:
        """Run `call` on one of the threads; RuntimeError when closed, or when it needs a new
        thread and none can be started."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the pool is closed")
            if self._idle == 0 and self._threads < self._size:
                name = f"{self._name}-{self._threads}"
                threading.Thread(target=self._work, name=name, daemon=True).start()
                self._threads += 1
        self._calls.put(call)

    def close(self) -> None:
        """Take no more calls; each thread ends after the calls already handed over."""
        with self._lock:
            self._closed = True
            threads = self._threads
        for _ in range(threads):
            self._calls.put(None)

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            call = self._calls.get()
            with self._lock:
                self._idle -= 1
            if call is None:
                return
            try:
                call()
            except Exception as error:  # a bug in one call must not cost the pool a thread
                self._log(f"{self._name}: {error!r}")
