"""A rank's progress for the hang watch and the leader's status line: lines of output,
heartbeats from the rank itself, and its step (ringleader.rank.steps).

A rank that is quiet by design touches the heartbeat file its environment names
(`ringleader.progress()` from Python, `touch "$RINGLEADER_PROGRESS_FILE"` from a shell); with a
step it writes the number there (`ringleader.progress(step=N, total=M)`, `echo N M >
"$RINGLEADER_PROGRESS_FILE"`). Its wrapper looks at that file, at the output line count and at
the step its output gave once per interval, and tells the host agent when the rank moved,
with its step when it has one.
"""

import contextlib
import os
import threading
from pathlib import Path
from typing import Protocol

from ringleader.core.progress import RankStep
from ringleader.rank.steps import Seen, StepFinder, heartbeat_step, moved
from ringleader.rank.waits import WaitSampler
from ringleader.wire.messages import Progress
from ringleader.wire.protocol import Channel, ChannelClosed


class Counted(Protocol):
    progress: int  # lines that showed progress so far
    steps: StepFinder | None  # the step its lines gave, when a step regex is set


class ProgressWatch:
    def __init__(self, directory: Path) -> None:
        self.heartbeat = directory / "heartbeat"
        self._stopped = threading.Event()
        with contextlib.suppress(OSError):  # no heartbeat file: heartbeats are lost, not the rank
            directory.mkdir(parents=True, exist_ok=True)
            self.heartbeat.touch()

    def report_to(
        self,
        channel: Channel,
        host: str,
        rank: int,
        output: Counted,
        interval: float,
        sampler: WaitSampler | None = None,
    ) -> None:
        """From now on, every `interval` s in which the rank made progress: one Progress, with
        its step and its wait samples so far (`sampler`: the straggler watch's); one with no
        rank in it when only its wait samples changed."""
        seen = self._look(rank, output, None)  # now, not when the thread gets to run
        threading.Thread(
            target=self._report,
            args=(channel, host, rank, output, interval, seen, sampler),
            name="progress",
            daemon=True,
        ).start()

    def stop(self) -> None:
        self._stopped.set()

    def _report(
        self,
        channel: Channel,
        host: str,
        rank: int,
        output: Counted,
        interval: float,
        seen: Seen,
        sampler: WaitSampler | None,
    ) -> None:
        counted = None if sampler is None else sampler.count()
        while not self._stopped.wait(interval):
            now = self._look(rank, output, seen)
            count = None if sampler is None else sampler.count()
            if moved(seen, now):
                seen = now
                ranks: tuple[int, ...] = (rank,)
            elif count == counted:
                continue
            else:
                ranks = ()
            counted = count
            steps = () if now.step is None else (now.step,)
            waits = () if count is None or not count.samples else (count,)
            try:
                channel.send(Progress(host, ranks, steps, waits))
            except ChannelClosed:
                return

    def _look(self, rank: int, output: Counted, before: Seen | None) -> Seen:
        """What the rank shows now; its heartbeat file is read only when it changed."""
        beat = self._beat()
        if before is None or beat != before.beat:
            said = heartbeat_step(self._said(), rank)
        else:
            said = before.said
        from_output = None if output.steps is None else output.steps.step
        step = said
        if step is None and from_output is not None:
            step = RankStep(rank, from_output)
        return Seen(output.progress, beat, said, step)

    def _beat(self) -> int:
        try:
            return os.stat(self.heartbeat).st_mtime_ns
        except OSError:
            return 0

    def _said(self) -> str:
        try:
            return self.heartbeat.read_text(errors="replace")[:256]
        except OSError:
            return ""
