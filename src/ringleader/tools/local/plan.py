"""Pure planning of a local job: host names, per-host configuration files, hyperparameters."""

import json
import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ringleader.config.job import (
    DISTRIBUTIONS,
    ENABLED_KEYS,
    MPI,
    MULTI_WORKER_MIRRORED,
    PARAMETER_SERVER,
)
from ringleader.config.timeouts import DEFAULTS as TIMEOUT_DEFAULTS
from ringleader.config.timeouts import LEADER_TIMEOUT_KEY
from ringleader.config.topology import elect_leader
from ringleader.tools.local.errors import UsageError
from ringleader.tools.local.options import DEFAULT_SHM, Channel, parse_size
from ringleader.wire.auth import JOB_SECRET_VARIABLE

# Each runs fixed tasks per host (TensorFlow's or MXNet's), not a number of processes.
_FIXED_TASKS = (PARAMETER_SERVER, MULTI_WORKER_MIRRORED)


DEFAULT_IMAGE = "ringleader:latest"  # what `make image` builds


@dataclass(frozen=True)
class LocalJobSpec:
    hosts: int
    source_dir: Path
    entry_point: str
    processes_per_host: int | None = None
    distribution: str = MPI  # one of DISTRIBUTIONS
    # A heterogeneous cluster: (group name, host count) in host order, and the groups the
    # distribution runs on (the others' hosts run the script once each, plainly).
    instance_groups: tuple[tuple[str, int], ...] = ()
    distribution_groups: tuple[str, ...] = ()
    mpi_options: str = ""
    hyperparameters: Mapping[str, Any] = field(default_factory=dict)  # the script's --key value
    settings: Mapping[str, Any] = field(default_factory=dict)  # ringleader_* hyperparameters
    image: str = DEFAULT_IMAGE
    random_suffix: bool = False
    # What the containers run: SageMaker runs `docker run IMAGE train`; the benchmark swaps in
    # another entry point (sagemaker-training's `train`) in the same image.
    command: tuple[str, ...] = ("train",)
    entrypoint: tuple[str, ...] | None = None
    output_dir: Path = Path("ringleader-output")
    # Fault injection for tests and debugging: per-host environment variables, per-host
    # replacement text of a config file (e.g. {"algo-2": {"hyperparameters.json": "{"}}), and
    # hosts that are planned but never started.
    env_overrides: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    config_overrides: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    absent_hosts: frozenset[str] = frozenset()
    # What a real job needs beyond its code (see tools/local/options.py).
    channels: tuple[Channel, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)  # for every host
    host_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # for one host each
    gpus: str | None = None  # all | per-host | N
    shm_size: str = DEFAULT_SHM
    cpus: float | None = None
    memory: str | None = None
    checkpoint_dir: Path | None = None  # per-host subdirectories unless shared_checkpoints
    shared_checkpoints: bool = False
    output_uri: str | None = None  # a path on this machine or s3://
    keep: bool = False  # leave the containers (and network) for inspection


@dataclass(frozen=True)
class HostPlan:
    name: str
    container_name: str
    resource_config: dict[str, Any]
    hyperparameters: dict[str, str]
    environment: dict[str, str]


def validate(spec: LocalJobSpec) -> None:
    if spec.hosts < 1:
        raise UsageError(f"--hosts: expected at least 1, got {spec.hosts}")
    if spec.processes_per_host is not None and spec.processes_per_host < 1:
        raise UsageError(
            f"--processes-per-host: expected at least 1, got {spec.processes_per_host}"
        )
    if spec.distribution not in DISTRIBUTIONS:
        raise UsageError(
            f"--distribution: expected one of {', '.join(DISTRIBUTIONS)}, got {spec.distribution!r}"
        )
    if spec.distribution in _FIXED_TASKS and spec.processes_per_host is not None:
        raise UsageError(
            f"--processes-per-host: {spec.distribution} runs fixed tasks per host (TensorFlow's "
            "or MXNet's, see docs/distributions/), not a number of processes"
        )
    _validate_groups(spec)
    if not spec.source_dir.is_dir():
        raise UsageError(f"--source-dir: {spec.source_dir} is not a directory")
    module = spec.entry_point.startswith("-m ")  # a module, found on the path when it runs
    if not module and not (spec.source_dir / spec.entry_point).is_file():
        raise UsageError(f"--entry-point: {spec.entry_point!r} not found in {spec.source_dir}")
    _validate_resources(spec)


