"""Finding processes: by what their environment carries (a cluster job's mark, an attempt of
the job), and by the TCP port they listen on. psutil is imported only when asked: the entry
point starts without it."""

import contextlib
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil


def processes_carrying(variables: Mapping[str, str]) -> list["psutil.Process"]:
    """This user's processes whose environment has every one of `variables` with its value,
    except this one."""
    import psutil

    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            environment = process.environ()
            if all(environment.get(name) == value for name, value in variables.items()):
                found.append(process)
    return found


def listening_pids(port: int) -> list[int]:
    """The processes of this host listening on TCP `port`, as far as it can see them (not
    another user's, nor outside this PID namespace)."""
    import psutil

    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return []
    return sorted(
        {
            connection.pid
            for connection in connections
            if connection.status == psutil.CONN_LISTEN
            and connection.laddr
            and connection.laddr.port == port
            and connection.pid is not None
        }
    )
