"""Runs a launch plan's command (mpirun, or the rank wrapper alone) and streams its output."""

import collections
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Protocol

from ringleader.core import console
from ringleader.core.processes import kill_tree

OUTPUT_TAIL_LINES = 30
OUTPUT_DRAIN_SECONDS = 1.0  # after the launcher exits, for the rest of its output
_KEPT_LINES = 1000  # lines an OutputReader asked for, at most


class OutputReader(Protocol):
    """What a launcher's own output says about its ranks (mpirun names the ranks that called
    MPI_Abort, with their codes); each strategy brings the reader for its launcher."""

    def keeps(self, line: str) -> bool:
        """Whether `rank_codes` needs this line."""

    def rank_codes(self, kept: Sequence[str]) -> dict[int, int]:
        """rank -> the exit code the launcher reported for it."""


class _PlainOutput:
    def keeps(self, line: str) -> bool:
        return False

    def rank_codes(self, kept: Sequence[str]) -> dict[int, int]:
        return {}


PLAIN_OUTPUT: OutputReader = _PlainOutput()  # a launcher that reports nothing about ranks


class Launcher:
    """The running launcher; `on_exit` gets its exit code once it and its output ended."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        on_exit: Callable[[int], None],
        on_kill: Callable[[], None] | None = None,
        reader: OutputReader = PLAIN_OUTPUT,
    ) -> None:
        self._on_kill = on_kill  # ends what else holds its output (ssh master connections)
        self._reader = reader
        self.tail: collections.deque[str] = collections.deque(maxlen=OUTPUT_TAIL_LINES)
        self._tail_lock = threading.Lock()
        self._kept: collections.deque[str] = collections.deque(maxlen=_KEPT_LINES)
        self._process = subprocess.Popen(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        assert self._process.stdout is not None and self._process.stderr is not None
        pumps = [
            threading.Thread(target=self._pump, args=(self._process.stdout, sys.stdout.buffer)),
            threading.Thread(target=self._pump, args=(self._process.stderr, sys.stderr.buffer)),
        ]
        for pump in pumps:
            pump.daemon = True
            pump.start()

        def wait() -> None:
            code = self._process.wait()
            # Its output is already in the pipes; a process it left may hold them open.
            drained_by = time.monotonic() + OUTPUT_DRAIN_SECONDS
            for pump in pumps:
                pump.join(timeout=max(drained_by - time.monotonic(), 0.0))
            on_exit(code)

        threading.Thread(target=wait, name="launcher-wait", daemon=True).start()

    def kill(self) -> None:
        """SIGKILL the launcher's whole process group and every process under it: mpirun's
        ssh clients run in groups of their own and would hold its output open (and with it
        the job's end) until the remote daemons die."""
        kill_tree(self._process.pid)  # imports psutil: only a stopped job pays for it
        if self._on_kill is not None:
            self._on_kill()

    def _pump(self, source: IO[bytes], sink: IO[bytes]) -> None:
        for line in iter(source.readline, b""):
            console.write(line if line.endswith(b"\n") else line + b"\n", sink)
            text = line.decode(errors="replace").rstrip()[:300]
            with self._tail_lock:
                self.tail.append(text)
                if self._reader.keeps(text):
                    self._kept.append(text)

    def rank_codes(self) -> dict[int, int]:
        """rank -> exit code, as the launcher's own output reported them."""
        with self._tail_lock:
            return self._reader.rank_codes(tuple(self._kept))

    def output_tail(self) -> tuple[str, ...]:
        with self._tail_lock:
            return tuple(self.tail)
