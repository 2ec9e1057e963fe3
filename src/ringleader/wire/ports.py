"""Why a port cannot be listened on, and who holds it: for the failure file of a leader whose
control port is taken."""

import errno


def listen_problem(port: int, error: OSError) -> str:
    """What a failed bind of `port` means, naming the process that holds it when it is found."""
    if error.errno != errno.EADDRINUSE:
        return f"cannot listen on port {port}: {error.strerror or error}"
    holder = port_holder(port)
    return f"port {port} is already in use on this host, {holder or 'by a process not seen here'}"


def port_holder(port: int) -> str | None:
    """The process listening on TCP `port` ("by NAME (pid N: COMMAND LINE)"), or None when no
    listener of this host's processes is seen (another user's, or outside this PID namespace)."""
    import psutil  # only when a port is taken: the entry point starts faster without it

    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    pids = sorted(
        {
            connection.pid
            for connection in connections
            if connection.status == psutil.CONN_LISTEN
            and connection.laddr
            and connection.laddr.port == port
            and connection.pid is not None
        }
    )
    if not pids:
        return None
    return ", ".join(_describe(pid) for pid in pids)


def _describe(pid: int) -> str:
    import psutil

    try:
        process = psutil.Process(pid)
        name, command = process.name(), " ".join(process.cmdline())
    except (psutil.Error, OSError):
        return f"by pid {pid}"
    shown = command if len(command) <= 200 else command[:197] + "..."
    return f"by {name} (pid {pid}: {shown})" if shown else f"by {name} (pid {pid})"
