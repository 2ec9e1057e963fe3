"""Planning of `ringleader local` jobs."""

import json
import re

import pytest

from ringleader.config.job import parse_job_config
from ringleader.config.topology import parse_topology
from ringleader.tools.local.plan import (
    LocalJobSpec,
    UsageError,
    host_names,
    job_id,
    parse_key_values,
    parse_script_args,
    plan_hosts,
    sagemaker_hyperparameters,
    shared_machine_leader_timeout,
    validate,
)


@pytest.fixture
def source(tmp_path):
    (tmp_path / "train.py").write_text("")
    return tmp_path


def test_plain_host_names():
    assert host_names(3, random_suffix=False) == ["algo-1", "algo-2", "algo-3"]


def test_random_suffix_host_names_look_like_sdk_local_mode():
    names = host_names(12, random_suffix=True)
    assert len(names) == 12
    for index, name in enumerate(names, start=1):
        assert re.fullmatch(rf"algo-{index}-[0-9a-z]{{5}}", name), name
    # The leader (first sorted) is algo-1-xxxxx even with algo-10.. present.
    assert sorted(names)[0] == names[0]


def test_sagemaker_hyperparameters_json_encode_every_value(source):
    spec = LocalJobSpec(
        hosts=2,
        source_dir=source,
        entry_point="train.py",
        processes_per_host=2,
        mpi_options="-x FOO=1",
        hyperparameters={"rounds": "3", "lr": "0.1"},
        settings={"sigterm_grace": 5},
    )
    values = sagemaker_hyperparameters(spec, cpus=64)
    assert values == {
        "sagemaker_program": '"train.py"',
        "sagemaker_submit_directory": '"/opt/ml/code"',
        "sagemaker_mpi_enabled": "true",
        "sagemaker_mpi_num_of_processes_per_host": "2",
        "sagemaker_mpi_custom_mpi_options": '"-x FOO=1"',
        "ringleader_sigterm_grace": "5",
        "rounds": '"3"',
        "lr": '"0.1"',
    }
    # and the entry point reads them back as intended
    topology = parse_topology({}, {"hosts": ["algo-1"], "current_host": "algo-1"})
    config = parse_job_config(topology, values, {})
    assert config.source.program == "train.py"
    assert config.mpi.processes_per_host == 2
    assert config.mpi.custom_options == ("-x", "FOO=1")
    assert config.timeouts.sigterm_grace == 5
    assert config.user_hyperparameters == {"rounds": "3", "lr": "0.1"}


def test_optional_hyperparameters_are_left_out(source):
    values = sagemaker_hyperparameters(
        LocalJobSpec(hosts=1, source_dir=source, entry_point="train.py", distribution="none"),
        cpus=64,
    )
    assert set(values) == {
        "sagemaker_program",
        "sagemaker_submit_directory",
        "sagemaker_mpi_enabled",
    }
    assert values["sagemaker_mpi_enabled"] == "false"


def test_plan_hosts(source):
    spec = LocalJobSpec(
        hosts=3,
        source_dir=source,
        entry_point="train.py",
        env_overrides={"algo-2": {"X": "1"}},
    )
    names = ["algo-1", "algo-2", "algo-3"]
    plans = plan_hosts(spec, "rl-abc123", names, cpus=64, secret="5ec2e7")
    assert [plan.name for plan in plans] == names
    assert [plan.container_name for plan in plans] == [f"rl-abc123-{n}" for n in names]
    for plan in plans:
        assert plan.resource_config == {
            "current_host": plan.name,
            "hosts": names,
            "network_interface_name": "eth0",
            "current_instance_type": "local",
        }
        json.dumps(plan.resource_config)
        assert plan.hyperparameters == sagemaker_hyperparameters(spec, cpus=64)
        # Each host's resource config is a valid topology with itself as current host.
        assert parse_topology({}, plan.resource_config).current_host == plan.name
    # The job's identity and secret on every host (wire.auth), the overrides on theirs.
    own = {"TRAINING_JOB_NAME": "rl-abc123", "RINGLEADER_JOB_SECRET": "5ec2e7"}
    assert plans[1].environment == {**own, "X": "1"}
    assert plans[0].environment == own


