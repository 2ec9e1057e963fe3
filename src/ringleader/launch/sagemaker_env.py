"""SageMaker's SM_* variables for a host's ranks, computed as sagemaker-training 5 does.

Scripts written for SageMaker read SM_HOSTS, SM_CHANNEL_TRAIN, SM_TRAINING_ENV and the rest; the
values must be what sagemaker-training's `Environment.to_env_vars()` gives (tests/unit compare
both on the same inputs). We compute them here instead of importing it: its import pulls in boto3
and it forks `nvidia-smi`, `neuron-ls` and two `which`, about 0.2 CPU-seconds on every host of
every job, paid 32 times over at 32 hosts on the launch's critical path.

`sagemaker_variables` is pure; `probe_host` reads what it needs from this machine.
"""

import configparser
import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ringleader.core import paths

INFO_LOG_LEVEL = 20  # logging.INFO, sagemaker-training's default SM_LOG_LEVEL
_PROBE_TIMEOUT = 30.0
# sagemaker_* hyperparameters that are the toolkit's own settings, not framework parameters
_TOOLKIT_HYPERPARAMETERS = frozenset(
    {
        "sagemaker_program",
        "sagemaker_submit_directory",
        "sagemaker_enable_cloudwatch_metrics",
        "sagemaker_region",
        "sagemaker_container_log_level",
        "sagemaker_job_name",
        "default_user_module_name",
        "_tuning_objective_metric",
        "sagemaker_s3_output",
    }
)
# Any of these enables distribution on the current instance group (sagemaker-training's list).
_DISTRIBUTION_SWITCHES = (
    "sagemaker_mpi_enabled",
    "sagemaker_parameter_server_enabled",
    "sagemaker_distributed_dataparallel_enabled",
    "sagemaker_pytorch_ddp_enabled",
    "sagemaker_pytorch_xla_multi_worker_enabled",
    "sagemaker_multi_worker_mirrored_strategy_enabled",
    "sagemaker_torch_distributed_enabled",
)


@dataclass(frozen=True)
class HostFacts:
    """What the SM_* variables say about this machine and its process environment."""

    num_cpus: int
    num_gpus: int
    num_neurons: int
    smddprun_installed: bool
    smddpmprun_installed: bool
    region: str | None  # AWS's configured region, when the hyperparameters name none
    environ: Mapping[str, str]  # SAGEMAKER_PROGRAM, TRAINING_JOB_NAME and the like


def sagemaker_variables(
    resource_config: Mapping[str, Any],
    input_data_config: Mapping[str, Any],
    hyperparameters: Mapping[str, Any],
    facts: HostFacts,
    ml_root: Path = paths.ML_ROOT,
) -> dict[str, str]:
    """SM_* for the ranks, plus CURRENT_HOST, SAGEMAKER_JOB_NAME and SAGEMAKER_REGION (which
    sagemaker-training sets in its own process, so its user processes inherit them)."""
    environ = facts.environ
    toolkit = {
        key: value
        for key, value in hyperparameters.items()
        if key in _TOOLKIT_HYPERPARAMETERS or key.startswith("sagemaker_")
    }
    user_hyperparameters = {k: v for k, v in hyperparameters.items() if k not in toolkit}
    framework = {k: v for k, v in toolkit.items() if k not in _TOOLKIT_HYPERPARAMETERS}
    hosts = resource_config["hosts"]
    current_host = resource_config["current_host"]
    group = resource_config.get("current_group_name", "homogeneousCluster")
    groups_config = resource_config.get("instance_groups", [])
    group_names = [entry["instance_group_name"] for entry in groups_config]
    groups = {entry["instance_group_name"]: entry for entry in groups_config}
    if "sagemaker_distribution_instance_groups" in framework:
        distribution_groups = framework["sagemaker_distribution_instance_groups"]
    else:
        enabled = any(framework.get(switch, False) for switch in _DISTRIBUTION_SWITCHES)
        distribution_groups = [group] if enabled else []
    if groups_config:
        distribution_hosts = [
            host
            for entry in groups_config
            if entry["instance_group_name"] in distribution_groups
            for host in entry["hosts"]
        ]
    else:
        distribution_hosts = list(hosts)
    master = (distribution_hosts or list(hosts))[0]
    program = environ.get("SAGEMAKER_PROGRAM")
    module_name = program if program is not None else str(toolkit.get("sagemaker_program"))
    mp_parameters = environ.get("SM_HP_MP_PARAMETERS")
    input_dir = ml_root / "input"
    output_dir = ml_root / "output"
    channels = {name: str(input_dir / "data" / name) for name in input_data_config}
    topology = resource_config.get("topology", [])
    training_env = {
        "additional_framework_parameters": framework,
        "channel_input_dirs": channels,
        "current_host": current_host,
        "current_instance_group": group,
        "current_instance_group_hosts": groups[group]["hosts"] if group in groups else [],
        "current_instance_type": resource_config.get("current_instance_type", "local"),
        "distribution_hosts": distribution_hosts,
        "distribution_instance_groups": distribution_groups,
        "framework_module": environ.get("SAGEMAKER_TRAINING_MODULE"),
        "hosts": hosts,
        "hyperparameters": user_hyperparameters,
        "input_config_dir": str(input_dir / "config"),
        "input_data_config": input_data_config,
        "input_dir": str(input_dir),
        "instance_groups": group_names,
        "instance_groups_dict": groups,
        "is_hetero": len(group_names) > 1,
        "is_master": current_host == master,
        "is_modelparallel_enabled": mp_parameters and mp_parameters != "{}",
        "is_smddpmprun_installed": facts.smddpmprun_installed,
        "is_smddprun_installed": facts.smddprun_installed,
        "job_name": environ.get("TRAINING_JOB_NAME"),
        "log_level": toolkit.get("sagemaker_container_log_level", INFO_LOG_LEVEL),
        "master_hostname": master,
        "model_dir": str(ml_root / "model"),
        "module_dir": str(toolkit.get("sagemaker_submit_directory", ml_root / "code")),
        "module_name": module_name[:-3] if module_name.endswith(".py") else module_name,
        "network_interface_name": resource_config.get("network_interface_name", "eth0"),
        "num_cpus": facts.num_cpus,
        "num_gpus": facts.num_gpus,
        "num_neurons": facts.num_neurons,
        "output_data_dir": str(output_dir / "data"),
        "output_dir": str(output_dir),
        "output_intermediate_dir": str(output_dir / "intermediate"),
        "resource_config": resource_config,
        "topology": topology,
        "user_entry_point": program or toolkit.get("sagemaker_program"),
    }
    variables: dict[str, Any] = {
        key: training_env[key]
        for key in (
            "hosts",
            "network_interface_name",
            "output_data_dir",
            "current_host",
            "current_instance_type",
            "current_instance_group",
            "current_instance_group_hosts",
            "instance_groups",
            "instance_groups_dict",
            "distribution_instance_groups",
            "is_hetero",
            "module_name",
            "log_level",
            "framework_module",
            "input_dir",
            "input_config_dir",
            "output_dir",
            "num_cpus",
            "num_gpus",
            "num_neurons",
            "model_dir",
            "module_dir",
            "resource_config",
            "input_data_config",
            "user_entry_point",
            "output_intermediate_dir",
        )
    }
    variables.update(
        hps=user_hyperparameters,
        framework_params=framework,
        channels=sorted(channels),
        training_env=training_env,
        user_args=to_cmd_args(user_hyperparameters),
    )
    if topology:
        variables["topology"] = topology
    variables.update({f"channel_{name}": path for name, path in channels.items()})
    variables.update({f"hp_{key}": value for key, value in user_hyperparameters.items()})
    result = {f"SM_{key.upper()}": _env_value(value) for key, value in variables.items()}
    result["SAGEMAKER_JOB_NAME"] = str(toolkit.get("sagemaker_job_name", ""))
    result["CURRENT_HOST"] = current_host
    result["SAGEMAKER_REGION"] = str(toolkit.get("sagemaker_region", facts.region) or "")
    return result