def _validate_resources(spec: LocalJobSpec) -> None:
    for channel in spec.channels:
        if not channel.from_s3 and not Path(channel.source).exists():
            raise UsageError(f"--input: {channel.name}={channel.source}: no such file or directory")
    parse_size("--shm-size", spec.shm_size)
    if spec.memory is not None:
        parse_size("--memory", spec.memory)
    if spec.cpus is not None and spec.cpus <= 0:
        raise UsageError(f"--cpus: expected a positive number, got {spec.cpus:g}")
    if spec.shared_checkpoints and spec.checkpoint_dir is None:
        raise UsageError("--shared-checkpoints: needs --checkpoint-dir")
    uri = spec.output_uri or ""
    if "://" in uri and not uri.lower().startswith(("s3://", "file://")):
        raise UsageError(f"--output-uri: expected a path or s3://bucket/prefix, got {uri!r}")


def _validate_groups(spec: LocalJobSpec) -> None:
    names = [name for name, _ in spec.instance_groups]
    if spec.distribution_groups and not spec.instance_groups:
        raise UsageError("--distribution-groups: needs --instance-groups")
    if not spec.instance_groups:
        return
    if len(set(names)) != len(names):
        raise UsageError(f"--instance-groups: group names repeat in {names}")
    if sum(count for _, count in spec.instance_groups) != spec.hosts:
        raise UsageError(
            f"--instance-groups: the groups have {sum(c for _, c in spec.instance_groups)} "
            f"host(s) but --hosts is {spec.hosts}"
        )
    if not spec.distribution_groups:
        raise UsageError(
            "--distribution-groups: name the instance group(s) the distributed job runs on, "
            f"out of {names}"
        )
    unknown = [name for name in spec.distribution_groups if name not in names]
    if unknown:
        raise UsageError(f"--distribution-groups: {unknown} not among --instance-groups {names}")


def parse_instance_groups(text: str) -> tuple[tuple[str, int], ...]:
    """`data:1,train:2` -> (("data", 1), ("train", 2))."""
    groups = []
    for item in text.split(","):
        name, _, count = item.strip().partition(":")
        if not name or not count.isdigit() or int(count) < 1:
            raise UsageError(
                f"--instance-groups: expected NAME:COUNT[,NAME:COUNT...], got {item!r}"
            )
        groups.append((name, int(count)))
    return tuple(groups)


def host_names(count: int, random_suffix: bool) -> list[str]:
    """algo-1..algo-N, or algo-N-xxxxx like the SageMaker SDK's local mode."""
    if not random_suffix:
        return [f"algo-{index}" for index in range(1, count + 1)]
    return [f"algo-{index}-{secrets.token_hex(3)[:5]}" for index in range(1, count + 1)]


YIELD_OPTION = "--mca mpi_yield_when_idle 1"


def oversubscribed(spec: LocalJobSpec, cpus: int) -> bool:
    """More ranks on the fake hosts together than the machine has cores."""
    return spec.distribution == MPI and spec.hosts * (spec.processes_per_host or 1) > cpus


def mpi_options(spec: LocalJobSpec, cpus: int) -> str:
    """The job's mpirun options; ranks yield the CPU while they wait when the fake hosts
    oversubscribe the machine.

    Open MPI turns yielding on itself when it sees more ranks than cores, but each fake host
    sees the whole machine, so it cannot tell. Busy-polling ranks then starve everything else
    on the machine, pulses included: in ~2 of 20 runs of a 3 x 2 Horovod job on 2 cores the
    pulses stalled for 10 s and a live host was declared lost. The user's own setting wins."""
    if not oversubscribed(spec, cpus) or "mpi_yield_when_idle" in spec.mpi_options:
        return spec.mpi_options
    return f"{spec.mpi_options} {YIELD_OPTION}".strip()


# Fake hosts share one kernel. With many ranks per core, a process that sleeps between two
# pulses can wait minutes for a CPU whatever its priority, unevenly from one process to the
# next (2 cores, 32 fake hosts x 8 ranks: pulse gaps of 18-65 s in one session, the leader's
# own pulse timers 244 s late in another, while its ranks were still in MPI_Init;
# docs/scale.md). The pulses of such hosts get this many seconds of ringleader_leader_timeout
# per rank per core, so that three timeouts (the frozen-host bound) cover about twice the
# worst lateness seen.
LEADER_TIMEOUT_PER_RANK_PER_CORE = 4 / 3


def shared_machine_leader_timeout(spec: LocalJobSpec, cpus: int) -> int | None:
    """The ringleader_leader_timeout (s) the fake hosts need when they crowd the machine's
    `cpus` cores more than the default allows for; None when the default does, or when the
    user chose a timeout (theirs wins)."""
    chosen = {f"ringleader_{key}" for key in spec.settings} | set(spec.hyperparameters)
    if LEADER_TIMEOUT_KEY in chosen:
        return None
    ranks = spec.hosts * (spec.processes_per_host or 1)
    needed = math.ceil(ranks / cpus * LEADER_TIMEOUT_PER_RANK_PER_CORE)
    return needed if needed > TIMEOUT_DEFAULTS.leader_loss else None


