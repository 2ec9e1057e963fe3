"""The host agent: a Unix socket that this host's rank wrappers report to.

Wrappers announce themselves when their rank starts and send their record when it ends; the
agent turns both into events for the host's state machine and can tell every wrapper on the
host to stop its rank (the SIGTERM path), which needs no PID files and cannot hit a stranger.
"""

import contextlib
import os
import queue
import socket
import threading
from pathlib import Path

from ringleader.events import Event, RankEnded, RankStarted
from ringleader.protocol import Channel, ChannelClosed
from ringleader.records import RankRecord


class HostAgent:
    def __init__(self, path: Path, events: "queue.Queue[Event]") -> None:
        self._path = path
        self._events = events
        self._lock = threading.Lock()
        self._wrappers: list[Channel] = []
        self._terminating = False
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        os.chmod(path, 0o600)
        self._server.listen(256)
        threading.Thread(target=self._accept_loop, name="host-agent", daemon=True).start()

    def terminate_all(self) -> None:
        """Ask every rank wrapper on this host, now and later, to stop its rank."""
        with self._lock:
            self._terminating = True
            wrappers = list(self._wrappers)
        for channel in wrappers:
            with contextlib.suppress(ChannelClosed):
                channel.send({"type": "terminate"})

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._server.close()
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()

    def _accept_loop(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(Channel(connection),), daemon=True).start()

    def _serve(self, channel: Channel) -> None:
        try:
            while True:
                message = channel.receive(timeout=None)
                kind = message.get("type")
                if kind == "rank-start":
                    with self._lock:
                        self._wrappers.append(channel)
                        terminating = self._terminating
                    self._events.put(RankStarted(int(message["rank"]), str(message["host"])))
                    if terminating:
                        channel.send({"type": "terminate"})
                elif kind == "rank-end":
                    self._events.put(RankEnded(RankRecord.from_json(message["record"])))
                    channel.send({"type": "ack"})
        except ChannelClosed:
            pass
        finally:
            with self._lock:
                if channel in self._wrappers:
                    self._wrappers.remove(channel)
            channel.close()
