"""Waiting for a directory to change: Linux inotify (through libc), so a follower wakes when
the job writes a line or ends, not on a timer. Each wait is bounded by the caller's timeout;
without inotify (another kernel, a libc without it) the wait is just that bounded interval.

Another descriptor may be watched too: a follower started over ssh watches its stdin, whose end
means the one who asked has gone, so it stops instead of following on for no one."""

import contextlib
import ctypes
import ctypes.util
import os
import select
from pathlib import Path

# <sys/inotify.h>
_IN_MODIFY, _IN_CLOSE_WRITE, _IN_MOVED_TO, _IN_CREATE = 0x2, 0x8, 0x80, 0x100
_MASK = _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE


class DirectoryWatch:
    def __init__(self, directory: Path, also: int | None = None) -> None:
        self._also = also
        self._fd = _inotify(directory)

    @property
    def uses_events(self) -> bool:
        return self._fd is not None

    def wait(self, timeout: float) -> bool:
        """Until something in the directory changes or `timeout` seconds pass. False when the
        other descriptor ended (or failed): no one is waiting for us any more."""
        watched = [fd for fd in (self._fd, self._also) if fd is not None]
        if not watched:
            select.select([], [], [], max(timeout, 0.0))
            return True
        ready, _, _ = select.select(watched, [], [], max(timeout, 0.0))
        if self._fd is not None and self._fd in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(self._fd, 65536)  # the events themselves do not matter: we re-read
        if self._also is not None and self._also in ready:
            try:
                return bool(os.read(self._also, 4096))
            except OSError:
                return False
        return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _inotify(directory: Path) -> int | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        fd = int(libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    if libc.inotify_add_watch(fd, os.fsencode(str(directory)), _MASK) < 0:
        os.close(fd)
        return None
    return fd
