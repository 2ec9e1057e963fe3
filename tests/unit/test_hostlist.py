"""Slurm host lists expand to the hosts, order and padding that `scontrol show hostnames` prints;
bad ones give a ConfigError that names the field and quotes the text."""

import pytest

from ringleader.config.hostlist import MAX_HOSTS, expand_hostlist
from ringleader.core.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("node1", ["node1"]),
        ("algo-1", ["algo-1"]),
        ("a1,b[2-3]", ["a1", "b2", "b3"]),
        ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
        ("n[5]", ["n5"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        ("n[0-1]", ["n0", "n1"]),
        ("n[1-010]", [f"n{i}" for i in range(1, 11)]),
        ("n[1-2,005,7-8]", ["n1", "n2", "n005", "n7", "n8"]),
        ("n[3,1]", ["n3", "n1"]),
        ("rack[1-2]-node[1-2]", ["rack1-node1", "rack1-node2", "rack2-node1", "rack2-node2"]),
        ("r[1,3]n[01-02]", ["r1n01", "r1n02", "r3n01", "r3n02"]),
        ("n[1-2]-ib[1]", ["n1-ib1", "n2-ib1"]),
        ("[1-3]", ["1", "2", "3"]),
        ("b2,a1", ["b2", "a1"]),
        ("n[1-2],n1,n[2]", ["n1", "n2", "n1", "n2"]),
        ("  node[1-2]\n", ["node1", "node2"]),
        ("a1, b[2-3] ,\tc4", ["a1", "b2", "b3", "c4"]),
        ("gpu[1-2],cpu[01-02],login", ["gpu1", "gpu2", "cpu01", "cpu02", "login"]),
    ],
)
def test_a_host_list_expands_like_scontrol_show_hostnames(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == tuple(hosts)


def test_the_limit_itself_is_allowed() -> None:
    hosts = expand_hostlist(f"n[1-{MAX_HOSTS}]")
    assert len(hosts) == MAX_HOSTS == 65536
    assert hosts[0] == "n1"
    assert hosts[-1] == "n65536"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "the host list '' is empty"),
        ("  \n", "is empty"),
        ("a1,,b2", "the host list 'a1,,b2' has an empty item"),
        ("a1,", "has an empty item"),
        (",a1", "has an empty item"),
        ("a1, ,b2", "has an empty item"),
        ("node 1", "the host name 'node 1' in 'node 1' contains whitespace"),
        ("n[1, 2]", "contains whitespace"),
        ("n[1-2", "unbalanced brackets in 'n[1-2'"),
        ("n[1-2]-ib", "'n[1-2]-ib' has text after its last bracket"),
        ("n[1-2].cluster.local", "has text after its last bracket"),
        ("n1-2]", "unbalanced brackets in 'n1-2]'"),
        ("n]1-2[", "unbalanced brackets"),
        ("n[[1-2]]", "unbalanced brackets in 'n[[1-2]]'"),
        ("n[1,2", "unbalanced brackets"),
        ("n[]", "an empty range in 'n[]'"),
        ("n[1,,2]", "an empty range in 'n[1,,2]'"),
        ("n[1,]", "an empty range"),
        ("n[3-1]", "the range '3-1' in 'n[3-1]' is descending"),
        ("n[010-9]", "is descending"),
        ("n[a-b]", "'a-b' in 'n[a-b]' is not a number or a range like 1-4"),
        ("n[1-x]", "'1-x' in 'n[1-x]' is not a number"),
        ("n[-3]", "'-3' in 'n[-3]' is not a number"),
        ("n[1-]", "'1-' in 'n[1-]' is not a number"),
        ("n[1-2-3]", "'1-2-3' in 'n[1-2-3]' is not a number"),
        ("n[+1]", "is not a number"),
        ("n[1_0]", "is not a number"),
        ("n[\u0661-\u0663]", "is not a number"),
        ("n[1-" + "9" * 21 + "]", "has a number over 20 digits"),
        ("n[1-" + "9" * 5000 + "]", "has a number over 20 digits"),
        ("n[0-65536]", "'n[0-65536]' expands to 65537 hosts, more than 65536"),
        ("n[1-99999999999999999999]", "more than 65536"),
        ("a[1-300]b[1-300]", "expands to 90000 hosts, more than 65536"),
        ("a[1-40000],b[1-40000]", "expands to 80000 hosts, more than 65536"),
        ("n[1-65536],n0", "expands to 65537 hosts"),
    ],
)
def test_a_bad_host_list_is_a_config_error_quoting_it(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        expand_hostlist(text)
    assert caught.value.field == "SLURM_JOB_NODELIST"
    assert problem in caught.value.problem
    assert str(caught.value).startswith("Configuration error in SLURM_JOB_NODELIST: ")


def test_the_error_names_the_field_it_was_given() -> None:
    with pytest.raises(ConfigError) as caught:
        expand_hostlist("n[3-1]", field="ringleader_hosts")
    assert caught.value.field == "ringleader_hosts"
    assert "Configuration error in ringleader_hosts: " in str(caught.value)
