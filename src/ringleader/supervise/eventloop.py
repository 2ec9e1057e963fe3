"""Bounded waits on a state machine's event queue, against an injectable clock."""

import queue
import time
from typing import NamedTuple, Protocol

from ringleader.wire.events import Event


class Now(NamedTuple):
    """The moment of a state machine's step: the monotonic clock for deadlines, the wall clock
    for facts. (A tuple: one is made at every step.)"""

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


# The longest the main thread blocks at once. A signal (SIGTERM) that the kernel delivers to
# another thread does not interrupt the main thread's wait, and Python runs its handler only in
# the main thread: a wait without a deadline would hold the handler, and with it the stop,
# until the next event (seen: a worker's SIGTERM handled 60 s late, after a restart's backoff).
SIGNAL_CHECK_SECONDS = 1.0


class EventQueue(queue.Queue[Event]):
    """What the control server, the host agent, the launcher and signals put events in."""

    def next(self, deadline: float | None) -> Event | None:
        while True:
            now = time.monotonic()
            left = SIGNAL_CHECK_SECONDS if deadline is None else deadline - now
            try:
                return self.get(timeout=max(min(left, SIGNAL_CHECK_SECONDS), 0.0))
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    return None


def earliest(*deadlines: float | None) -> float | None:
    present = [deadline for deadline in deadlines if deadline is not None]
    return min(present) if present else None
