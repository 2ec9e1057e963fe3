"""Rank output on the leader: whole tagged lines to stdout/stderr, filtered, metrics extracted.

Rank wrappers send their output as batches of whole lines over the host agent (and, from
workers, the control channel); nothing goes through mpirun's own output forwarding, which cuts
long lines and interleaves ranks mid-line.
"""

import contextlib
import sys
from typing import IO

from ringleader.config.selection import RankSelection
from ringleader.core import console
from ringleader.output.console import prefixed
from ringleader.output.metrics import MetricRecorder
from ringleader.wire.protocol import Channel, ChannelClosed, decode_output


def tag(host: str, rank: int) -> str:
    """The documented prefix of every rank output line; metric regexes match after it."""
    return f"[{host} rank {rank}] "


class OutputPrinter:
    def __init__(
        self,
        shown: RankSelection,
        metric_ranks: RankSelection,
        metrics: MetricRecorder | None,
        stdout: IO[bytes] | None = None,
        stderr: IO[bytes] | None = None,
    ) -> None:
        self._shown = shown
        self._metric_ranks = metric_ranks
        self._metrics = metrics
        self._streams = {
            "stdout": stdout or sys.stdout.buffer,
            "stderr": stderr or sys.stderr.buffer,
        }
        self.delivered = 0  # output frames taken so far (a sign of progress, not an exact count)
        self.unwritable: str | None = None  # why rank output is no longer shown, once it is not

    def deliver(self, frame: bytes) -> None:
        """One output frame: a batch of whole lines from one rank."""
        self.delivered += 1
        message = decode_output(frame)
        rank, host = int(message["rank"]), str(message["host"])
        lines: list[str] = message["lines"]
        if rank in self._shown and lines and not self.unwritable:
            data = prefixed(tag(host, rank), lines).encode(errors="replace")
            try:
                console.write(
                    data, self._streams.get(str(message["stream"]), self._streams["stdout"])
                )
            except OSError as error:  # a closed or full stdout must not stop the job's control
                self.unwritable = f"rank output not shown from here on: {error.strerror or error}"
        if self._metrics is not None and rank in self._metric_ranks:
            for line in lines:
                self._metrics.observe(line, rank, host)

    def close(self) -> list[str]:
        """Close the metrics file; the per-metric summary lines for the end of the log."""
        lines = [f"warning: {self.unwritable}"] if self.unwritable else []
        if self._metrics is None:
            return lines
        self._metrics.close()
        return lines + self._metrics.summary_lines()


class OutputRelay:
    """On a worker: passes its ranks' output batches on to the leader, in order."""

    def __init__(self) -> None:
        self._channel: Channel | None = None

    def attach(self, channel: Channel) -> None:
        self._channel = channel

    def deliver(self, frame: bytes) -> None:
        channel = self._channel
        if channel is not None:
            # A broken channel shows up as a lost leader; the per-rank log keeps the lines.
            with contextlib.suppress(ChannelClosed):
                channel.send_frame(frame)
