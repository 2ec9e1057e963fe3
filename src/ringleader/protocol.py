"""Newline-delimited JSON messages over a stream socket (TCP between hosts, Unix on a host)."""

import contextlib
import json
import socket
import threading
from collections.abc import Callable
from typing import Any

Message = dict[str, Any]
_MAX_LINE = 1 << 20
_RECEIVE_BYTES = 1 << 18
# Rank output batches are relayed and printed from their encoded form; the wrapper encodes
# them with "type" first and compact separators, so this prefix identifies them unparsed.
OUTPUT_PREFIX = b'{"type":"output"'


def decode(line: bytes) -> Message:
    try:
        message = json.loads(line)
    except ValueError as error:
        raise ChannelClosed(f"garbled message: {line[:100]!r}") from error
    if not isinstance(message, dict):
        raise ChannelClosed(f"garbled message: {line[:100]!r}")
    return message


class ChannelClosed(Exception):
    """The peer closed the connection or it broke."""


class Channel:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer known to hold no newline
        self._send_lock = threading.Lock()

    def send(self, message: Message) -> None:
        self.send_bytes(json.dumps(message, separators=(",", ":")).encode())

    def send_bytes(self, line: bytes) -> None:
        """Send one already-encoded message (relayed as it came, without re-encoding)."""
        with self._send_lock:
            try:
                self._sock.sendall(line + b"\n")
            except OSError as error:
                raise ChannelClosed(str(error)) from error

    def receive(self, timeout: float | None) -> Message:
        """The next message; TimeoutError when none came in `timeout` seconds."""
        return decode(self.receive_bytes(timeout))

    def receive_bytes(self, timeout: float | None) -> bytes:
        """The next message still encoded; TimeoutError when none came in `timeout` seconds."""
        try:
            self._sock.settimeout(timeout)
        except OSError as error:  # closed meanwhile by another thread
            raise ChannelClosed(str(error)) from error
        while (end := self._buffer.find(b"\n", self._scanned)) < 0:
            self._scanned = len(self._buffer)
            if self._scanned > _MAX_LINE:
                raise ChannelClosed("message too long")
            try:
                chunk = self._sock.recv(_RECEIVE_BYTES)
            except TimeoutError:
                raise
            except OSError as error:
                raise ChannelClosed(str(error)) from error
            if not chunk:
                raise ChannelClosed("connection closed")
            self._buffer += chunk
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        self._scanned = 0
        return line

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
