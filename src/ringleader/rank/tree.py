"""Every process a rank started ends when the rank ends.

A training script may start helpers in a session of their own (`start_new_session=True`, a
daemon that double-forks): killing the rank's process group misses them, and one that inherited
the rank's stdout would hold the job's end hostage. The wrapper becomes a child subreaper, so
orphaned descendants are re-parented to it instead of to PID 1, and after the rank's main
process exits it ends whatever is left of its tree.
"""

import contextlib
import ctypes
import os
from pathlib import Path

from ringleader.core.processes import stop_processes

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux); False where the kernel does not offer it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def end_descendants(grace: float) -> list[str]:
    """SIGTERM every descendant of this process, SIGKILL those alive `grace` s later, reap all.

    Returns "pid (name)" for each process that had to be ended."""
    if has_no_children():  # the usual end: nothing to do, and no psutil import to pay for
        return []
    import psutil  # only here: each rank's wrapper starts faster without it

    descendants = psutil.Process().children(recursive=True)
    ended = []
    for process in descendants:
        with contextlib.suppress(psutil.Error):
            ended.append(f"{process.pid} ({process.name()})")
    stop_processes(descendants, grace)
    _reap_adopted()
    return ended


def _reap_adopted() -> None:
    """Collect exit statuses of adopted orphans nobody else waits for (no zombies left)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def has_no_children(task_dir: Path = Path("/proc/self/task")) -> bool:
    """True when no thread of this process has a child (not even an unreaped one); False
    also when the kernel does not say (no /proc/PID/task/TID/children)."""
    try:
        return all(not (task / "children").read_text().strip() for task in task_dir.iterdir())
    except OSError:
        return False
