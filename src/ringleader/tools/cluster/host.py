"""The container entry point's supervision on a cluster host (`python -m
ringleader.tools.cluster.host`), started by the host's agent with the job's locations in the
environment; the machine's own sshd serves mpirun."""

import signal

from ringleader.supervise.entrypoint import exit_now, main

if __name__ == "__main__":
    # The agent ignores SIGHUP and children inherit that; here a hang-up from the agent (its
    # connection to the leader's machine is gone) must end the host's supervision.
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    exit_now(main([], own_sshd=False))