def test_parse_script_args():
    assert parse_script_args(["--rounds", "3", "--lr=0.1", "--name", "--odd"]) == {
        "rounds": "3",
        "lr": "0.1",
        "name": "--odd",
    }
    assert parse_script_args(["--empty="]) == {"empty": ""}
    assert parse_script_args([]) == {}


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (["rounds", "3"], "'rounds'"),
        (["--"], "'--'"),
        (["-r", "3"], "'-r'"),
        (["--rounds"], "has no value"),
        (["--a", "1", "--b"], "'--b' has no value"),
    ],
)
def test_parse_script_args_errors(tokens, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        parse_script_args(tokens)


def test_parse_key_values():
    assert parse_key_values("--env", ["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    with pytest.raises(UsageError, match="--env: expected KEY=VALUE, got 'A'"):
        parse_key_values("--env", ["A"])
    with pytest.raises(UsageError, match="--setting"):
        parse_key_values("--setting", ["=1"])


def test_validate_accepts_a_good_spec(source):
    validate(LocalJobSpec(hosts=2, source_dir=source, entry_point="train.py"))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"hosts": 0}, "--hosts"),
        ({"processes_per_host": 0}, "--processes-per-host"),
        ({"entry_point": "missing.py"}, "--entry-point"),
    ],
)
def test_validate_errors(source, changes, message):
    spec = LocalJobSpec(**{"hosts": 2, "source_dir": source, "entry_point": "train.py", **changes})
    with pytest.raises(UsageError, match=re.escape(message)):
        validate(spec)


def test_validate_missing_source_dir(tmp_path):
    spec = LocalJobSpec(hosts=1, source_dir=tmp_path / "nope", entry_point="train.py")
    with pytest.raises(UsageError, match="--source-dir"):
        validate(spec)


def test_job_id():
    first, second = job_id(), job_id()
    assert re.fullmatch(r"rl-[0-9a-f]{6}", first)
    assert first != second


def test_oversubscribed_fake_hosts_make_ranks_yield(source):
    spec = LocalJobSpec(hosts=3, source_dir=source, entry_point="train.py", processes_per_host=2)
    options = sagemaker_hyperparameters(spec, cpus=2)["sagemaker_mpi_custom_mpi_options"]
    assert json.loads(options) == "--mca mpi_yield_when_idle 1"
    # enough cores: the ranks poll as Open MPI decides
    assert "sagemaker_mpi_custom_mpi_options" not in sagemaker_hyperparameters(spec, cpus=6)


def test_the_users_yield_setting_wins(source):
    spec = LocalJobSpec(
        hosts=3,
        source_dir=source,
        entry_point="train.py",
        processes_per_host=2,
        mpi_options="-x A=1 --mca mpi_yield_when_idle 0",
    )
    options = sagemaker_hyperparameters(spec, cpus=2)["sagemaker_mpi_custom_mpi_options"]
    assert json.loads(options) == "-x A=1 --mca mpi_yield_when_idle 0"
    appended = sagemaker_hyperparameters(
        LocalJobSpec(hosts=4, source_dir=source, entry_point="train.py", mpi_options="-x A=1"),
        cpus=2,
    )["sagemaker_mpi_custom_mpi_options"]
    assert json.loads(appended) == "-x A=1 --mca mpi_yield_when_idle 1"


def fake_hosts(source, hosts: int, per_host: int, **changes) -> LocalJobSpec:
    return LocalJobSpec(
        hosts=hosts,
        processes_per_host=per_host,
        source_dir=source,
        entry_point="train.py",
        **changes,
    )


def test_crowded_fake_hosts_get_a_longer_leader_timeout(source):
    seed = fake_hosts(source, 32, 8)
    # 256 ranks on 2 cores: 128 per core, four thirds of a second each
    assert shared_machine_leader_timeout(seed, cpus=2) == 171
    values = sagemaker_hyperparameters(seed, cpus=2)
    assert json.loads(values["ringleader_leader_timeout"]) == 171
    # 64 ranks on 2 cores: 43 s; 16 ranks: 11 s, already more than the default
    assert shared_machine_leader_timeout(fake_hosts(source, 16, 4), cpus=2) == 43
    assert shared_machine_leader_timeout(fake_hosts(source, 8, 2), cpus=2) == 11
    # the default covers a few ranks per core, and every other distribution counts its ranks
    small = fake_hosts(source, 3, 2)
    assert shared_machine_leader_timeout(small, cpus=2) is None
    assert "ringleader_leader_timeout" not in sagemaker_hyperparameters(small, cpus=2)
    torch = fake_hosts(source, 32, 8, distribution="torch_distributed")
    assert shared_machine_leader_timeout(torch, cpus=64) is None
    assert shared_machine_leader_timeout(torch, cpus=2) == 171


@pytest.mark.parametrize(
    "changes",
    [
        {"settings": {"leader_timeout": "5"}},
        {"hyperparameters": {"ringleader_leader_timeout": "5"}},
    ],
)
def test_the_users_leader_timeout_wins(source, changes):
    spec = fake_hosts(source, 32, 8, **changes)
    assert shared_machine_leader_timeout(spec, cpus=2) is None
    assert json.loads(sagemaker_hyperparameters(spec, cpus=2)["ringleader_leader_timeout"]) == "5"
