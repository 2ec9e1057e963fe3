"""Heterogeneous clusters: instance groups in the topology and job configuration, and how
`ringleader local` plans them."""

import json
import re
from pathlib import Path

import pytest

from ringleader.config.job import ConfigFiles, parse_job_config, reporting_settings
from ringleader.config.topology import InstanceGroup, parse_topology
from ringleader.core.errors import ConfigError
from ringleader.tools.local.plan import (
    LocalJobSpec,
    UsageError,
    leader_host,
    parse_instance_groups,
    plan_hosts,
    validate,
)

HOSTS = ["algo-1", "algo-2", "algo-3"]
GROUPS = [
    {"instance_group_name": "data", "instance_type": "ml.c5.xlarge", "hosts": ["algo-1"]},
    {
        "instance_group_name": "train",
        "instance_type": "ml.p3.2xlarge",
        "hosts": ["algo-3", "algo-2"],
    },
]


def topology(current: str = "algo-1", groups: object = GROUPS):
    return parse_topology({}, {"hosts": HOSTS, "current_host": current, "instance_groups": groups})


def config(current: str = "algo-1", **values: object):
    return parse_job_config(
        topology(current),
        {"sagemaker_program": "t.py", "sagemaker_mpi_enabled": True, **values},
        {},
    )


def test_instance_groups_are_read_from_the_resource_config() -> None:
    parsed = topology("algo-2")
    assert parsed.instance_groups == (
        InstanceGroup("data", "ml.c5.xlarge", ("algo-1",)),
        InstanceGroup("train", "ml.p3.2xlarge", ("algo-2", "algo-3")),
    )
    assert parsed.leader == "algo-1" and parsed.plain_hosts == ()  # no distribution yet


def test_the_distribution_groups_pick_the_hosts_and_the_leader() -> None:
    job = config("algo-1", sagemaker_distribution_instance_groups=["train"])
    assert job.topology.participants == ("algo-2", "algo-3")
    assert job.topology.plain_hosts == ("algo-1",)
    assert job.topology.leader == "algo-2"
    assert job.topology.workers == ("algo-1", "algo-3")  # everyone hears the verdict
    assert not job.topology.is_leader


def test_one_group_name_as_a_string_is_accepted() -> None:
    job = config(sagemaker_distribution_instance_groups="train")
    assert job.topology.participants == ("algo-2", "algo-3")


def test_without_a_distribution_the_groups_change_nothing() -> None:
    job = parse_job_config(
        topology(),
        {"sagemaker_program": "t.py", "sagemaker_distribution_instance_groups": ["train"]},
        {},
    )
    assert job.topology.participants == tuple(HOSTS)


