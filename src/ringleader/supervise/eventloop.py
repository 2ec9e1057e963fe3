"""Bounded waits on a state machine's event queue, against an injectable clock."""

import queue
import time
from dataclasses import dataclass
from typing import Protocol

from ringleader.wire.events import Event


@dataclass(frozen=True)
class Now:
    """The moment of a state machine's step: the monotonic clock for deadlines, the wall clock
    for facts."""

    monotonic: float
    wall: float


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def time(self) -> float: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()


class EventSource(Protocol):
    def next(self, deadline: float | None) -> Event | None:
        """The next event, or None once `deadline` (the clock's monotonic time) has passed."""


class EventQueue(queue.Queue[Event]):
    """What the control server, the host agent, the launcher and signals put events in."""

    def next(self, deadline: float | None) -> Event | None:
        if deadline is None:
            return self.get()
        try:
            return self.get(timeout=max(deadline - time.monotonic(), 0.0))
        except queue.Empty:
            return None


def earliest(*deadlines: float | None) -> float | None:
    present = [deadline for deadline in deadlines if deadline is not None]
    return min(present) if present else None
