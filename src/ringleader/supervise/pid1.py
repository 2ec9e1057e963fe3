"""The entry point as a container's first process (`ENTRYPOINT ["ringleader-entrypoint"]`,
no init such as tini): PID 1 forks the real entry point, passes it the signals a container
gets, reaps every orphan the job leaves (mpirun's daemons, ssh sessions) and exits with the
entry point's code."""

import contextlib
import os
import signal
from collections.abc import Callable

from ringleader.core import exitcodes
from ringleader.core.exiting import exit_at_once

# What `docker stop`, `docker kill -s` and a terminal send; the entry point decides what each
# means. PID 1 would otherwise ignore them (the kernel drops default-action signals to PID 1).
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


def exit_code(status: int) -> int:
    """A wait status as a shell reports it: the code, or 128 + the signal that ended it."""
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def run_as_init(entry_point: Callable[[], int]) -> int:
    """Run `entry_point` in a child process; reap children until it has ended."""
    child = 0
    early: list[int] = []  # signals that came before the child existed

    def forward(signum: int, _frame: object) -> None:
        if not child:
            early.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):  # it has ended: the wait sees it
            os.kill(child, signum)

    # Before the fork, so that no signal between fork and handler is lost.
    for signum in FORWARDED:
        signal.signal(signum, forward)
    child = os.fork()
    if child == 0:
        for signum in FORWARDED:
            signal.signal(signum, signal.SIG_DFL)
        code = exitcodes.INTERNAL_ERROR
        try:
            code = entry_point()
        finally:
            exit_at_once(code)
    for pending in early:
        forward(pending, None)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return exitcodes.INTERNAL_ERROR  # no child left although ours was never reaped
        if pid == child:
            return exit_code(status)
