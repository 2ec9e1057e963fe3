"""Splitting a byte stream into whole lines, the way a terminal shows them.

`\\n`, `\\r\\n` and a lone `\\r` all end a line, so each update of a carriage-return progress
bar becomes a line of its own instead of one huge line that only appears when the bar ends.
Lines longer than `max_line` bytes are cut into pieces of that size so no message can grow
without bound.
"""

import re

MAX_LINE_BYTES = 256 * 1024
_TERMINATOR = re.compile(rb"\r\n|\r|\n")


class LineSplitter:
    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self._pending = b""
        self._max_line = max_line
        self._after_cr = False  # the stream ended in \r: a \n starting the next chunk is its

    def feed(self, data: bytes) -> list[bytes]:
        """The complete lines in `data` (plus what was pending), without their terminators."""
        if self._after_cr and data.startswith(b"\n"):
            data = data[1:]
        buffer = self._pending + data
        self._after_cr = buffer.endswith(b"\r")
        lines = _TERMINATOR.split(buffer)
        self._pending = lines.pop()
        pieces = [piece for line in lines for piece in self._cut(line)]
        while len(self._pending) >= self._max_line:
            pieces.append(self._pending[: self._max_line])
            self._pending = self._pending[self._max_line :]
        return pieces

    def flush(self) -> list[bytes]:
        """What is left at the end of the stream: a last line without a terminator."""
        rest, self._pending = self._pending, b""
        return [rest] if rest else []

    def _cut(self, line: bytes) -> list[bytes]:
        if len(line) <= self._max_line:
            return [line]
        return [
            line[index : index + self._max_line] for index in range(0, len(line), self._max_line)
        ]
