"""The host agent: a Unix socket that this host's rank wrappers report to.

Wrappers announce themselves when their rank starts and send their record when it ends; the
agent turns both into events for the host's state machine and can tell every wrapper on the
host to stop its rank (the SIGTERM path), which needs no PID files and cannot hit a stranger.
"""

import collections
import contextlib
import os
import queue
import signal
import socket
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from ringleader.core.exitnote import read_exit_note
from ringleader.core.processes import wait_ended
from ringleader.core.proctimes import start_ticks
from ringleader.core.records import STDERR_TAIL_LINES, TAIL_LINE_CHARS, unreported_record
from ringleader.wire import messages
from ringleader.wire.events import Event, RankEnded, RanksProgressed, RankStarted, StacksTaken
from ringleader.wire.frames import decode_output
from ringleader.wire.messages import (
    Ack,
    DumpStacks,
    Progress,
    RankEnd,
    RankStart,
    Stacks,
    Terminate,
    UnknownMessage,
)
from ringleader.wire.protocol import (
    Channel,
    ChannelClosed,
    OutputHandler,
    close_listener,
    is_output,
    serve_connections,
)

STDERR_MARK = b'"stream":"stderr"'  # in an output frame of a rank's stderr (frames.output_frame)


class HostAgent:
    def __init__(self, path: Path, events: "queue.Queue[Event]", on_output: OutputHandler) -> None:
        self._path = path
        self._events = events
        self._on_output = on_output
        self._lock = threading.Lock()
        self._wrappers: list[Channel] = []
        self._terminating_since: float | None = None
        self._stop: Terminate | None = None  # what the ranks were told, once they were
        # Each rank's user process: PID -> its start (a PID the kernel gave to another
        # process since must never be waited for or killed).
        self._user_pids: dict[int, int | None] = {}
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
            if self._stop is None:
                self._terminating_since = time.monotonic()
                self._stop = Terminate(grace)
            message = self._stop
            wrappers = list(self._wrappers)
        for channel in wrappers:
            with contextlib.suppress(ChannelClosed):
                channel.send(message)

    def dump_stacks(self, reason: str) -> None:
        """Ask every rank wrapper on this host for its rank's stacks; each arrives as a
        StacksTaken event."""
        with self._lock:
            wrappers = list(self._wrappers)
        for channel in wrappers:
            with contextlib.suppress(ChannelClosed):
                channel.send(DumpStacks(reason))

    def reap(self, abort_grace: float) -> None:
        """Wait for this host's user processes, then SIGKILL what is left (bounded).

        mpirun's daemons kill the rank wrappers a second or two after the first rank exits,
        but a user process told to stop keeps the grace it was given, counted from the stop;
        after a failure elsewhere, bystanders get `abort_grace`.
        """
        with self._lock:
            since, stop = self._terminating_since, self._stop
            pids = [pid for pid, started in self._user_pids.items() if same_process(pid, started)]
        if not pids:  # the usual end: every rank's process is gone, and no psutil to import
            return
        import psutil

        processes = []
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                processes.append(psutil.Process(pid))
        if since is None or stop is None:
            since, grace = time.monotonic(), abort_grace
        else:
            grace = stop.grace
        timeout = max(since + grace - time.monotonic(), 0.0)
        alive = wait_ended(processes, timeout)
        for process in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)

    def begin_attempt(self) -> None:
        """The job's ranks start again (a restart in place): after `reap`, forget the last
        attempt's stop and processes, so the next attempt's ranks run."""
        with self._lock:
            self._stop = None
            self._terminating_since = None
            self._user_pids.clear()

    def close(self) -> None:
        close_listener(self._server)
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()

    def _serve(self, channel: Channel) -> None:
        started: RankStart | None = None  # the rank this wrapper announced
        started_at = 0.0
        ended = False
        # its last stderr frames (one line each at least), still encoded: decoded only for the
        # record of a wrapper killed before it reported, which keeps their last lines
        stderr: collections.deque[bytes] = collections.deque(maxlen=STDERR_TAIL_LINES)
        try:
            while True:
                frame = channel.receive_frame(timeout=None)
                if is_output(frame):
                    self._on_output(frame)  # passed on still encoded: relayed or printed
                    if STDERR_MARK in frame:
                        stderr.append(frame)
                    continue
                try:
                    message = messages.decode(frame)
                except UnknownMessage:
                    continue
                if isinstance(message, RankStart):
                    started, started_at = message, time.time()
                    with self._lock:
                        self._wrappers.append(channel)
                        if message.pid is not None:
                            self._user_pids[message.pid] = start_ticks(message.pid)
                        stop = self._stop
                    self._events.put(RankStarted(message.rank, message.host, message.attempt))
                    if stop is not None:
                        channel.send(stop)
                elif isinstance(message, RankEnd):
                    ended = True
                    self._events.put(RankEnded(message.record))
                    channel.send(Ack())
                elif isinstance(message, Progress):
                    progressed = RanksProgressed(
                        message.host, message.ranks, message.steps, message.waits
                    )
                    self._events.put(progressed)
                elif isinstance(message, Stacks):
                    self._events.put(StacksTaken(message.reason, message.stacks))
        except ChannelClosed:
            pass  # a wrapper that breaks the protocol (ProtocolError) only loses its own link
        finally:
            with self._lock:
                if channel in self._wrappers:
                    self._wrappers.remove(channel)
            channel.close()
            if started is not None and not ended:
                note = started.exit_note
                record = unreported_record(
                    started.rank,
                    started.host,
                    started_at,
                    time.time(),
                    started.attempt,
                    read_exit_note(Path(note)) if note else None,
                    stderr_lines(stderr),
                )
                self._events.put(RankEnded(record))


def stderr_lines(frames: Iterable[bytes]) -> tuple[str, ...]:
    """The last lines of a rank's stderr output frames, as its record keeps them."""
    lines: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
    for frame in frames:
        batch = decode_output(frame)
        if batch.get("stream") == "stderr":
            lines.extend(str(line).rstrip()[:TAIL_LINE_CHARS] for line in batch.get("lines") or [])
    return tuple(lines)


def same_process(pid: int, started: int | None) -> bool:
    """Whether the process the rank announced is still there (not another under its PID)."""
    return started is not None and start_ticks(pid) == started
