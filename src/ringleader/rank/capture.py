"""A rank's output: read from its pipes as whole lines, written to its log, shipped in batches."""

import collections
import contextlib
import io
import itertools
import os
import queue
import re
import sys
import threading
import time
from pathlib import Path

from ringleader.core import console
from ringleader.core.records import TAIL_LINE_CHARS
from ringleader.output.lines import LineSplitter
from ringleader.output.printer import tag
from ringleader.rank.steps import StepFinder
from ringleader.wire.protocol import Channel, ChannelClosed, output_frame

_TAIL_LINE_CHARS = TAIL_LINE_CHARS
_BATCH_BYTES = 64 * 1024  # output lines shipped to the host agent per message, at most
_PROGRESS_CHECK_SECONDS = 0.5
# Horovod's stall inspector repeats its warning every HOROVOD_STALL_CHECK_TIME_SECONDS while the
# job hangs: evidence for the hang verdict, never progress. The warning comes from
# stall_inspector.cc, then "Missing ranks:" and one "<rank>: [tensor, ...]" line per rank.
_STALL_WARNING = re.compile(r"stall_inspector|One or more tensors were submitted")
_STALL_RANK_LINES = re.compile(r"^Missing ranks:|^\d+: \[")
_EVIDENCE_LINES = 20
_Batch = tuple[
    str, list[str]
]  # (stream, lines)  # how often close() looks whether shipping still moves


class RankOutput:
    """Where a rank's output lines go: its own log file, and (when relayed) the host agent in
    batches.

    Pumps put whole lines. Each is written to the log at once, by the pump itself, so the log
    keeps every line even when the way to the leader is slow or stuck (a sender that cannot
    ship in time when the rank ends must not take unwritten lines with it). One sender thread
    ships batches, so the leader only ever sees whole lines. Without an agent, lines go to our
    stdout/stderr, tagged.
    """

    def __init__(
        self,
        host: str,
        rank: int,
        log_path: Path | None,
        relay: bool = True,
        steps: StepFinder | None = None,
    ) -> None:
        self.host, self.rank = host, rank
        self.steps = steps  # the rank's step in its lines (ringleader_step_regex), if looked for
        self._relay = relay  # False: the lines go only to the rank's log
        self._log_path = log_path
        self._log: io.FileIO | None = None  # unbuffered: each batch is written whole, or not
        self._log_lock = threading.Lock()  # both pumps write to the one log
        self._logged = 0  # lines the log has
        self._log_size = 0  # bytes of the log up to its last whole batch
        self._log_whole = log_path is not None  # the log has every line so far
        self._channel: Channel | None = None
        self._queue: queue.Queue[_Batch | None] = queue.Queue(maxsize=1_000)
        self._sender = threading.Thread(target=self._send_loop, daemon=True)
        self.first_output_at: float | None = None  # for the launcher's timeline
        self.progress = 0  # lines that show progress (not Horovod's stall warnings)
        self.evidence: collections.deque[str] = collections.deque(maxlen=_EVIDENCE_LINES)
        self._in_stall_warning: set[str] = set()  # the streams in the midst of one
        self._shipped_at = time.monotonic()  # the sender's last progress
        # close() gave up on a stuck way to the leader: its note counts what was not shown,
        # so the sender neither ships nor prints anything after it.
        self._abandoned = threading.Event()

    def start(self, channel: Channel | None) -> None:
        self._channel = channel
        self._log = self._open_log()
        if self._relay:
            self._sender.start()

    def put(self, stream: str, lines: list[str]) -> None:
        """Lines in order, as they were read from one of the child's streams."""
        if self.first_output_at is None and lines:
            self.first_output_at = time.time()
        self._note_progress(stream, lines)
        with self._log_lock:
            if self._log is not None:
                data = "".join(line + "\n" for line in lines).encode(errors="replace")
                try:
                    _write_all(self._log, data)
                    self._logged += len(lines)
                    self._log_size += len(data)
                except OSError as error:  # a full disk: the log stops, the rank goes on
                    self._stop_log(error)
        if self._relay:
            self._queue.put((stream, lines))

    def _note_progress(self, stream: str, lines: list[str]) -> None:
        """Count the lines that show progress; keep Horovod's stall warnings as evidence."""
        warning = self._in_stall_warning
        for line in lines:
            if _STALL_WARNING.search(line):  # a new warning: the latest says who is missing
                self.evidence.clear()
                warning.add(stream)
                self.evidence.append(line[:_TAIL_LINE_CHARS])
            elif stream in warning and _STALL_RANK_LINES.match(line):
                self.evidence.append(line[:_TAIL_LINE_CHARS])
            else:
                warning.discard(stream)
                self.progress += 1
                if self.steps is not None:
                    self.steps.look(line)

    def close(self, timeout: float) -> None:
        """Ship what is queued, then stop the sender; give up once shipping has made no
        progress for `timeout` s (a slow leader gets every line, a stuck one does not hold
        the rank's end). The log has every line either way, unless writing it failed (said
        then)."""
        self._shipped_at = time.monotonic()
        end_queued = False
        while self._sender.is_alive():
            left = self._shipped_at + timeout - time.monotonic()
            if left <= 0:
                break
            wait = min(left, _PROGRESS_CHECK_SECONDS)
            if end_queued:
                self._sender.join(wait)
                continue
            with contextlib.suppress(queue.Full):
                self._queue.put(None, timeout=wait)
                end_queued = True
        with self._log_lock:
            if self._log is not None:
                with contextlib.suppress(OSError):
                    self._log.close()
                self._log = None
        if self._sender.is_alive():
            self._abandoned.set()
            unshown = sum(len(item[1]) for item in _drain(self._queue) if item is not None)
            where = f"; the rank's log {self._log_path} has every line" if self._log_whole else ""
            say_on_stderr(
                self.host,
                self.rank,
                f"the leader took none of this rank's output for {timeout:g} s: at least "
                f"{unshown} line(s) were not shown{where}",
            )

    def _stop_log(self, error: OSError) -> None:
        """Writing the log failed (a full disk): keep its whole lines (the part of the batch
        that fitted is cut off again), say so once, write no more. Best effort: the rank is
        never blocked by its log, and its output still flows."""
        log, self._log = self._log, None
        if log is not None:
            with contextlib.suppress(OSError):  # not every file can be cut (/dev/full)
                os.ftruncate(log.fileno(), self._log_size)
            with contextlib.suppress(OSError):
                log.close()
        self._warn(f"stopped after {self._logged} line(s): {error.strerror or error}")

    def _warn(self, what: str) -> None:
        """One line on stderr about the rank's log: `what` happened to it."""
        self._log_whole = False
        say_on_stderr(
            self.host,
            self.rank,
            f"the rank's log {self._log_path} {what}; its output still goes to the leader",
        )

    def stalled_for(self) -> float:
        """Seconds since shipping last made progress."""
        return time.monotonic() - self._shipped_at

    def _send_loop(self) -> None:
        while True:
            batch = [self._queue.get()]
            self._shipped_at = time.monotonic()  # taking lines is progress for the pumps
            size = sum(map(len, batch[0][1])) if batch[0] is not None else 0
            while batch[-1] is not None and size < _BATCH_BYTES:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                batch.append(item)
                size += sum(map(len, item[1])) if item is not None else 0
            self._ship([item for item in batch if item is not None])
            self._shipped_at = time.monotonic()
            if batch[-1] is None or self._abandoned.is_set():
                return

    def _open_log(self) -> io.FileIO | None:
        if self._log_path is None:
            return None
        try:
            self._log_path.parent.mkdir(parents=True, exist_ok=True)
            log = io.FileIO(self._log_path, "a")
        except OSError as error:
            self._warn(f"could not be opened: {error.strerror or error}")
            return None
        with contextlib.suppress(OSError):
            self._log_size = os.fstat(log.fileno()).st_size  # a restarted rank appends
        return log

    def _ship(self, items: list[tuple[str, list[str]]]) -> None:
        # One message per run of lines from the same stream, in order.
        for stream, group in itertools.groupby(items, key=lambda item: item[0]):
            lines = [line for _, batch in group for line in batch]
            if self._channel is not None:
                with contextlib.suppress(ChannelClosed):
                    self._channel.send_frame(
                        output_frame(
                            {"rank": self.rank, "host": self.host, "stream": stream, "lines": lines}
                        )
                    )
                    continue
            if self._abandoned.is_set():
                return
            sink = sys.stderr.buffer if stream == "stderr" else sys.stdout.buffer
            prefix = tag(self.host, self.rank)
            console.write(
                "".join(f"{prefix}{line}\n" for line in lines).encode(errors="replace"), sink
            )


