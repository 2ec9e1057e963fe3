"""Prefixed lines: the tags of rank output, and the commands a person runs (`ringleader
local|cluster`) printing their hosts' lines through a LinePrinter. Whole writes to stdout and
stderr are ringleader.core.console's.
"""

import threading
from collections.abc import Iterable, Sequence
from typing import IO


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
