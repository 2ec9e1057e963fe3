"""Runs a launch plan's command (mpirun, or the rank wrapper alone) and streams its output."""

import collections
import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import IO

from ringleader.output import console
from ringleader.wire.events import Event, LauncherExited

OUTPUT_TAIL_LINES = 30


class Launcher:
    """The running launcher; LauncherExited goes to `events` once it and its output ended."""

    def __init__(
        self, argv: Sequence[str], env: Mapping[str, str], events: "queue.Queue[Event]"
    ) -> None:
        self.tail: collections.deque[str] = collections.deque(maxlen=OUTPUT_TAIL_LINES)
        self._tail_lock = threading.Lock()
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
            for pump in pumps:
                pump.join(timeout=5.0)
            events.put(LauncherExited(code))

        threading.Thread(target=wait, name="launcher-wait", daemon=True).start()

    def kill(self) -> None:
        """SIGKILL the launcher's whole process group (after the grace period ran out)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signal.SIGKILL)

    def _pump(self, source: IO[bytes], sink: IO[bytes]) -> None:
        for line in iter(source.readline, b""):
            console.write(line if line.endswith(b"\n") else line + b"\n", sink)
            with self._tail_lock:
                self.tail.append(line.decode(errors="replace").rstrip()[:300])

    def output_tail(self) -> tuple[str, ...]:
        with self._tail_lock:
            return tuple(self.tail)
