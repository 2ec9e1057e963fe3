"""The code a rank's Python chose at its exit, kept for when a stop cuts that exit short.

Under Horovod, a failing rank's `sys.exit(7)` runs Horovod's shutdown at interpreter exit. That
shutdown fails the other ranks' collectives, their exits reach mpirun first, and mpirun's abort
stops the failing rank while it is still exiting: without the note it is reported as killed by
SIGTERM, and no rank as the cause of the failure. Our sitecustomize (rank/site) writes the code
to `$RINGLEADER_EXIT_DIR/<pid>` when `sys.exit` is called in the main thread or an exception
ends the program; the wrapper reads its child's note when a stop's signal ended the child.

Not noted: `raise SystemExit(...)` (Python's own `exit()` too), and a program that catches the
SystemExit of its own `sys.exit` and goes on (its note stays).

mpirun's daemon may also kill the wrapper itself before it reports (a second after its stop, on
a busy machine): the host agent then reads the note, whose path the wrapper gave it with the
rank's start.
"""

from pathlib import Path

EXIT_DIR_VARIABLE = "RINGLEADER_EXIT_DIR"  # the same name is written in site/sitecustomize.py


def note_path(directory: Path, pid: int) -> Path:
    """Where process `pid` notes its code."""
    return directory / str(pid)


def read_exit_note(path: Path) -> int | None:
    """The code noted in `path` as its process began to exit, if it did."""
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None
