"""ringleader: a multi-host MPI training entry point for SageMaker-style Docker images."""

import contextlib
import os

__version__ = "0.1.0"


def progress(step: int | None = None, total: int | None = None) -> None:
    """Tell ringleader that this rank made progress: a heartbeat, and with `step` (and
    `total`) how far it is, for the leader's status line, its ETA and its straggler watch.

    For scripts that are quiet by design (ringleader_hang_timeout counts output lines too), or
    to give the steps without a ringleader_step_regex. Outside a ringleader job it does
    nothing, and it never raises: a heartbeat must not break training. Cheap enough to call
    every step (one utime, or one write of a few bytes)."""
    from ringleader.core.paths import PROGRESS_FILE_VARIABLE

    path = os.environ.get(PROGRESS_FILE_VARIABLE)
    if not path:
        return
    with contextlib.suppress(OSError, TypeError, ValueError, OverflowError):
        if step is None:
            os.utime(path)
            return
        said = f"{int(step)}" if total is None else f"{int(step)} {int(total)}"
        fd = _heartbeats.get(path)
        if fd is None:
            fd = _heartbeats[path] = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        # one record at the file's start, padded: no truncate, and a reader never sees a
        # shorter number's leftovers
        os.pwrite(fd, said.ljust(_HEARTBEAT_BYTES).encode()[:_HEARTBEAT_BYTES], 0)


_HEARTBEAT_BYTES = 48  # two numbers of up to 20 digits, a space, padding
_heartbeats: dict[str, int] = {}  # heartbeat file -> its descriptor, opened once
