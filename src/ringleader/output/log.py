"""The toolkit's own log lines: `[ringleader <host>] message` on stdout, flushed at once, and
every line also in the host's log file (`logs/<host>/ringleader.log` in the job's output
data), with the details that stdout shows only with `ringleader_verbose`."""

import contextlib
import os
import time
from pathlib import Path

from ringleader.core import console

LOG_FILE_NAME = "ringleader.log"

_host = "?"
_kept_under: Path | None = None  # where the host's log file goes, once the host is known
_kept_fd: int | None = None
_verbose = False


def keep_under(log_dir: Path) -> None:
    """From the host's name on (set_host), every line also goes to LOG_DIR/<host>/ringleader.log."""
    global _kept_under
    _kept_under = log_dir


def set_host(host: str) -> None:
    global _host, _kept_fd
    _host = host
    if _kept_under is not None and _kept_fd is None:
        folder = _kept_under / host
        # Best-effort: without its log file the job runs as before (a full or read-only disk).
        with contextlib.suppress(OSError):
            folder.mkdir(parents=True, exist_ok=True)
            _kept_fd = os.open(folder / LOG_FILE_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND)


def set_verbose(verbose: bool) -> None:
    global _verbose
    _verbose = verbose


def log(message: str) -> None:
    """Best-effort: a stdout that is closed or full (a log volume that filled) never stops the
    job; its result files and exit code still tell."""
    line = _line(message)
    with contextlib.suppress(OSError):
        console.write(line)
    _keep(line)


def detail(message: str) -> None:
    """A line for whoever looks into how the job ran (pulse statistics): in the host's log file,
    on stdout only with `ringleader_verbose`."""
    if _verbose:
        log(message)
    else:
        _keep(_line(message))


def _line(message: str) -> bytes:
    now = time.time()
    stamp = time.strftime("%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}"
    return f"[ringleader {_host}] {stamp} {message}\n".encode()


def _keep(line: bytes) -> None:
    if _kept_fd is not None:
        with contextlib.suppress(OSError):
            os.write(_kept_fd, line)
