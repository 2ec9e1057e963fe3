"""Choosing the interface mpirun pins its traffic to."""

import pytest

from ringleader.core.errors import ConfigError
from ringleader.launch.netif import choose_interface, local_interfaces

INTERFACES = {
    "lo": ["127.0.0.1/8"],
    "eth1": ["10.0.0.5/255.255.0.0"],  # the netmask form psutil gives
    "eth2": ["172.18.0.3/16"],
}


def test_existing_interface_is_chosen_without_warning():
    choice = choose_interface("eth1", INTERFACES, ["172.18.0.4"])
    assert choice.name == "eth1"
    assert choice.warning is None
    assert choice.networks == ("10.0.0.0/16",)  # for PRRTE's out-of-band include list


def test_a_fallback_interface_carries_its_networks_too():
    assert choose_interface("eth0", INTERFACES, ["172.18.0.4"]).networks == ("172.18.0.0/16",)


def test_missing_interface_falls_back_to_the_one_reaching_all_peers():
    choice = choose_interface("eth0", INTERFACES, ["172.18.0.4", "172.18.3.9"])
    assert choice.name == "eth2"
    assert choice.warning is not None
    assert "'eth0'" in choice.warning
    assert "'eth2'" in choice.warning


def test_fallback_understands_netmask_notation():
    choice = choose_interface("eth0", INTERFACES, ["10.0.200.1"])
    assert choice.name == "eth1"


def test_no_interface_reaches_every_peer():
    with pytest.raises(ConfigError) as caught:
        choose_interface("eth0", INTERFACES, ["172.18.0.4", "10.0.0.9"])  # split across two
    assert caught.value.field == "network_interface_name"
    assert "'eth0'" in caught.value.problem
    assert "172.18.0.4" in caught.value.problem


def test_no_peers_and_missing_interface():
    with pytest.raises(ConfigError) as caught:
        choose_interface("eth0", INTERFACES, [])
    assert caught.value.field == "network_interface_name"
    assert "none resolved" in caught.value.problem


@pytest.mark.parametrize("name", ["", "eth0; rm -rf /", "a" * 16, "eth/0", "eth 0"])
def test_invalid_name_rejected_even_if_present(name):
    with pytest.raises(ConfigError) as caught:
        choose_interface(name, {name: ["10.0.0.1/8"]}, ["10.0.0.2"])
    assert caught.value.field == "network_interface_name"
    assert "not a valid interface name" in caught.value.problem


def test_local_interfaces_lists_loopback_in_usable_form():
    found = local_interfaces()
    loopback = [net for nets in found.values() for net in nets if net.startswith("127.0.0.1/")]
    assert loopback
    # The format must be what choose_interface parses.
    name = next(name for name, nets in found.items() if loopback[0] in nets)
    assert choose_interface("nonexistent0", {name: [loopback[0]]}, ["127.0.0.2"]).name == name
