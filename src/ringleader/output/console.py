"""Whole writes to this process's stdout/stderr, one writer at a time; prefixed lines.

With PYTHONUNBUFFERED (set in the image) sys.stdout.buffer is a raw file: one write() call may
write only part of a large block, and writes from two threads to the same pipe can interleave
inside a line. Every writer of the toolkit (its log, rank output, mpirun's own messages)
goes through here. The commands a person runs (`ringleader local|cluster`) print their hosts'
lines, each with a prefix, through a LinePrinter.
"""

import sys
import threading
from collections.abc import Iterable, Sequence
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


def prefixed(prefix: str, lines: Iterable[str]) -> str:
    """`lines` as one block of text: each after `prefix`, each ending in a newline."""
    return "".join(f"{prefix}{line}\n" for line in lines)


class LinePrinter:
    """Whole lines to one text stream, one writer at a time, each with a prefix (a host's
    name, a rank's tag). A batch of lines is one write and one flush: a job printing 100,000
    lines/s must not cost a lock, a write and a flush per line."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self.count = 0  # lines written so far

    def lines(self, prefix: str, texts: Sequence[str]) -> None:
        if not texts:
            return
        with self._lock:
            self._stream.write(prefixed(prefix, texts))
            self._stream.flush()
            self.count += len(texts)

    def line(self, text: str, prefix: str = "") -> None:
        """One line; a newline that ends `text` already is its end, not an empty line."""
        self.lines(prefix, [text.removesuffix("\n")])