def sagemaker_hyperparameters(spec: LocalJobSpec, cpus: int) -> dict[str, str]:
    """Every value JSON-encoded, exactly as the SageMaker SDK writes hyperparameters.json."""
    values: dict[str, Any] = {
        "sagemaker_program": spec.entry_point,
        "sagemaker_submit_directory": "/opt/ml/code",
        "sagemaker_mpi_enabled": spec.distribution == MPI,
    }
    enabled = ENABLED_KEYS.get(spec.distribution)
    if enabled is not None and spec.distribution != MPI:
        # as the SDK's estimators send it; they have no processes-per-host field for these
        values[enabled] = True
        if spec.processes_per_host is not None:
            values["ringleader_processes_per_host"] = spec.processes_per_host
    elif spec.processes_per_host is not None:
        values["sagemaker_mpi_num_of_processes_per_host"] = spec.processes_per_host
    if options := mpi_options(spec, cpus):
        values["sagemaker_mpi_custom_mpi_options"] = options
    if spec.distribution_groups:
        values["sagemaker_distribution_instance_groups"] = list(spec.distribution_groups)
    if leader_timeout := shared_machine_leader_timeout(spec, cpus):
        values[LEADER_TIMEOUT_KEY] = leader_timeout
    values.update({f"ringleader_{key}": value for key, value in spec.settings.items()})
    if spec.output_uri is not None:
        values["ringleader_output_uri"] = output_uri_inside(spec.output_uri)
    values.update(spec.hyperparameters)
    return {key: json.dumps(value) for key, value in values.items()}


def plan_hosts(
    spec: LocalJobSpec, job_id: str, names: Sequence[str], cpus: int, secret: str | None = None
) -> list[HostPlan]:
    """Each host's container; `secret`: the job's, which every host gets (wire.auth)."""
    own = {"TRAINING_JOB_NAME": job_id}  # the job's identity, as SageMaker names a job
    if secret is not None:
        own[JOB_SECRET_VARIABLE] = secret
    hyperparameters = sagemaker_hyperparameters(spec, cpus)
    groups = group_hosts(spec.instance_groups, names)
    plans = []
    for index, name in enumerate(names, start=1):
        resource_config: dict[str, Any] = {
            "current_host": name,
            "hosts": list(names),
            "network_interface_name": "eth0",
            "current_instance_type": "local",
        }
        if groups:  # as SageMaker writes it for a heterogeneous cluster
            resource_config["current_group_name"] = next(g for g, h in groups.items() if name in h)
            resource_config["instance_groups"] = [
                {"instance_group_name": group, "instance_type": "local", "hosts": members}
                for group, members in groups.items()
            ]
        plans.append(
            HostPlan(
                name=name,
                container_name=f"{job_id}-{name}",
                resource_config=resource_config,
                hyperparameters=hyperparameters,
                environment={
                    **own,
                    **spec.env,
                    **spec.host_env.get(f"algo-{index}", {}),  # named without a suffix
                    **spec.env_overrides.get(name, {}),
                },
            )
        )
    return plans


def group_hosts(
    instance_groups: Sequence[tuple[str, int]], names: Sequence[str]
) -> dict[str, list[str]]:
    """The hosts of each group, handed out in host order."""
    groups, start = {}, 0
    for group, count in instance_groups:
        groups[group] = list(names[start : start + count])
        start += count
    return groups


def leader_host(spec: LocalJobSpec, names: Sequence[str]) -> str:
    """The host that leads: the first of the distribution's groups (else the first host)."""
    groups = group_hosts(spec.instance_groups, names)
    members = [h for group in spec.distribution_groups for h in groups.get(group, ())]
    return elect_leader(names, members)


def parse_script_args(tokens: Sequence[str]) -> dict[str, str]:
    """`--rounds 3 --lr=0.1` after `--` become hyperparameters, as SageMaker passes them back."""
    values: dict[str, str] = {}
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if not token.startswith("--") or len(token) < 3:
            raise UsageError(f"script argument {token!r}: expected --name value pairs after --")
        name, has_value, value = token[2:].partition("=")
        if not has_value:
            if index + 1 >= len(tokens):
                raise UsageError(f"script argument {token!r} has no value")
            value = tokens[index + 1]
            index += 1
        values[name] = value
        index += 1
    return values


def parse_key_values(option: str, items: Sequence[str]) -> dict[str, str]:
    values = {}
    for item in items:
        key, has_value, value = item.partition("=")
        if not has_value or not key:
            raise UsageError(f"{option}: expected KEY=VALUE, got {item!r}")
        values[key] = value
    return values


def job_id() -> str:
    return f"rl-{secrets.token_hex(3)}"


def output_uri_inside(uri: str) -> str:
    """--output-uri as the containers see it: s3:// as given; a path on this machine is mounted
    at the same absolute path in every container."""
    if uri.lower().startswith("s3://"):
        return uri
    return str(Path(uri.removeprefix("file://")).resolve())