def say_on_stderr(host: str, rank: int, text: str) -> None:
    """One line of ringleader's own about a rank on the wrapper's stderr, tagged as its output."""
    note = f"{tag(host, rank)}[ringleader] {text}\n"
    console.write(note.encode(errors="replace"), sys.stderr.buffer)


def _write_all(log: io.FileIO, data: bytes) -> None:
    """All of `data`, or OSError (a write to a filling disk can take only part of it)."""
    view = memoryview(data)
    while view:
        view = view[log.write(view) :]


def _drain(
    items: "queue.Queue[tuple[str, list[str]] | None]",
) -> list[tuple[str, list[str]] | None]:
    drained = []
    with contextlib.suppress(queue.Empty):
        while True:
            drained.append(items.get_nowait())
    return drained


class Pump(threading.Thread):
    """Reads one pipe of the child and hands its whole lines to the rank's output."""

    def __init__(self, fd: int, stream: str, output: RankOutput, tail: int) -> None:
        super().__init__(daemon=True)
        self._fd, self._stream, self._output = fd, stream, output
        self._reading_since: float | None = None  # time.monotonic() the current read began
        self.tail: collections.deque[str] = collections.deque(maxlen=tail)

    def run(self) -> None:
        splitter = LineSplitter()
        while True:
            self._reading_since = time.monotonic()
            chunk = os.read(self._fd, 65536)
            self._reading_since = None  # handing the lines on, which the leader may slow down
            if not chunk:
                break
            self._emit(splitter.feed(chunk))
        self._emit(splitter.flush())

    def finish(self, read_idle: float, hand_on_stall: float) -> None:
        """After the rank's tree ended: wait for the rest of its output. Give up on a pipe that
        brings nothing for `read_idle` s (a process outside the tree holds it open), or on
        lines that cannot be handed on because shipping made no progress for `hand_on_stall`
        s; a slow leader is waited for."""
        while self.is_alive():
            self.join(_PROGRESS_CHECK_SECONDS)
            since = self._reading_since
            if since is not None and time.monotonic() - since >= read_idle:
                return
            if since is None and self._output.stalled_for() >= hand_on_stall:
                return

    def _emit(self, raw: list[bytes]) -> None:
        if not raw:
            return
        # One decode for the whole chunk: \n never occurs inside a UTF-8 character.
        lines = b"\n".join(raw).decode(errors="replace").split("\n")
        self._output.put(self._stream, lines)
        if self.tail.maxlen:
            self.tail.extend(
                line.rstrip()[:_TAIL_LINE_CHARS] for line in lines[-self.tail.maxlen :]
            )
