"""Stopping processes: the one rule for SIGTERM, a grace period, then SIGKILL.

Everything the toolkit stops goes through here: a rank's leftover helpers (rank/tree.py), a
rank itself when the job is stopped or aborted (rank/wrapper.py), the launcher and everything
under it (launch/process.py), pip when preparation is stopped (source/usercode.py) and a
cluster host's leftovers (tools/cluster/agent.py).

- `signal_group`: a signal to a whole process group; one that is gone already is no error.
- `stop_processes`: SIGTERM each process, SIGKILL those alive `grace` seconds later, wait
  until they are gone (bounded by KILLED_WITHIN).
- `wait_ended`: wait, bounded, until processes have exited (zombies count as ended).
- `kill_processes`, `kill_tree`: SIGKILL at once (no grace) some processes, or a process's
  group and every descendant of it, also those in groups or sessions of their own (ssh
  clients, daemons); nothing is waited for.
- `escalate`: the same steps on timers, for a caller that must not block (a signal handler);
  what it has still to send can be cancelled.

psutil is imported only where a process list is needed: every rank wrapper imports this
module, and most ranks end without anything to stop.
"""

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil

# How long a SIGKILLed process may take to be gone: at once on an idle machine, but it must be
# scheduled to die, and on 2 starved cores that took more than 0.5 s (ci25).
KILLED_WITHIN = 5.0


def signal_group(pgid: int, signum: int) -> None:
    """Send `signum` to process group `pgid`; a group that is gone (or not ours) is skipped."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def stop_processes(processes: Sequence["psutil.Process"], grace: float) -> None:
    """SIGTERM every process, SIGKILL those still alive `grace` seconds later, then wait until
    they are gone, at most KILLED_WITHIN (waiting reaps those that are this process's
    children)."""
    import psutil

    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    alive = wait_ended(processes, grace)
    kill_processes(alive)
    wait_ended(alive, KILLED_WITHIN)


def wait_ended(processes: Sequence["psutil.Process"], timeout: float) -> list["psutil.Process"]:
    """Those of `processes` still running after waiting at most `timeout` s for them to end.

    A process has ended once it exits, also while it stays a zombie: an orphan adopted by a
    subreaper that reaps only at its own end (`ringleader slurm` at the time limit, where
    mpirun's ranks outlive their wrappers) is one, and psutil.wait_procs would wait for it the
    whole timeout. Each is watched through a pidfd (Linux 5.3), readable at its exit; the ones
    that are this process's children are reaped."""
    import psutil

    watched: dict[int, psutil.Process] = {}
    try:
        for process in processes:
            try:
                handle = os.pidfd_open(process.pid)
            except ProcessLookupError:
                continue  # gone already
            if process.is_running():
                watched[handle] = process
            else:  # its PID is another process's now
                os.close(handle)
    except (AttributeError, OSError):  # no pidfd here: psutil's wait, zombies included
        _close(watched)
        _, alive = psutil.wait_procs(processes, timeout=timeout)
        return list(alive)
    poller = select.poll()
    for handle in watched:
        poller.register(handle, select.POLLIN)
    deadline = time.monotonic() + timeout
    while watched and (left := deadline - time.monotonic()) > 0:
        for handle, _ in poller.poll(left * 1000):
            poller.unregister(handle)
            os.close(handle)
            with contextlib.suppress(psutil.Error):
                watched.pop(handle).wait(0)  # reaps it if it is our child
    alive = list(watched.values())
    _close(watched)
    return alive


def _close(handles: Iterable[int]) -> None:
    for handle in handles:
        os.close(handle)


def kill_processes(processes: Iterable["psutil.Process"]) -> None:
    """SIGKILL every process now; one that is gone already is skipped. Nothing is waited for."""
    import psutil

    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()


def kill_tree(pid: int) -> None:
    """SIGKILL the process group `pid` leads and every descendant of `pid`: children that run
    in groups of their own (mpirun's ssh clients) would otherwise hold the output pipes open.
    Nothing is waited for: whoever started `pid` reaps it."""
    import psutil

    descendants: list[psutil.Process] = []
    with contextlib.suppress(psutil.Error):
        descendants = psutil.Process(pid).children(recursive=True)
    signal_group(pid, signal.SIGKILL)
    kill_processes(descendants)


ESCALATION_THREAD = "ringleader-escalation"


class Escalation:
    """The signals an `escalate` still has to send, in order, from one thread; `cancel` drops
    them. Their times are fixed when it is made: a thread that starts late on a busy machine
    sends what is due at once, SIGTERM before SIGKILL (with a timer for each, a late SIGTERM
    timer let SIGKILL come first: a rank stopped with 0.4 s to go was reported as killed)."""

    def __init__(
        self,
        send: Callable[[int], None],
        steps: Sequence[tuple[float, int]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cancelled = threading.Event()
        start = clock()
        due = [(start + delay, signum) for delay, signum in steps]
        threading.Thread(
            target=self._send, args=(send, due, clock), name=ESCALATION_THREAD, daemon=True
        ).start()

    def _send(
        self, send: Callable[[int], None], due: list[tuple[float, int]], clock: Callable[[], float]
    ) -> None:
        for at, signum in due:
            if self._cancelled.wait(max(0.0, at - clock())):
                return
            send(signum)

    def cancel(self) -> None:
        self._cancelled.set()


def escalate(
    send: Callable[[int], None],
    term_after: float,
    kill_after: float,
    clock: Callable[[], float] = time.monotonic,
) -> Escalation:
    """SIGTERM through `send` after `term_after` seconds (at once, on this thread, when 0),
    SIGKILL after `kill_after` seconds, the later ones from one thread, in that order. `send`
    decides what receives the signal and skips a process that has ended."""
    later = [(kill_after, int(signal.SIGKILL))]
    if term_after > 0:
        later.insert(0, (term_after, int(signal.SIGTERM)))
    else:
        send(signal.SIGTERM)
    return Escalation(send, later, clock)
