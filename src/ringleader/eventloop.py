"""Bounded waits on a state machine's event queue."""

import queue
import time

from ringleader.events import Event


def next_event(events: "queue.Queue[Event]", deadline: float | None) -> Event | None:
    """The next event, or None once `deadline` (a time.monotonic() value) has passed."""
    if deadline is None:
        return events.get()
    try:
        return events.get(timeout=max(deadline - time.monotonic(), 0.0))
    except queue.Empty:
        return None


def earliest(*deadlines: float | None) -> float | None:
    present = [deadline for deadline in deadlines if deadline is not None]
    return min(present) if present else None
