"""Newline-delimited JSON messages over a stream socket (TCP between hosts, Unix on a host)."""

import contextlib
import json
import socket
import threading
from collections.abc import Callable
from typing import Any

Message = dict[str, Any]
_MAX_LINE = 1 << 20


class ChannelClosed(Exception):
    """The peer closed the connection or it broke."""


class Channel:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""
        self._send_lock = threading.Lock()

    def send(self, message: Message) -> None:
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        with self._send_lock:
            try:
                self._sock.sendall(data)
            except OSError as error:
                raise ChannelClosed(str(error)) from error

    def receive(self, timeout: float | None) -> Message:
        """The next message; TimeoutError when none came in `timeout` seconds."""
        try:
            self._sock.settimeout(timeout)
        except OSError as error:  # closed meanwhile by another thread
            raise ChannelClosed(str(error)) from error
        while b"\n" not in self._buffer:
            if len(self._buffer) > _MAX_LINE:
                raise ChannelClosed("message too long")
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:
                raise
            except OSError as error:
                raise ChannelClosed(str(error)) from error
            if not chunk:
                raise ChannelClosed("connection closed")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError as error:
            raise ChannelClosed(f"garbled message: {line[:100]!r}") from error
        if not isinstance(message, dict):
            raise ChannelClosed(f"garbled message: {line[:100]!r}")
        return message

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
