"""Runs a launch plan's command (mpirun, or the rank wrapper alone) and streams its output."""

import collections
import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO

from ringleader.launch.mpirun import is_abort_line, parse_mpi_aborts
from ringleader.output import console
from ringleader.wire.events import Event, LauncherExited

OUTPUT_TAIL_LINES = 30
OUTPUT_DRAIN_SECONDS = 1.0  # after the launcher exits, for the rest of its output
_ABORT_LINES = 1000  # MPI_ABORT messages kept, at most


class Launcher:
    """The running launcher; LauncherExited goes to `events` once it and its output ended."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        events: "queue.Queue[Event]",
        on_kill: Callable[[], None] | None = None,
    ) -> None:
        self._on_kill = on_kill  # ends what else holds its output (ssh master connections)
        self.tail: collections.deque[str] = collections.deque(maxlen=OUTPUT_TAIL_LINES)
        self._tail_lock = threading.Lock()
        self._abort_lines: collections.deque[str] = collections.deque(maxlen=_ABORT_LINES)
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
            events.put(LauncherExited(code))

        threading.Thread(target=wait, name="launcher-wait", daemon=True).start()

    def kill(self) -> None:
        """SIGKILL the launcher's whole process group and every process under it: mpirun's
        ssh clients run in groups of their own and would hold its output open (and with it
        the job's end) until the remote daemons die."""
        import psutil  # here: only a stopped job pays for it

        descendants: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            descendants = psutil.Process(self._process.pid).children(recursive=True)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signal.SIGKILL)
        for process in descendants:
            with contextlib.suppress(psutil.Error):
                process.kill()
        if self._on_kill is not None:
            self._on_kill()

    def _pump(self, source: IO[bytes], sink: IO[bytes]) -> None:
        for line in iter(source.readline, b""):
            console.write(line if line.endswith(b"\n") else line + b"\n", sink)
            text = line.decode(errors="replace").rstrip()[:300]
            with self._tail_lock:
                self.tail.append(text)
                if is_abort_line(text):
                    self._abort_lines.append(text)

    def mpi_aborts(self) -> dict[int, int]:
        """rank -> error code of each rank mpirun reported calling MPI_Abort."""
        with self._tail_lock:
            return parse_mpi_aborts(self._abort_lines)

    def output_tail(self) -> tuple[str, ...]:
        with self._tail_lock:
            return tuple(self.tail)
