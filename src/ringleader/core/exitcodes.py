"""Exit codes of the toolkit itself. A failing rank's own code always wins over these.

The toolkit codes come from BSD's sysexits range so they rarely collide with what training
scripts return (1, 2, or 128+N after a signal).
"""

from collections.abc import Iterable

SUCCESS = 0
SIGTERM_EXIT = 143  # 128 + SIGTERM, what SageMaker and `docker stop` expect after a stop
CONFIG_ERROR = 78  # EX_CONFIG: a configuration value is wrong; the failure file names it
HOST_UNREACHABLE = 69  # EX_UNAVAILABLE: a host or its MPI daemon never answered in time
INTERNAL_ERROR = 70  # EX_SOFTWARE: the launcher itself failed (mpirun crashed, a bug)
HOST_LOST = 75  # EX_TEMPFAIL: a host (leader or worker) vanished or went silent mid-job
HEALTH_CHECK_FAILED = 71  # EX_OSERR: a host failed its health check; no rank was started
PROTOCOL_ERROR = 76  # EX_PROTOCOL: a host sent messages that are not ringleader's protocol
# The straggler watch named a rank and ringleader_straggler_action=stop ended the job: replace
# its host (EX_OSFILE's number, unused by ringleader otherwise).
STRAGGLER = 72
# Restarts cannot help (ringleader_restart_on refuses the cause, or attempts in a row made no
# progress): whatever runs the job should not run it again. Just past sysexits' range.
DO_NOT_RETRY = 79
# No rank made progress for ringleader_hang_timeout: the job hung (GNU timeout's "timed out").
HUNG = 124


def signal_exit_code(signal_number: int) -> int:
    """The shell convention for a process killed by a signal."""
    return 128 + signal_number


def first_failure(codes: Iterable[int]) -> int:
    """The first non-zero code (in the order given), or 0 when every one is 0."""
    return next((code for code in codes if code != 0), 0)


def job_exit_code(
    leader: int | None, hosts: Iterable[int | None], *, lost: int, unknown_fails: bool = False
) -> int:
    """A job's exit code from its hosts' own (None: not known, the host's connection or the
    wait for it failed); `hosts` may include the leader.

    The leader's code is the job's: it told every host its verdict before it exited. When the
    leader's is not known, the first failure another host knows stands for it (each host ends
    with the leader's verdict), else `lost`. With `unknown_fails`, a host whose code is not
    known is a failure (`lost`) unless the leader's own code is one already.
    """
    codes = list(hosts)
    if leader is not None and leader != 0:
        return leader
    if unknown_fails and (leader is None or None in codes):
        return lost
    if leader is not None:
        return leader
    return first_failure(code for code in codes if code is not None) or lost
