"""Choosing the network interface mpirun pins its traffic to."""

import ipaddress
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ringleader.core.errors import ConfigError, StartupError

# Linux interface names: at most 15 bytes, no slash or white space.
_INTERFACE_NAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")

# interface name -> its IPv4 networks, e.g. {"eth0": ["172.18.0.2/16"]}
Interfaces = Mapping[str, Sequence[str]]


@dataclass(frozen=True)
class InterfaceChoice:
    name: str
    warning: str | None = None
    networks: tuple[str, ...] = ()  # its IPv4 networks in CIDR form, e.g. ("172.18.0.0/16",)


def networks_of(addresses: Sequence[str]) -> tuple[str, ...]:
    """The networks of an interface's addresses ("172.18.0.2/16" -> "172.18.0.0/16")."""
    return tuple(str(ipaddress.ip_interface(address).network) for address in addresses)


def choose_interface(
    requested: str, interfaces: Interfaces, peer_addresses: Sequence[str]
) -> InterfaceChoice:
    """The requested interface if it exists, else the one whose network holds the peers."""
    field = "network_interface_name"
    if not _INTERFACE_NAME.match(requested):
        raise ConfigError(field, f"{requested!r} is not a valid interface name")
    if requested in interfaces:
        return InterfaceChoice(requested, networks=networks_of(interfaces[requested]))
    peers = [ipaddress.ip_address(address) for address in peer_addresses]
    for name, networks in sorted(interfaces.items()):
        for network in networks:
            subnet = ipaddress.ip_interface(network).network
            if peers and all(peer in subnet for peer in peers):
                return InterfaceChoice(
                    name,
                    f"interface {requested!r} does not exist here; using {name!r} "
                    f"({network}), which reaches the other hosts",
                    networks_of(networks),
                )
    raise ConfigError(
        field,
        f"interface {requested!r} does not exist and no other interface reaches the other hosts "
        f"({', '.join(peer_addresses) or 'none resolved'}); interfaces here: "
        f"{dict(interfaces)}",
    )


def local_interfaces() -> dict[str, list[str]]:
    import psutil  # here: only the leader chooses, and workers start faster without it

    found: dict[str, list[str]] = {}
    for name, addresses in psutil.net_if_addrs().items():
        for address in addresses:
            if address.family == socket.AF_INET and address.netmask:
                found.setdefault(name, []).append(f"{address.address}/{address.netmask}")
    return found


def addresses_on(interface: str) -> tuple[str, ...]:
    """This host's IPv4 addresses on `interface` (none when it has no such interface)."""
    return tuple(
        str(ipaddress.ip_interface(network).ip) for network in local_interfaces().get(interface, ())
    )


def resolve(hosts: Sequence[str]) -> list[str]:
    addresses = []
    for host in hosts:
        try:
            addresses.append(socket.gethostbyname(host))
        except OSError as error:
            raise StartupError(f"cannot resolve host {host}: {error}") from None
    return addresses
