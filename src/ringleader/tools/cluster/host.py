"""The container entry point's supervision on a cluster host (`python -m
ringleader.tools.cluster.host`), started by the host's agent with the job's locations in the
environment; the machine's own sshd serves mpirun."""

from ringleader.supervise.entrypoint import exit_now, main

if __name__ == "__main__":
    exit_now(main([], own_sshd=False))
