"""The hosts of a plain cluster: Open MPI / Horovod hostfiles and `-H a:4,b:4` lists (pure).

A hostfile line is `HOST [slots=N]` (`max_slots=` and other Open MPI keys are accepted and
ignored); `#` starts a comment. A host without `slots=` has one slot, as with `horovodrun -H`.
`localhost` (or a loopback address) stands for this machine: the other hosts reach it by its
host name, so on a cluster of several hosts it is renamed to that.
"""

import re
from dataclasses import dataclass

from ringleader.core.errors import ConfigError

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_HOST = re.compile(r"[A-Za-z0-9_.:\[\]-]+")
_IGNORED_KEYS = frozenset({"max_slots", "max-slots", "port"})


@dataclass(frozen=True)
class ClusterHost:
    address: str  # what ssh connects to, as written
    name: str  # the host's name in the job (its address, or this machine's name for localhost)
    slots: int
    origin: str  # "hosts:3" or "-H entry 2": where the user wrote it, for errors


def parse_hostfile(text: str, source: str, this_machine: str) -> tuple[ClusterHost, ...]:
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        address, *fields = line.split()
        origin = f"{source}:{number}"
        slots = 1
        for item in fields:
            key, sep, value = item.partition("=")
            if not sep:
                raise ConfigError(f"{origin} {item}", "expected KEY=VALUE such as slots=8")
            if key == "slots":
                slots = _slots(f"{origin} slots", value)
            elif key not in _IGNORED_KEYS:
                raise ConfigError(f"{origin} {key}", "unknown key; expected slots=N")
        entries.append((address, slots, origin))
    if not entries:
        raise ConfigError(source, "no hosts: expected lines such as `10.0.0.2 slots=8`")
    return _hosts(entries, this_machine)


def parse_host_list(value: str, this_machine: str) -> tuple[ClusterHost, ...]:
    """`-H a:4,b:4` (slots after the colon, default 1)."""
    entries = []
    for index, item in enumerate(value.split(","), start=1):
        origin = f"-H entry {index}"
        address, sep, count = item.strip().rpartition(":")
        if not sep or "]" in count:  # no slots given (or an IPv6 address in brackets)
            address, count = item.strip(), "1"
        entries.append((address, _slots(f"{origin} slots", count), origin))
    return _hosts(entries, this_machine)


def _slots(field: str, value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(field, f"expected a positive whole number, got {value!r}")
    return int(value)


def _hosts(entries: list[tuple[str, int, str]], this_machine: str) -> tuple[ClusterHost, ...]:
    several = len(entries) > 1
    hosts: list[ClusterHost] = []
    seen: dict[str, str] = {}
    for address, slots, origin in entries:
        if not address or not _HOST.fullmatch(address):
            raise ConfigError(f"{origin} host", f"{address!r} is not a host name or address")
        name = this_machine if several and address.lower() in LOOPBACK_NAMES else address
        if name in seen:
            raise ConfigError(
                f"{origin} host", f"{address!r} is listed twice (first at {seen[name]})"
            )
        seen[name] = origin
        hosts.append(ClusterHost(address, name, slots, origin))
    return tuple(hosts)


def processes_per_host(hosts: tuple[ClusterHost, ...], requested: int | None) -> int:
    """Every host runs the same number of ranks: `requested`, else the hosts' slots."""
    fewest = min(hosts, key=lambda host: host.slots)
    if requested is None:
        return fewest.slots
    if requested < 1:
        raise ConfigError("--processes-per-host", f"expected a positive number, got {requested}")
    if requested > fewest.slots:
        raise ConfigError(
            "--processes-per-host",
            f"{requested} is more than the {fewest.slots} slots of {fewest.address} "
            f"({fewest.origin})",
        )
    return requested
