"""Stopping processes: SIGTERM, a grace period, SIGKILL (core.processes), on real processes."""

import signal
import subprocess
import sys
import threading
import time

import psutil

from ringleader.core import processes

STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(60)"
)
SAYS_SIGTERM = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: (print('SIGTERM', flush=True), sys.exit(0)))\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)
POLITE = "import time; time.sleep(60)"


def start(code: str, **options: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code], **options)  # type: ignore[call-overload]


def test_stop_processes_terms_then_kills_what_ignores_sigterm() -> None:
    polite = start(SAYS_SIGTERM, stdout=subprocess.PIPE)
    stubborn = start(STUBBORN + "\n", stdout=subprocess.PIPE)
    assert polite.stdout is not None and stubborn.stdout is not None
    assert polite.stdout.readline() == stubborn.stdout.readline() == b"ready\n"
    watched = [psutil.Process(polite.pid), psutil.Process(stubborn.pid)]
    begun = time.monotonic()
    processes.stop_processes(watched, 1.0)  # reaps them: they are this test's children
    assert time.monotonic() - begun >= 0.9  # the stubborn one had the whole grace
    assert polite.stdout.read() == b"SIGTERM\n"
    assert stubborn.stdout.read() == b""
    assert not any(psutil.pid_exists(process.pid) for process in watched)


def test_kill_tree_kills_the_group_and_descendants_in_sessions_of_their_own() -> None:
    parent = start(
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', {POLITE!r}], start_new_session=True)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n",
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert parent.stdout is not None
    child = psutil.Process(int(parent.stdout.readline()))
    processes.kill_tree(parent.pid)
    assert parent.wait(5) == -signal.SIGKILL
    child.wait(5)  # raises psutil.TimeoutExpired if it lived on
    processes.kill_tree(parent.pid)  # gone already: no error


def test_signal_group_of_a_gone_group_is_no_error() -> None:
    process = start("pass", start_new_session=True)
    process.wait(5)
    processes.signal_group(process.pid, signal.SIGTERM)


def test_escalate_sends_sigterm_now_or_later_then_sigkill() -> None:
    sent: list[tuple[int, float]] = []
    begun = time.monotonic()

    def send(signum: int) -> None:
        sent.append((signum, time.monotonic() - begun))

    processes.escalate(send, 0.0, 0.2)
    assert [signum for signum, _ in sent] == [signal.SIGTERM]  # at once, on this thread
    processes.escalate(send, 0.1, 0.3)
    deadline = time.monotonic() + 5
    while len(sent) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    signals = sorted(sent, key=lambda item: item[1])
    assert [signum for signum, _ in signals] == [
        signal.SIGTERM,
        signal.SIGTERM,
        signal.SIGKILL,
        signal.SIGKILL,
    ]
    assert signals[1][1] >= 0.1 and signals[3][1] >= 0.3


def test_escalate_keeps_the_order_when_its_thread_starts_late() -> None:
    """Both signals are due when the thread first looks (its clock jumped 10 s past the call):
    SIGTERM goes before SIGKILL, at once."""
    sent: list[int] = []
    both = threading.Event()
    times = iter([0.0])

    def send(signum: int) -> None:
        sent.append(signum)
        if len(sent) == 2:
            both.set()

    processes.escalate(send, 0.2, 0.4, clock=lambda: next(times, 10.0))
    assert both.wait(5)
    assert sent == [signal.SIGTERM, signal.SIGKILL]


def test_a_cancelled_escalation_sends_nothing_more() -> None:
    """Cancelled before its thread first looks, when both signals would be due."""
    sent: list[int] = []
    cancelled = threading.Event()
    times = iter([0.0])

    def clock() -> float:
        now = next(times, None)
        if now is not None:
            return now
        assert cancelled.wait(5)
        return 10.0

    escalation = processes.escalate(sent.append, 0.3, 0.6, clock=clock)
    escalation.cancel()
    cancelled.set()
    for thread in threading.enumerate():
        if thread.name == processes.ESCALATION_THREAD:
            thread.join(5)
    assert sent == []


ZOMBIE_CHILD = (  # forks a child that exits at once and is never reaped
    "import os, time\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os._exit(3)\n"
    "print(pid, flush=True)\n"
    "time.sleep(60)\n"
)


def test_wait_ended_counts_a_zombie_that_is_not_our_child_as_ended() -> None:
    """An orphan's parent may reap it only at its own end (a subreaper): it has ended all the
    same. psutil.wait_procs would give it back as alive after the whole wait."""
    parent = start(ZOMBIE_CHILD, stdout=subprocess.PIPE)
    assert parent.stdout is not None
    zombie = psutil.Process(int(parent.stdout.readline()))
    try:
        deadline = time.monotonic() + 5
        while zombie.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.01)
        assert processes.wait_ended([zombie], 3.0) == []
    finally:
        parent.kill()
        parent.wait()


def test_wait_ended_gives_back_what_still_runs_and_reaps_its_own_children() -> None:
    running, ended = start(POLITE), start("pass")
    try:
        watched = [psutil.Process(running.pid), psutil.Process(ended.pid)]
        assert processes.wait_ended(watched, 2.0) == [watched[0]]
        assert not psutil.pid_exists(ended.pid)  # reaped: no zombie left behind
    finally:
        running.kill()
        running.wait()