@pytest.mark.parametrize(
    ("groups", "problem"),
    [
        (["gpu"], "'gpu' is not one of the instance groups ['data', 'train']"),
        ([], "expected a list of instance group names"),
        ([3], "expected a list of instance group names"),
    ],
)
def test_bad_distribution_groups_name_the_field(groups: object, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config(sagemaker_distribution_instance_groups=groups)
    assert caught.value.field == "sagemaker_distribution_instance_groups"
    assert problem in caught.value.problem


def test_a_distribution_group_without_hosts_is_refused() -> None:
    groups = [*GROUPS, {"instance_group_name": "empty", "instance_type": "x", "hosts": []}]
    with pytest.raises(ConfigError) as caught:
        parse_job_config(
            topology(groups=groups),
            {
                "sagemaker_program": "t.py",
                "sagemaker_mpi_enabled": True,
                "sagemaker_distribution_instance_groups": ["empty"],
            },
            {},
        )
    assert caught.value.problem == "the instance group 'empty' has no hosts"


def test_distribution_groups_without_instance_groups_are_refused() -> None:
    plain = parse_topology({}, {"hosts": HOSTS, "current_host": "algo-1"})
    with pytest.raises(ConfigError) as caught:
        parse_job_config(
            plain,
            {
                "sagemaker_program": "t.py",
                "sagemaker_mpi_enabled": True,
                "sagemaker_distribution_instance_groups": ["train"],
            },
            {},
        )
    assert "resourceconfig.json has no instance_groups" in caught.value.problem


def test_a_host_in_no_group_is_refused_on_every_host() -> None:
    groups = [GROUPS[1]]
    for current in HOSTS:
        with pytest.raises(ConfigError) as caught:
            parse_job_config(topology(current, groups), {"sagemaker_program": "t.py"}, {})
        assert caught.value.field == "resourceconfig.json instance_groups"
        assert "host(s) ['algo-1'] are in no instance group" in caught.value.problem


def test_group_hosts_must_be_hosts() -> None:
    groups = [{"instance_group_name": "x", "hosts": ["algo-9"]}]
    with pytest.raises(ConfigError) as caught:
        topology(groups=groups)
    assert "are not all in the hosts" in caught.value.problem


def test_processes_per_host_per_group_must_agree_over_the_distribution() -> None:
    key = "ringleader_processes_per_host"
    agreeing = config(
        sagemaker_distribution_instance_groups=["train"], **{key: {"train": 4, "data": 1}}
    )
    assert agreeing.ranks_per_host(gpus=0) == 4
    with pytest.raises(ConfigError) as caught:
        config(
            sagemaker_distribution_instance_groups=["data", "train"],
            **{key: {"data": 1, "train": 2}},
        )
    assert caught.value.field == key
    assert "disagree: {'data': 1, 'train': 2}" in caught.value.problem
    with pytest.raises(ConfigError) as caught:
        config(sagemaker_distribution_instance_groups=["train"], **{key: {"data": 1}})
    assert "no count for the distribution's instance group(s) ['train']" in caught.value.problem


def test_local_plans_groups_as_sagemaker_writes_them(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("")
    spec = LocalJobSpec(
        hosts=3,
        source_dir=tmp_path,
        entry_point="t.py",
        instance_groups=parse_instance_groups("data:1,train:2"),
        distribution_groups=("train",),
    )
    validate(spec)
    plans = plan_hosts(spec, "rl-x", HOSTS, cpus=64)
    assert plans[0].resource_config["current_group_name"] == "data"
    assert plans[2].resource_config["current_group_name"] == "train"
    assert plans[1].resource_config["instance_groups"] == [
        {"instance_group_name": "data", "instance_type": "local", "hosts": ["algo-1"]},
        {"instance_group_name": "train", "instance_type": "local", "hosts": ["algo-2", "algo-3"]},
    ]
    values = plans[0].hyperparameters
    assert json.loads(values["sagemaker_distribution_instance_groups"]) == ["train"]
    assert leader_host(spec, HOSTS) == "algo-2"
    # what every host reads back agrees with the plan
    read = parse_job_config(
        parse_topology({}, plans[0].resource_config), {**values, "sagemaker_program": "t.py"}, {}
    )
    assert read.topology.leader == "algo-2"


@pytest.mark.parametrize(
    ("groups", "distribution", "hosts", "message"),
    [
        ("data:1,train:2", (), 3, "--distribution-groups: name the instance group(s)"),
        ("data:1,train:2", ("gpu",), 3, "--distribution-groups: ['gpu'] not among"),
        ("data:1,train:2", ("train",), 4, "the groups have 3 host(s) but --hosts is 4"),
        ("data:1,data:2", ("data",), 3, "group names repeat"),
    ],
)
def test_local_group_mistakes_are_usage_errors(
    tmp_path: Path, groups: str, distribution: tuple[str, ...], hosts: int, message: str
) -> None:
    (tmp_path / "t.py").write_text("")
    spec = LocalJobSpec(
        hosts=hosts,
        source_dir=tmp_path,
        entry_point="t.py",
        instance_groups=parse_instance_groups(groups),
        distribution_groups=distribution,
    )
    with pytest.raises(UsageError, match=re.escape(message)):
        validate(spec)


@pytest.mark.parametrize("text", ["data", "data:0", "data:x", ":2", "a:1,,b:2"])
def test_instance_groups_syntax(text: str) -> None:
    with pytest.raises(UsageError, match="--instance-groups: expected NAME:COUNT"):
        parse_instance_groups(text)


def test_an_error_report_goes_to_the_leader_the_job_would_have(tmp_path: Path) -> None:
    """A host whose configuration fails reports to the distribution's leader, the host the
    others wait on, not to the first host of the whole cluster."""
    files = ConfigFiles(tmp_path)
    values = {
        "sagemaker_program": "t.py",
        "sagemaker_mpi_enabled": True,
        "sagemaker_distribution_instance_groups": ["train"],
        "ringleader_log_ranks": "not a selection",  # what fails, on every host
    }
    files.hyperparameters.write_text(json.dumps({k: json.dumps(v) for k, v in values.items()}))
    with pytest.raises(ConfigError):
        config("algo-3", **values)
    assert reporting_settings(files, topology("algo-3")).leader == "algo-2"
    main_path = config("algo-3", sagemaker_distribution_instance_groups=["train"])
    assert reporting_settings(files, topology("algo-3")).leader == main_path.topology.leader
    files.hyperparameters.write_text("{ not json")  # nothing readable: the first host
    assert reporting_settings(files, topology("algo-3")).leader == "algo-1"
