"""Exit codes of the toolkit itself. A failing rank's own code always wins over these.

The toolkit codes come from BSD's sysexits range so they rarely collide with what training
scripts return (1, 2, or 128+N after a signal).
"""

SUCCESS = 0
SIGTERM_EXIT = 143  # 128 + SIGTERM, what SageMaker and `docker stop` expect after a stop
CONFIG_ERROR = 78  # EX_CONFIG: a configuration value is wrong; the failure file names it
HOST_UNREACHABLE = 69  # EX_UNAVAILABLE: a host or its MPI daemon never answered in time
INTERNAL_ERROR = 70  # EX_SOFTWARE: the launcher itself failed (mpirun crashed, a bug)
HOST_LOST = 75  # EX_TEMPFAIL: a host (leader or worker) vanished or went silent mid-job
PROTOCOL_ERROR = 76  # EX_PROTOCOL: a host sent messages that are not ringleader's protocol


def signal_exit_code(signal_number: int) -> int:
    """The shell convention for a process killed by a signal."""
    return 128 + signal_number
