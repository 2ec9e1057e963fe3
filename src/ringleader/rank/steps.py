"""A rank's step, seen by its wrapper: from its heartbeat file (`ringleader.progress(step=N,
total=M)`), else from its output lines matched by the job's step regex (ringleader_step_regex,
or the regex of the metric definition ringleader_step_metric names; its first group is the
step, read as a number).

Once a rank has a step, only a new step is progress (for the hang watch and a restart's "made
progress"); a rank without one makes progress with every output line and heartbeat.
"""

import contextlib
import re
from dataclasses import dataclass

from ringleader.config.metric_definitions import literal_prefix
from ringleader.core.progress import RankStep, parse_heartbeat


class StepFinder:
    """The last step a rank's output lines gave (`step`), matched by `regex`."""

    def __init__(self, regex: str) -> None:
        self._pattern = re.compile(regex)
        self._required = literal_prefix(self._pattern)  # a cheap test skips most lines
        self.step: int | None = None

    def look(self, line: str) -> None:
        if self._required and self._required not in line:
            return
        found = self._pattern.search(line)
        if found is None:
            return
        with contextlib.suppress(TypeError, ValueError, OverflowError, IndexError):
            self.step = int(float(found.group(1)))


@dataclass(frozen=True)
class Seen:
    """What a rank had shown when its wrapper last looked."""

    lines: int  # output lines that show progress
    beat: int  # the heartbeat file's modification time (ns), 0 when there is none
    said: RankStep | None  # the step its heartbeat file held then
    step: RankStep | None  # its step (the heartbeat's, else its output's), when it has one


def heartbeat_step(text: str, rank: int) -> RankStep | None:
    """The step a rank's heartbeat file holds, if any."""
    said = parse_heartbeat(text)
    return None if said is None else RankStep(rank, *said)


def moved(before: Seen, now: Seen) -> bool:
    """Whether the rank made progress between two looks: a new step once it has one, else a
    new line or heartbeat."""
    if before.step is not None or now.step is not None:
        return now.step != before.step
    return (now.lines, now.beat) != (before.lines, before.beat)
