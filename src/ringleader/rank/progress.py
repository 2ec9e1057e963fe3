"""A rank's progress for the hang watch: lines of output, and heartbeats from the rank itself.

A rank that is quiet by design touches the heartbeat file its environment names
(`ringleader.progress()` from Python, `touch "$RINGLEADER_PROGRESS_FILE"` from a shell); its
wrapper looks at that file's modification time and at the output line count once per interval,
and tells the host agent when either moved.
"""

import contextlib
import os
import threading
from pathlib import Path
from typing import Protocol

from ringleader.wire.messages import Progress
from ringleader.wire.protocol import Channel, ChannelClosed


class Counted(Protocol):
    progress: int  # lines that showed progress so far


class ProgressWatch:
    def __init__(self, directory: Path) -> None:
        self.heartbeat = directory / "heartbeat"
        self._stopped = threading.Event()
        with contextlib.suppress(OSError):  # no heartbeat file: heartbeats are lost, not the rank
            directory.mkdir(parents=True, exist_ok=True)
            self.heartbeat.touch()

    def report_to(
        self, channel: Channel, host: str, rank: int, output: Counted, interval: float
    ) -> None:
        """From now on, every `interval` s in which the rank made progress: one Progress."""
        seen = (output.progress, self._beat())  # now, not when the thread gets to run
        threading.Thread(
            target=self._report,
            args=(channel, Progress(host, (rank,)), output, interval, seen),
            name="progress",
            daemon=True,
        ).start()

    def stop(self) -> None:
        self._stopped.set()

    def _report(
        self,
        channel: Channel,
        message: Progress,
        output: Counted,
        interval: float,
        seen: tuple[int, int],
    ) -> None:
        while not self._stopped.wait(interval):
            now = (output.progress, self._beat())
            if now == seen:
                continue
            seen = now
            try:
                channel.send(message)
            except ChannelClosed:
                return

    def _beat(self) -> int:
        try:
            return os.stat(self.heartbeat).st_mtime_ns
        except OSError:
            return 0