def to_cmd_args(hyperparameters: Mapping[str, Any]) -> list[str]:
    """The user's hyperparameters as script arguments: `--name value` sorted by name (`-n` for a
    one-letter name), a dict as `k=v,k=v`."""
    args = []
    for key in sorted(hyperparameters):
        name = _text(key)
        value = hyperparameters[key]
        args.append(("--" if len(name) > 1 else "-") + name if name else "")
        if hasattr(value, "items"):
            args.append(",".join(f"{k}={v}" for k, v in sorted(value.items())))
        else:
            args.append(_text(value))
    return args


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("latin1")
    return str(value)


def _env_value(value: object) -> str:
    if value is None or isinstance(value, str | bytes):
        return _text(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def probe_host(environ: Mapping[str, str], instance_type: str) -> HostFacts:
    """This machine's CPUs, accelerators and SageMaker helper programs, and AWS's region."""
    return HostFacts(
        num_cpus=os.cpu_count() or 1,
        num_gpus=_count_gpus(),
        # neuron-ls does not list a trn2.48xlarge's cores; sagemaker-training knows they are 64
        num_neurons=64 if "trn2.48xlarge" in instance_type else _count_neuron_cores(),
        smddprun_installed=shutil.which("smddprun") is not None,
        smddpmprun_installed=shutil.which("smddpmprun") is not None,
        region=configured_region(environ),
        environ=dict(environ),
    )


def _tool_output(argv: list[str]) -> str | None:
    """A probe tool's output; None when it is not installed or fails (no such devices)."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, check=True, timeout=_PROBE_TIMEOUT
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def _count_gpus() -> int:
    listing = _tool_output(["nvidia-smi", "--list-gpus"])
    return sum(line.startswith("GPU ") for line in (listing or "").splitlines())


def _count_neuron_cores() -> int:
    listing = _tool_output(["neuron-ls", "-j"])
    try:
        devices = json.loads(listing) if listing else []
    except json.JSONDecodeError:
        return 0
    return sum(int(device.get("nc_count", 0)) for device in devices)


def configured_region(environ: Mapping[str, str]) -> str | None:
    """The region boto3 would take: AWS_DEFAULT_REGION, else the profile's in the config file."""
    if environ.get("AWS_DEFAULT_REGION"):
        return environ["AWS_DEFAULT_REGION"]
    config_file = Path(environ.get("AWS_CONFIG_FILE") or Path.home() / ".aws" / "config")
    profile = environ.get("AWS_PROFILE") or environ.get("AWS_DEFAULT_PROFILE") or "default"
    parser = configparser.RawConfigParser()
    try:
        parser.read(config_file.expanduser())
    except (configparser.Error, OSError, UnicodeDecodeError):
        return None
    for section in (profile, f"profile {profile}"):
        if parser.has_option(section, "region"):
            return parser.get(section, "region") or None
    return None
