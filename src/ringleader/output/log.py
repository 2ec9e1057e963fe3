"""The toolkit's own log lines: `[ringleader <host>] message` on stdout, flushed at once."""

import contextlib
import time

from ringleader.core import console

_host = "?"


def set_host(host: str) -> None:
    global _host
    _host = host


def log(message: str) -> None:
    """Best-effort: a stdout that is closed or full (a log volume that filled) never stops the
    job; its result files and exit code still tell."""
    now = time.time()
    stamp = time.strftime("%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}"
    line = f"[ringleader {_host}] {stamp} {message}\n".encode()
    with contextlib.suppress(OSError):
        console.write(line)
