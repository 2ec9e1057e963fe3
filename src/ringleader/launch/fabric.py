"""Libfabric variables for hosts with EFA devices, the ones SageMaker's runners set.

sagemaker-training 5.1.4 (mpi.py, torch_distributed.py, smdataparallel.py) sets FI_PROVIDER=efa
on EFA instance types and FI_EFA_USE_DEVICE_RDMA=1 on those whose EFA has RDMA read. We set the
same two, only where this host's EFA devices are usable, and never over a value already given.
NCCL_PROTO=simple and RDMAV_FORK_SAFE=1, which those runners also set, are left out: AWS's
aws-ofi-nccl documents the first as needed only up to plugin 1.5.0 (newer plugins set it
themselves when the platform needs it) and advises against the second. docs/gpu-efa.md has the
sources.

`efa_settings` is the rule (pure); `probe_fabric` reads the facts from this machine.
"""

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

SYS_CLASS_INFINIBAND = Path("/sys/class/infiniband")  # RDMA devices, also seen in containers
DEV_INFINIBAND = Path("/dev/infiniband")  # their uverbs nodes, only where they were passed in
EFA_DRIVER = "efa"
# EC2 instance types whose EFA supports RDMA read: sagemaker-training 5.1.4's
# SM_EFA_RDMA_INSTANCES without the "ml." prefix. Libfabric aborts when FI_EFA_USE_DEVICE_RDMA=1
# meets a device without RDMA read, so it is set for these types only.
RDMA_READ_INSTANCE_TYPES = frozenset(
    {
        "p4d.24xlarge",
        "p4de.24xlarge",
        "p5.48xlarge",
        "p5e.48xlarge",
        "trn1.32xlarge",
        "p6e-gb200.36xlarge",
    }
)
_NAMED_DEVICES = 2  # how many device names the log line shows


@dataclass(frozen=True)
class FabricFacts:
    efa_devices: tuple[str, ...] = ()  # RDMA devices bound to the efa driver
    verbs_nodes: bool = False  # /dev/infiniband/uverbs*: the devices were passed in here
    gpu_count: int = 0
    instance_type: str | None = None  # as given ("ml.p4d.24xlarge"); None when unknown


@dataclass(frozen=True)
class FabricSettings:
    variables: Mapping[str, str] = field(default_factory=dict)  # none of them already set
    note: str | None = None  # one log line: what was set and why; None without EFA


def ec2_instance_type(instance_type: str | None) -> str | None:
    """The EC2 name of SageMaker's "ml.p4d.24xlarge" or EC2's "p4d.24xlarge"; None for "local"."""
    if not instance_type or instance_type == "local":
        return None
    return instance_type.removeprefix("ml.")


def known_instance_type(from_resource_config: str, environ: Mapping[str, str]) -> str | None:
    """The instance type resourceconfig.json names; SageMaker local mode's "local" says
    nothing, SM_CURRENT_INSTANCE_TYPE may."""
    if from_resource_config != "local":
        return from_resource_config
    return environ.get("SM_CURRENT_INSTANCE_TYPE")


def efa_settings(facts: FabricFacts, already_set: Collection[str]) -> FabricSettings:
    """The variables to add to the ranks' environment, and the log line saying why."""
    if not facts.efa_devices:
        return FabricSettings()
    found = _describe(facts)
    if not facts.verbs_nodes:
        return FabricSettings(
            note=f"{found}, but no /dev/infiniband/uverbs* in this container (the devices "
            "were not passed in): no EFA variables set"
        )
    wanted = {"FI_PROVIDER": "efa"}
    instance_type = ec2_instance_type(facts.instance_type)
    if instance_type in RDMA_READ_INSTANCE_TYPES:
        wanted["FI_EFA_USE_DEVICE_RDMA"] = "1"
        rdma = f"{instance_type}'s EFA has RDMA read"
    else:
        rdma = (
            f"FI_EFA_USE_DEVICE_RDMA not set: RDMA read not known for "
            f"{instance_type or 'an unknown instance type'}"
        )
    variables = {name: value for name, value in wanted.items() if name not in already_set}
    kept = [name for name in wanted if name in already_set]
    parts = [
        f"{found}: ranks get " + (" ".join(f"{k}={v}" for k, v in variables.items()) or "nothing"),
        rdma,
    ]
    if kept:
        parts.append("already set, left as given: " + ", ".join(kept))
    return FabricSettings(variables, "; ".join(parts))


def _describe(facts: FabricFacts) -> str:
    names = ", ".join(facts.efa_devices[:_NAMED_DEVICES])
    if len(facts.efa_devices) > _NAMED_DEVICES:
        names += ", ..."
    count = len(facts.efa_devices)
    return f"EFA: {count} device{'s' * (count != 1)} ({names}), {facts.gpu_count} GPUs"


def probe_fabric(
    instance_type: str | None,
    gpu_count: int,
    sys_class: Path = SYS_CLASS_INFINIBAND,
    dev_dir: Path = DEV_INFINIBAND,
) -> FabricFacts:
    return FabricFacts(
        efa_devices=find_efa_devices(sys_class),
        verbs_nodes=has_verbs_nodes(dev_dir),
        gpu_count=gpu_count,
        instance_type=instance_type,
    )


def find_efa_devices(sys_class: Path = SYS_CLASS_INFINIBAND) -> tuple[str, ...]:
    """Names of the RDMA devices whose driver is efa (rdmap16s27, or efa_0 on older kernels);
    InfiniBand and RoCE adapters are left out."""
    try:
        devices = sorted(sys_class.iterdir())
    except OSError:
        return ()
    return tuple(device.name for device in devices if _is_efa(device))


def _is_efa(device: Path) -> bool:
    try:
        driver = os.readlink(device / "device" / "driver")
    except OSError:
        # no driver link to read: only the name can tell (the efa driver's own naming)
        return device.name.startswith("efa_")
    return Path(driver).name == EFA_DRIVER


def has_verbs_nodes(dev_dir: Path = DEV_INFINIBAND) -> bool:
    try:
        return any(node.name.startswith("uverbs") for node in dev_dir.iterdir())
    except OSError:
        return False
