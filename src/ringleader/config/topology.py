"""Who the hosts are, which one this is, and which one leads."""

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ringleader.core.errors import ConfigError
from ringleader.core.jsontext import parse_json

DEFAULT_INTERFACE = "eth0"
# Docker container names and DNS labels: what can appear in -H host lists and ssh targets.
_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}")  # fullmatch: no trailing newline


def elect_leader(hosts: Iterable[str], distribution_hosts: Iterable[str] = ()) -> str:
    """The one leader-election rule: the first host in sorted order, of the distribution's
    hosts when the distributed job runs on some of them (with instance groups: the host that
    runs mpirun or rank 0), else of all. As on SageMaker, every host computes it alike from
    the same names; local mode names hosts algo-1-xxxxx, so never assume "algo-1"."""
    return min(tuple(distribution_hosts) or tuple(hosts))


@dataclass(frozen=True)
class InstanceGroup:
    """One group of a heterogeneous cluster (SageMaker `instance_groups`)."""

    name: str
    instance_type: str
    hosts: tuple[str, ...]  # sorted


@dataclass(frozen=True)
class Topology:
    hosts: tuple[str, ...]  # sorted, so every host agrees on the order and the leader
    current_host: str
    network_interface: str
    instance_groups: tuple[InstanceGroup, ...] = ()
    # The hosts of the instance groups the distributed job runs on (sorted); empty: all hosts.
    # The others run the program once each, on their own, and still end with the job's outcome.
    distribution_hosts: tuple[str, ...] = ()

    @property
    def participants(self) -> tuple[str, ...]:
        """The hosts that run the distributed job's ranks."""
        return self.distribution_hosts or self.hosts

    @property
    def plain_hosts(self) -> tuple[str, ...]:
        """Hosts outside the distribution: they run the program once, plainly."""
        return tuple(host for host in self.hosts if host not in self.participants)

    @property
    def leader(self) -> str:
        return elect_leader(self.hosts, self.distribution_hosts)

    @property
    def workers(self) -> tuple[str, ...]:
        """Every host but the leader: all of them connect to it and end with its verdict."""
        return tuple(host for host in self.hosts if host != self.leader)

    def with_distribution_groups(self, field: str, names: tuple[str, ...]) -> "Topology":
        """The distributed job on the hosts of these instance groups only."""
        known = {group.name: group for group in self.instance_groups}
        for name in names:
            if name not in known:
                raise ConfigError(
                    field, f"{name!r} is not one of the instance groups {sorted(known)}"
                )
            if not known[name].hosts:
                raise ConfigError(field, f"the instance group {name!r} has no hosts")
        hosts = sorted({host for name in names for host in known[name].hosts})
        return replace(self, distribution_hosts=tuple(hosts))

    def check_groups_cover_hosts(self) -> None:
        """Every host, this one included, belongs to an instance group (when there are any).

        Checked with the job's configuration rather than when the host list is read: every
        host finds the same problem and the job ends with 78 everywhere at once."""
        grouped = {host for group in self.instance_groups for host in group.hosts}
        missing = [host for host in self.hosts if host not in grouped]
        if self.instance_groups and missing:
            raise ConfigError(
                "resourceconfig.json instance_groups",
                f"host(s) {missing} are in no instance group"
                + (" (the current host among them)" if self.current_host in missing else ""),
            )

    @property
    def is_leader(self) -> bool:
        return self.current_host == self.leader


def parse_topology(
    environ: Mapping[str, str], resource_config: Mapping[str, Any] | None
) -> Topology:
    """SM_HOSTS/SM_CURRENT_HOST win over resourceconfig.json, as the contract says."""
    if "SM_HOSTS" in environ:
        hosts = _parse_hosts("SM_HOSTS", _load_json("SM_HOSTS", environ["SM_HOSTS"]))
        current = environ.get("SM_CURRENT_HOST")
        current_field = "SM_CURRENT_HOST"
        interface = environ.get("SM_NETWORK_INTERFACE_NAME") or DEFAULT_INTERFACE
        if current is None:
            raise ConfigError(current_field, "missing: SM_HOSTS is set, so SM_CURRENT_HOST must be")
    elif resource_config is not None:
        hosts = _parse_hosts("resourceconfig.json hosts", resource_config.get("hosts"))
        current = resource_config.get("current_host")
        current_field = "resourceconfig.json current_host"
        interface = resource_config.get("network_interface_name") or DEFAULT_INTERFACE
    else:
        raise ConfigError(
            "SM_HOSTS",
            "no host list: set SM_HOSTS and SM_CURRENT_HOST, or provide "
            "/opt/ml/input/config/resourceconfig.json",
        )
    if not isinstance(current, str) or current not in hosts:
        raise ConfigError(current_field, f"{current!r} is not one of the hosts {list(hosts)}")
    if not isinstance(interface, str):
        raise ConfigError("network_interface_name", f"expected a string, got {interface!r}")
    groups = _parse_groups(resource_config or {}, hosts, current)
    return Topology(
        hosts=hosts, current_host=current, network_interface=interface, instance_groups=groups
    )


def _parse_groups(
    resource_config: Mapping[str, Any], hosts: tuple[str, ...], current: str
) -> tuple[InstanceGroup, ...]:
    field = "resourceconfig.json instance_groups"
    value = resource_config.get("instance_groups")
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError(field, f"expected a list of instance groups, got {value!r}")
    groups = []
    for entry in value:
        if not isinstance(entry, dict) or not isinstance(entry.get("instance_group_name"), str):
            raise ConfigError(field, f"expected {{instance_group_name, hosts, ...}}, got {entry!r}")
        name = entry["instance_group_name"]
        members = entry.get("hosts", [])
        if not isinstance(members, list) or not all(host in hosts for host in members):
            raise ConfigError(
                field, f"group {name!r}: hosts {members!r} are not all in the hosts {list(hosts)}"
            )
        groups.append(
            InstanceGroup(name, str(entry.get("instance_type", "")), tuple(sorted(members)))
        )
    return tuple(groups)


def _load_json(field: str, text: str) -> Any:
    try:
        return parse_json(text)
    except ValueError as error:
        raise ConfigError(field, f"not valid JSON ({error}): {text[:200]!r}") from None


def _parse_hosts(field: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ConfigError(field, f"expected a JSON list of host names, got {value!r}")
    if not value:
        raise ConfigError(field, "the host list is empty")
    check_host_names(field, value)
    return tuple(sorted(value))


def check_host_names(field: str, hosts: Sequence[Any]) -> None:
    """Every host a valid name (it appears in -H lists and ssh targets), none twice."""
    for host in hosts:
        if not isinstance(host, str) or not _HOST_NAME.fullmatch(host):
            raise ConfigError(field, f"{host!r} is not a valid host name")
    duplicates = sorted({host for host in hosts if hosts.count(host) > 1})
    if duplicates:
        raise ConfigError(field, f"duplicate hosts {duplicates}")


def leader_hint(
    environ: Mapping[str, str], resource_config: Mapping[str, Any] | None
) -> str | None:
    """The leader's name when only the host list can be read (to report an error to it)."""
    try:
        if "SM_HOSTS" in environ:
            return elect_leader(
                _parse_hosts("SM_HOSTS", _load_json("SM_HOSTS", environ["SM_HOSTS"]))
            )
        if resource_config is not None:
            return elect_leader(_parse_hosts("hosts", resource_config.get("hosts")))
    except ConfigError:
        return None
    return None
