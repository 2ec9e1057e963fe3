"""The state machines' event queue: its waits end at their deadline, and signals reach the
main thread while it waits."""

import signal
import threading
import time

from ringleader.supervise.eventloop import EventQueue
from ringleader.wire.events import SigtermReceived, WorkerReady


def test_a_signal_delivered_to_another_thread_reaches_a_waiting_main_thread() -> None:
    """The kernel may deliver SIGTERM to any thread; Python runs the handler in the main
    thread only, once it runs again. A main thread waiting for events without a deadline still
    takes the handler's event, not the next event that happens to come."""
    events = EventQueue()
    late = WorkerReady("algo-2", 1)  # what else would have woken it, 10 s later

    def on_signal(_signum: int, _frame: object) -> None:
        threading.Thread(target=events.put, args=(SigtermReceived("algo-2"),)).start()

    previous = signal.signal(signal.SIGUSR1, on_signal)
    timer = threading.Timer(10.0, events.put, args=(late,))
    try:
        timer.start()
        sender = threading.Thread(
            target=lambda: signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)
        )
        sender.start()  # the signal goes to the sender thread, not to the main thread
        assert events.next(None) == SigtermReceived("algo-2")
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)


def test_next_returns_none_once_the_deadline_passed() -> None:
    events = EventQueue()
    deadline = time.monotonic() + 0.2
    assert events.next(deadline) is None
    assert time.monotonic() >= deadline
    events.put(WorkerReady("algo-2", 1))
    assert events.next(time.monotonic() - 1.0) == WorkerReady("algo-2", 1)  # waiting first
