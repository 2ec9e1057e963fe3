"""The host agent: a Unix socket that this host's rank wrappers report to.

Wrappers announce themselves when their rank starts and send their record when it ends; the
agent turns both into events for the host's state machine and can tell every wrapper on the
host to stop its rank (the SIGTERM path), which needs no PID files and cannot hit a stranger.
"""

import contextlib
import os
import queue
import signal
import socket
import threading
import time
from pathlib import Path

from ringleader.core.records import RankRecord
from ringleader.wire.events import Event, RankEnded, RankStarted
from ringleader.wire.protocol import (
    Channel,
    ChannelClosed,
    OutputHandler,
    close_listener,
    decode,
    is_output,
    serve_connections,
)


class HostAgent:
    def __init__(self, path: Path, events: "queue.Queue[Event]", on_output: OutputHandler) -> None:
        self._path = path
        self._events = events
        self._on_output = on_output
        self._lock = threading.Lock()
        self._wrappers: list[Channel] = []
        self._terminating_since: float | None = None
        self._terminate_message: dict[str, object] = {"type": "terminate"}
        self._grace = 0.0  # what the ranks were given when told to stop
        self._user_pids: set[int] = set()
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        os.chmod(path, 0o600)
        self._server.listen(256)
        threading.Thread(
            target=serve_connections, args=(self._server, self._serve), daemon=True
        ).start()

    def terminate_all(self, grace: float) -> None:
        """Ask every rank wrapper on this host, now and later, to stop its rank: SIGTERM, then
        SIGKILL `grace` seconds later (the first request wins)."""
        with self._lock:
            if self._terminating_since is None:
                self._terminating_since = time.monotonic()
                self._grace = grace
                self._terminate_message = {"type": "terminate", "grace": grace}
            message = self._terminate_message
            wrappers = list(self._wrappers)
        for channel in wrappers:
            with contextlib.suppress(ChannelClosed):
                channel.send(message)

    def reap(self, abort_grace: float) -> None:
        """Wait for this host's user processes, then SIGKILL what is left (bounded).

        mpirun's daemons kill the rank wrappers a second or two after the first rank exits,
        but a user process told to stop keeps the grace it was given, counted from the stop;
        after a failure elsewhere, bystanders get `abort_grace`.
        """
        with self._lock:
            since = self._terminating_since
            stop_grace = self._grace
            pids = [pid for pid in self._user_pids if _exists(pid)]
        if not pids:  # the usual end: every rank's process is gone, and no psutil to import
            return
        import psutil

        processes = []
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                processes.append(psutil.Process(pid))
        if since is None:
            since, grace = time.monotonic(), abort_grace
        else:
            grace = stop_grace
        timeout = max(since + grace - time.monotonic(), 0.0)
        _, alive = psutil.wait_procs(processes, timeout=timeout)
        for process in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)

    def close(self) -> None:
        close_listener(self._server)
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()

    def _serve(self, channel: Channel) -> None:
        try:
            while True:
                frame = channel.receive_frame(timeout=None)
                if is_output(frame):
                    self._on_output(frame)  # passed on still encoded: relayed or printed
                    continue
                message = decode(frame)
                kind = message.get("type")
                if kind == "rank-start":
                    with self._lock:
                        self._wrappers.append(channel)
                        self._user_pids.add(int(message["pid"]))
                        terminating = self._terminating_since is not None
                        stop = self._terminate_message
                    self._events.put(RankStarted(int(message["rank"]), str(message["host"])))
                    if terminating:
                        channel.send(stop)
                elif kind == "rank-end":
                    self._events.put(RankEnded(RankRecord.from_json(message["record"])))
                    channel.send({"type": "ack"})
        except (ChannelClosed, KeyError, ValueError, TypeError):
            pass  # a wrapper that breaks the protocol only loses its own link
        finally:
            with self._lock:
                if channel in self._wrappers:
                    self._wrappers.remove(channel)
            channel.close()


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only whether the process is there
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # there, and not ours to signal
    return True
