"""Framed messages over a stream socket (TCP between hosts, Unix on a host).

What a frame is lives in ringleader.wire.frames, what a control message holds in
ringleader.wire.messages; a Channel moves frames, sends messages and receives either.
"""

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable

from ringleader.wire import messages
from ringleader.wire.frames import (
    OUTPUT_FRAME,
    ChannelClosed,
    JsonObject,
    ProtocolError,
    decode,
    decode_output,
    is_output,
    output_frame,
)

__all__ = [  # what a frame is, for the modules that used to find it here
    "OUTPUT_FRAME",
    "Channel",
    "ChannelClosed",
    "JsonObject",
    "OutputHandler",
    "ProtocolError",
    "close_listener",
    "decode",
    "decode_output",
    "is_output",
    "output_frame",
    "serve_connections",
]

MAX_FRAME_BYTES = 4 << 20  # a frame longer than this is not ours
_RECEIVE_BYTES = 1 << 18
# struct tcp_info (linux/tcp.h): 8 bytes of u8 fields, then u32 rto, ato, snd_mss, rcv_mss,
# unacked, sacked, lost, retrans, fackets, last_data_sent, last_ack_sent, last_data_recv,
# last_ack_recv.
_LAST_ACK_RECV_OFFSET = 8 + 12 * 4
_TCP_INFO_BYTES = 104

# Takes one output frame (with its kind byte): relayed or printed.
OutputHandler = Callable[[bytes], None]


class Channel:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer known to hold no newline
        self._send_lock = threading.Lock()

    @property
    def peer_address(self) -> str | None:
        """The peer's IP address (None on a Unix socket or once closed)."""
        try:
            address = self._sock.getpeername()
        except OSError:
            return None
        return str(address[0]) if isinstance(address, tuple) else None

    def send(self, message: messages.Message) -> None:
        self.send_frame(messages.encode(message))

    def send_frame(self, frame: bytes) -> None:
        """Send one already-encoded frame (relayed as it came, without re-encoding)."""
        with self._send_lock:
            try:
                self._sock.sendall(frame + b"\n")
            except OSError as error:
                raise ChannelClosed(str(error)) from error

    def send_without_waiting(self, data: bytes) -> int:
        """Send what fits in the socket's buffer now: how many bytes of `data` went (the
        caller keeps the rest); ChannelClosed when the connection is gone."""
        with self._send_lock:
            try:
                return self._sock.send(data, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return 0
            except OSError as error:
                raise ChannelClosed(str(error)) from error

    def receive_message(self, timeout: float | None, limit: int | None = None) -> messages.Message:
        """The next control message; TimeoutError when no frame came in `timeout` seconds,
        ProtocolError when it is not a message (UnknownMessage: one of an unknown type)."""
        return messages.decode(self.receive_frame(timeout, limit))

    def receive(self, timeout: float | None) -> JsonObject:
        """The next control frame's JSON object, its fields unchecked (receive_message reads
        them); TimeoutError when no frame came in `timeout` seconds."""
        return decode(self.receive_frame(timeout))

    def receive_frame(self, timeout: float | None, limit: int | None = None) -> bytes:
        """The next frame still encoded; TimeoutError when it was not all there within
        `timeout` seconds (a peer sending a byte at a time gets no longer), ProtocolError when
        it is longer than `limit` bytes (MAX_FRAME_BYTES when None)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (frame := self.buffered_frame(limit)) is None:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                raise TimeoutError("timed out")
            try:
                self._sock.settimeout(wait)
            except OSError as error:
                raise ChannelClosed(str(error)) from error
            self._receive_some(limit, 0)
        return frame

    def buffered_frame(self, limit: int | None = None) -> bytes | None:
        """The next frame if it has arrived whole, else None (nothing is read from the socket);
        ProtocolError when what has arrived of it is longer than `limit` bytes."""
        limit = MAX_FRAME_BYTES if limit is None else limit
        end = self._buffer.find(b"\n", self._scanned)
        if end < 0:
            self._scanned = len(self._buffer)
            if self._scanned > limit:
                raise ProtocolError(f"frame longer than {limit} bytes")
            return None
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        self._scanned = 0
        return line

    def read_available(self, limit: int | None = None) -> None:
        """Take what has arrived into the buffer without waiting (for a caller that knows the
        socket is readable: a selector loop); ChannelClosed at the connection's end."""
        with contextlib.suppress(BlockingIOError, InterruptedError):
            self._receive_some(limit, socket.MSG_DONTWAIT)

    def _receive_some(self, limit: int | None, flags: int) -> None:
        limit = MAX_FRAME_BYTES if limit is None else limit
        try:
            # never more than the limit allows: what a peer makes us hold stays bounded
            room = max(min(_RECEIVE_BYTES, limit + 1 - len(self._buffer)), 1)
            chunk = self._sock.recv(room, flags)
        except (TimeoutError, BlockingIOError, InterruptedError):
            raise
        except OSError as error:
            raise ChannelClosed(str(error)) from error
        if not chunk:
            raise ChannelClosed("connection closed")
        self._buffer += chunk

    def ask_peer_kernel_when_idle(self, idle_seconds: float) -> None:
        """Have our kernel probe the peer's TCP stack (keepalive) after `idle_seconds` without
        traffic, whether or not this process gets the CPU: the peer's answers keep
        last_ack_age fresh even while our own pulses could not be sent. The kernel never ends
        the connection by itself first (at most 127 unanswered probes, 1 s apart); the
        pulse watcher decides."""
        with contextlib.suppress(OSError, AttributeError):
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            self._sock.setsockopt(
                socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, max(1, round(idle_seconds))
            )
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 127)

    def last_ack_age(self) -> float | None:
        """Seconds since the peer's TCP stack last acknowledged anything we sent (Linux
        TCP_INFO's tcpi_last_ack_recv), or None where that is not known."""
        try:
            info = self._sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_BYTES)
        except (OSError, AttributeError):
            return None
        if len(info) < _LAST_ACK_RECV_OFFSET + 4:
            return None
        (milliseconds,) = struct.unpack_from("I", info, _LAST_ACK_RECV_OFFSET)
        return float(milliseconds) / 1000.0

    def fileno(self) -> int:
        return self._sock.fileno()

    def set_option(self, level: int, option: int, value: bytes) -> None:
        """A socket option of this connection, set on its socket object: never through its
        descriptor's number, which a close on another thread may already have handed to a
        new connection (a test's socket was shut down that way by an older test's pulse)."""
        self._sock.setsockopt(level, option, value)

    def shut_reading(self) -> None:
        """Wake a thread of ours reading this channel; sends nothing (no FIN)."""
        self._sock.shutdown(socket.SHUT_RD)

    def release(self) -> None:
        """Close this process's handle without shutting the connection down (another process
        holds it now)."""
        self._sock.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()


def serve_connections(listener: socket.socket, serve: Callable[[Channel], None]) -> None:
    """Accept until the listener is closed; each connection is served on its own thread."""
    while True:
        try:
            connection, _ = listener.accept()
        except OSError:
            return
        if connection.family != socket.AF_UNIX:
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=serve, args=(Channel(connection),), daemon=True).start()


def close_listener(listener: socket.socket) -> None:
    with contextlib.suppress(OSError):
        # shutdown() wakes the thread blocked in accept(); close() alone would not.
        listener.shutdown(socket.SHUT_RDWR)
    listener.close()
