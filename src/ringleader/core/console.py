"""Whole writes to this process's stdout/stderr, one writer at a time.

With PYTHONUNBUFFERED (set in the image) sys.stdout.buffer is a raw file: one write() call may
write only part of a large block, and writes from two threads to the same pipe can interleave
inside a line. Every writer of the toolkit (its log, rank output, mpirun's own messages)
goes through here.
"""

import sys
import threading
from typing import IO

_lock = threading.Lock()


def write(data: bytes, stream: IO[bytes] | None = None) -> None:
    """Write all of `data` to `stream` (default stdout) before anyone else writes."""
    target = stream if stream is not None else sys.stdout.buffer
    view = memoryview(data)
    with _lock:
        while view:
            written = target.write(view)
            view = view[len(view) if written is None else written :]
        target.flush()
