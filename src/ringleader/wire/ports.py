"""A port this host cannot listen on: why, who holds it, and which hosts came to it (the
workers of a leader whose control port is taken find that out there themselves)."""

import errno
import threading
import time
from collections.abc import Callable, Collection, Iterable

from ringleader.core.procfind import listening_pids


def listen_problem(port: int, error: OSError) -> str:
    """What a failed bind of `port` means, naming the process that holds it when it is found."""
    if error.errno != errno.EADDRINUSE:
        return f"cannot listen on port {port}: {error.strerror or error}"
    holder = port_holder(port)
    return f"port {port} is already in use on this host, {holder or 'by a process not seen here'}"


def port_holder(port: int) -> str | None:
    """The process listening on TCP `port` ("by NAME (pid N: COMMAND LINE)"), or None when no
    listener of this host's processes is seen (another user's, or outside this PID namespace)."""
    pids = listening_pids(port)
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


# Connection states on this side, for a connection a peer opened to the port.
_OPEN = frozenset({"ESTABLISHED", "SYN_RECV"})
_CLOSED_BY_PEER = frozenset({"CLOSE_WAIT", "LAST_ACK"})  # the peer let go first
_VISITS_CHECK_SECONDS = 0.25  # how often the TCP table is read while waiting for visitors

AddressesOf = Callable[[str], Collection[str]]


class PortVisits:
    """Which hosts have come to a port that another process holds, and let go of it again.

    A worker that reached a port held by another process closes its connection once it knows
    (no greeting): a connection from it that was open and is gone, or that it closed first, is
    its visit done. One the holder closed first is not: the worker takes that for a leader not
    up yet and comes again."""

    def __init__(self, hosts: Iterable[str]) -> None:
        self.hosts = tuple(hosts)
        self.done: set[str] = set()
        self._seen: set[str] = set()

    def update(self, connections: Iterable[tuple[str, str]]) -> None:
        """`connections`: (host, state) of every connection from one of the hosts to the port
        now."""
        states: dict[str, set[str]] = {}
        for host, state in connections:
            states.setdefault(host, set()).add(state)
        for host in self.hosts:
            now = states.get(host, set())
            if now & _CLOSED_BY_PEER or (host in self._seen and not now):
                self.done.add(host)
            if now & _OPEN:
                self._seen.add(host)

    @property
    def complete(self) -> bool:
        return self.done >= set(self.hosts)


def await_visits(
    port: int,
    hosts: Iterable[str],
    addresses_of: AddressesOf,
    deadline: float,
    stop: threading.Event,
) -> PortVisits:
    """Wait until each of `hosts` has come to `port` on this host (whatever holds it) and let
    go again, `deadline` (a time.monotonic() value) passes or `stop` is set.

    No event tells of connections to another process's socket: the kernel's TCP table is read
    every 0.25 s."""
    import psutil

    visits = PortVisits(hosts)
    addresses: dict[str, set[str]] = {}
    while not visits.complete:
        for host in visits.hosts:
            if not addresses.get(host):  # a host not up yet has no address yet
                addresses[host] = set(addresses_of(host))
        owners = {address: host for host, known in addresses.items() for address in known}
        try:
            connections = psutil.net_connections(kind="tcp")
        except (psutil.Error, OSError):
            connections = []
        visits.update(
            (owners[peer], connection.status)
            for connection in connections
            if connection.laddr
            and connection.laddr.port == port
            and connection.raddr
            and (peer := connection.raddr.ip.removeprefix("::ffff:")) in owners
        )
        remaining = deadline - time.monotonic()
        if visits.complete or remaining <= 0 or stop.wait(min(remaining, _VISITS_CHECK_SECONDS)):
            break
    return visits
