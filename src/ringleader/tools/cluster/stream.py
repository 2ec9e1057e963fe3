"""Copying a stream from one process to another for as long as it moves: a large model/ takes
as long as it takes, and a transfer that stops moving is given up after a bounded stall."""

import os
import selectors
import time
from collections.abc import Callable
from typing import IO

CHUNK = 1 << 20
Progress = Callable[[int], None]  # bytes copied so far


def copy_while_flowing(
    source: IO[bytes], sink: IO[bytes], stall: float, progress: Progress
) -> str | None:
    """Copy `source` to `sink` until `source` ends; the problem when nothing arrived for
    `stall` seconds, or when `sink` refuses data, else None."""
    copied = 0
    fd = source.fileno()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            if not selector.select(timeout=stall):
                return f"nothing arrived for {stall:g} s (after {_size(copied)})"
            data = os.read(fd, CHUNK)
            if not data:
                return None
            try:
                sink.write(data)
                sink.flush()
            except OSError as error:  # the receiving tar ended (a full disk, say)
                return f"the receiver stopped after {_size(copied)}: {error.strerror or error}"
            copied += len(data)
            progress(copied)


def _size(count: int) -> str:
    return f"{count / (1 << 20):.1f} MiB"


class ProgressNote:
    """A line now and then (every `every` seconds at most) while a copy is long."""

    def __init__(self, say: Callable[[str], None], what: str, every: float = 10.0) -> None:
        self._say, self._what, self._every = say, what, every
        self._next = time.monotonic() + every

    def __call__(self, copied: int) -> None:
        if time.monotonic() >= self._next:
            self._next = time.monotonic() + self._every
            self._say(f"{self._what}: {_size(copied)} so far")
