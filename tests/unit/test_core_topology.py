"""Host list, current host and leader election from SM_HOSTS or resourceconfig.json."""

import json

import pytest

from ringleader.config.topology import leader_hint, parse_topology
from ringleader.core.errors import ConfigError

LOCAL_MODE_HOSTS = ["algo-2-k3x9q", "algo-3-a0b1c", "algo-1-zz7yt"]


def resource(hosts, current, **extra):
    return {"hosts": hosts, "current_host": current, **extra}


def test_resource_config_hosts_are_sorted_and_leader_is_first_sorted():
    topology = parse_topology({}, resource(LOCAL_MODE_HOSTS, "algo-3-a0b1c"))
    assert topology.hosts == ("algo-1-zz7yt", "algo-2-k3x9q", "algo-3-a0b1c")
    assert topology.leader == "algo-1-zz7yt"
    assert topology.workers == ("algo-2-k3x9q", "algo-3-a0b1c")
    assert topology.current_host == "algo-3-a0b1c"
    assert topology.is_leader is False
    assert topology.network_interface == "eth0"


def test_leader_is_never_assumed_to_be_algo_1():
    topology = parse_topology({}, resource(["worker-b", "worker-a"], "worker-a"))
    assert topology.leader == "worker-a"
    assert topology.is_leader is True


def test_sm_hosts_wins_over_resource_config():
    environ = {
        "SM_HOSTS": json.dumps(["algo-2", "algo-1"]),
        "SM_CURRENT_HOST": "algo-2",
        "SM_NETWORK_INTERFACE_NAME": "eth7",
    }
    topology = parse_topology(
        environ, resource(["other-1", "other-2"], "other-1", network_interface_name="eth1")
    )
    assert topology.hosts == ("algo-1", "algo-2")
    assert topology.current_host == "algo-2"
    assert topology.network_interface == "eth7"


def test_resource_config_interface_is_used():
    topology = parse_topology({}, resource(["a"], "a", network_interface_name="ens5"))
    assert topology.network_interface == "ens5"
    assert topology.workers == ()


def test_sm_hosts_without_current_host():
    with pytest.raises(ConfigError) as caught:
        parse_topology({"SM_HOSTS": '["algo-1"]'}, None)
    assert caught.value.field == "SM_CURRENT_HOST"


@pytest.mark.parametrize(
    ("sm_hosts", "problem"),
    [
        ('["algo-1",', "not valid JSON"),
        ("[]", "empty"),
        ('"algo-1"', "expected a JSON list"),
        ('["algo-1", "algo-1"]', "duplicate"),
        ('["algo 1"]', "not a valid host name"),
        ('["-algo"]', "not a valid host name"),
        ('["algo-1", 2]', "not a valid host name"),
    ],
)
def test_bad_sm_hosts(sm_hosts, problem):
    with pytest.raises(ConfigError) as caught:
        parse_topology({"SM_HOSTS": sm_hosts, "SM_CURRENT_HOST": "algo-1"}, None)
    assert caught.value.field == "SM_HOSTS"
    assert problem in caught.value.problem


def test_current_host_not_in_sm_hosts():
    with pytest.raises(ConfigError) as caught:
        parse_topology({"SM_HOSTS": '["algo-1", "algo-2"]', "SM_CURRENT_HOST": "algo-9"}, None)
    assert caught.value.field == "SM_CURRENT_HOST"
    assert "'algo-9'" in caught.value.problem


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (resource(["a", "b"], "c"), "resourceconfig.json current_host"),
        ({"hosts": ["a", "b"]}, "resourceconfig.json current_host"),
        (resource([], "a"), "resourceconfig.json hosts"),
        (resource(["a", "a"], "a"), "resourceconfig.json hosts"),
        (resource(["a/b"], "a/b"), "resourceconfig.json hosts"),
        ({"current_host": "a"}, "resourceconfig.json hosts"),
        (resource(["a"], "a", network_interface_name=5), "network_interface_name"),
    ],
)
def test_bad_resource_config(config, field):
    with pytest.raises(ConfigError) as caught:
        parse_topology({}, config)
    assert caught.value.field == field


def test_no_source_at_all():
    with pytest.raises(ConfigError) as caught:
        parse_topology({}, None)
    assert caught.value.field == "SM_HOSTS"
    assert "resourceconfig.json" in caught.value.problem


def test_leader_hint():
    assert leader_hint({"SM_HOSTS": '["b-2", "b-1"]'}, None) == "b-1"
    assert leader_hint({}, resource(LOCAL_MODE_HOSTS, "nobody")) == "algo-1-zz7yt"
    # SM_HOSTS wins, even when the current host is missing or wrong
    assert leader_hint({"SM_HOSTS": '["z"]'}, resource(["a"], "a")) == "z"
    assert leader_hint({"SM_HOSTS": "[oops"}, resource(["a"], "a")) is None
    assert leader_hint({}, {"hosts": []}) is None
    assert leader_hint({}, None) is None
