"""Our SM_* variables against sagemaker-training's own Environment, on the same inputs."""

import os
from pathlib import Path
from typing import Any

import pytest
from sagemaker_training import environment, mapping

from ringleader.launch import sagemaker_env

_TOOLKIT_ENV = ("CURRENT_HOST", "SAGEMAKER_JOB_NAME", "SAGEMAKER_REGION")

HOMOGENEOUS = {
    "current_host": "algo-2",
    "hosts": ["algo-1", "algo-2", "algo-3"],
    "network_interface_name": "eth1",
}
HETEROGENEOUS = {
    "current_host": "algo-3",
    "hosts": ["algo-1", "algo-2", "algo-3"],
    "current_group_name": "cpu",
    "current_instance_type": "ml.c5.xlarge",
    "instance_groups": [
        {"instance_group_name": "gpu", "instance_type": "ml.p3.2xlarge", "hosts": ["algo-1"]},
        {
            "instance_group_name": "cpu",
            "instance_type": "ml.c5.xlarge",
            "hosts": ["algo-2", "algo-3"],
        },
    ],
    "topology": [{"hostName": "algo-1", "capacityUnitId": "u1"}],
}
CHANNELS = {
    "train": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated"},
    "eval": {"TrainingInputMode": "FastFile"},
}
HYPERPARAMETERS = {
    "epochs": 3,
    "lr": 0.01,
    "b": True,
    "name": "run one",
    "nested": {"y": 2, "x": "a"},
    "nothing": None,
    "sagemaker_program": "train.py",
    "sagemaker_submit_directory": "s3://bucket/source.tar.gz",
    "sagemaker_container_log_level": 10,
    "sagemaker_job_name": "job-7",
    "sagemaker_region": "eu-west-1",
    "sagemaker_mpi_enabled": True,
    "sagemaker_mpi_num_of_processes_per_host": 2,
    "_tuning_objective_metric": "loss",
}


def _ours(resource: dict, channels: dict, hyperparameters: dict) -> dict[str, str]:
    facts = sagemaker_env.probe_host(os.environ, resource.get("current_instance_type", "local"))
    return sagemaker_env.sagemaker_variables(
        resource, channels, hyperparameters, facts, Path(environment.base_dir)
    )


def _theirs(resource: dict, channels: dict, hyperparameters: dict) -> dict[str, str]:
    class Given(dict[str, Any]):
        def __bool__(self) -> bool:  # an empty dict must not make it read files
            return True

    env = environment.Environment(Given(resource), Given(channels), Given(hyperparameters))
    variables = {str(key): str(value) for key, value in env.to_env_vars().items()}
    # It sets these in its own process, which the user's processes inherit.
    variables.update({name: os.environ[name] for name in _TOOLKIT_ENV})
    return variables


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (
        *_TOOLKIT_ENV,
        "SAGEMAKER_PROGRAM",
        "SAGEMAKER_TRAINING_MODULE",
        "TRAINING_JOB_NAME",
        "SM_HP_MP_PARAMETERS",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-such-config"))


@pytest.mark.parametrize(
    ("resource", "channels", "hyperparameters"),
    [
        (HOMOGENEOUS, CHANNELS, HYPERPARAMETERS),
        (HOMOGENEOUS, {}, {}),
        (HETEROGENEOUS, CHANNELS, HYPERPARAMETERS),
        (
            HETEROGENEOUS,
            {"train": {}},
            {
                "sagemaker_program": "trainer",
                "sagemaker_distribution_instance_groups": ["cpu"],
                "sagemaker_torch_distributed_enabled": True,
                "l": 1,
            },
        ),
        (HETEROGENEOUS, {}, {"sagemaker_parameter_server_enabled": True}),
    ],
    ids=["homogeneous", "nothing-given", "heterogeneous", "distribution-groups", "no-program"],
)
def test_same_variables_as_sagemaker_training(
    resource: dict, channels: dict, hyperparameters: dict
) -> None:
    ours = _ours(resource, channels, hyperparameters)
    theirs = _theirs(resource, channels, hyperparameters)
    assert ours == theirs
    assert "SM_TRAINING_ENV" in ours and ours["SM_CURRENT_HOST"] == resource["current_host"]


@pytest.mark.parametrize("mp_parameters", ["", "{}", '{"partitions": 2}'])
def test_process_environment_as_sagemaker_training(
    monkeypatch: pytest.MonkeyPatch, mp_parameters: str
) -> None:
    monkeypatch.setenv("SAGEMAKER_PROGRAM", "entry.py")
    monkeypatch.setenv("SAGEMAKER_TRAINING_MODULE", "framework.training:main")
    monkeypatch.setenv("TRAINING_JOB_NAME", "from-the-service")
    monkeypatch.setenv("SM_HP_MP_PARAMETERS", mp_parameters)
    ours = _ours(HOMOGENEOUS, CHANNELS, {"epochs": 1})
    assert ours == _theirs(HOMOGENEOUS, CHANNELS, {"epochs": 1})
    assert ours["SM_MODULE_NAME"] == "entry"


@pytest.mark.parametrize("source", ["variable", "profile", "default-profile"])
def test_region_as_boto3_finds_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, source: str
) -> None:
    config = tmp_path / "config"
    config.write_text("[default]\nregion = ap-south-1\n[profile team]\nregion = sa-east-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    if source == "variable":
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    elif source == "profile":
        monkeypatch.setenv("AWS_PROFILE", "team")
    ours = _ours(HOMOGENEOUS, {}, {})
    assert ours == _theirs(HOMOGENEOUS, {}, {})
    expected = {"variable": "us-west-2", "profile": "sa-east-1", "default-profile": "ap-south-1"}
    assert ours["SAGEMAKER_REGION"] == expected[source]


def test_user_arguments_as_sagemaker_training() -> None:
    hyperparameters = {"epochs": 3, "b": True, "nested": {"y": 2, "x": "a"}, "none": None}
    expected = [str(arg) for arg in mapping.to_cmd_args(hyperparameters)]
    assert sagemaker_env.to_cmd_args(hyperparameters) == expected
    assert expected[:2] == ["-b", "True"]


def test_accelerators_counted_from_their_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    for name, body in {
        "nvidia-smi": "echo 'GPU 0: A10G (UUID: x)'; echo 'GPU 1: A10G (UUID: y)'",
        "neuron-ls": 'echo \'[{"nc_count": 2}, {"nc_count": 2}]\'',
        "smddprun": "true",
    }.items():
        tool = tools / name
        tool.write_text(f"#!/bin/sh\n{body}\n")
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    facts = sagemaker_env.probe_host(os.environ, "ml.g5.12xlarge")
    assert (facts.num_gpus, facts.num_neurons) == (2, 4)
    assert (facts.smddprun_installed, facts.smddpmprun_installed) == (True, False)
    assert sagemaker_env.probe_host(os.environ, "ml.trn2.48xlarge").num_neurons == 64
    assert _ours(HOMOGENEOUS, {}, {}) == _theirs(HOMOGENEOUS, {}, {})
