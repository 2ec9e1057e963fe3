"""EFA variables for the ranks: found on fake sysfs trees, set only where EFA is usable, never
over a value the user or the image gave, and nothing at all without EFA devices."""

import json
import os
from pathlib import Path

import pytest

from ringleader.config.job import ConfigFiles, JobConfig, MpiConfig, SourceConfig
from ringleader.config.topology import parse_topology
from ringleader.launch import fabric, hostenv, sagemaker_env
from ringleader.launch.fabric import FabricFacts, efa_settings
from ringleader.rank.wrapper import rank_environment


def add_rdma_device(sys_class: Path, name: str, driver: str | None) -> None:
    """A device as sysfs shows it: <name>/device/driver -> .../drivers/<driver>."""
    device = sys_class / name / "device"
    device.mkdir(parents=True)
    if driver is not None:
        drivers = sys_class.parent / "bus" / "pci" / "drivers" / driver
        drivers.mkdir(parents=True, exist_ok=True)
        (device / "driver").symlink_to(drivers)


def add_verbs_node(dev_dir: Path, name: str = "uverbs0") -> None:
    dev_dir.mkdir(parents=True, exist_ok=True)
    (dev_dir / name).touch()


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    return tmp_path / "sys" / "class" / "infiniband"


def test_efa_devices_are_told_apart_by_their_driver(sysfs: Path) -> None:
    add_rdma_device(sysfs, "rdmap16s27", "efa")
    add_rdma_device(sysfs, "rdmap32s27", "efa")
    add_rdma_device(sysfs, "mlx5_0", "mlx5_core")  # InfiniBand/RoCE: not EFA
    add_rdma_device(sysfs, "efa_0", None)  # no driver link: the efa driver's own name tells
    add_rdma_device(sysfs, "rdmap48s27", None)  # no link and no efa name: unknown, left out
    assert fabric.find_efa_devices(sysfs) == ("efa_0", "rdmap16s27", "rdmap32s27")


def test_no_sysfs_class_means_no_efa(tmp_path: Path) -> None:
    assert fabric.find_efa_devices(tmp_path / "absent") == ()
    assert fabric.has_verbs_nodes(tmp_path / "absent") is False


def test_verbs_nodes_show_the_devices_were_passed_in(tmp_path: Path) -> None:
    dev_dir = tmp_path / "dev" / "infiniband"
    dev_dir.mkdir(parents=True)
    (dev_dir / "rdma_cm").touch()
    assert fabric.has_verbs_nodes(dev_dir) is False
    add_verbs_node(dev_dir)
    assert fabric.has_verbs_nodes(dev_dir) is True


def test_probe_reads_the_trees(sysfs: Path, tmp_path: Path) -> None:
    add_rdma_device(sysfs, "rdmap16s27", "efa")
    add_verbs_node(tmp_path / "dev")
    facts = fabric.probe_fabric("ml.p4d.24xlarge", 8, sysfs, tmp_path / "dev")
    assert facts == FabricFacts(("rdmap16s27",), True, 8, "ml.p4d.24xlarge")


P4D_WITH_EFA = FabricFacts(("rdmap16s27", "rdmap32s27", "rdmap48s27"), True, 8, "ml.p4d.24xlarge")


@pytest.mark.parametrize(
    "facts",
    [
        FabricFacts(),
        # an RDMA instance type by name, but no EFA device here: still nothing
        FabricFacts((), True, 8, "ml.p4d.24xlarge"),
    ],
)
def test_without_efa_devices_nothing_is_set_or_said(facts: FabricFacts) -> None:
    assert efa_settings(facts, already_set=()) == fabric.FabricSettings({}, None)


def test_rdma_instance_type_gets_provider_and_device_rdma() -> None:
    settings = efa_settings(P4D_WITH_EFA, already_set={"PATH"})
    assert settings.variables == {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}
    assert settings.note == (
        "EFA: 3 devices (rdmap16s27, rdmap32s27, ...), 8 GPUs: ranks get FI_PROVIDER=efa "
        "FI_EFA_USE_DEVICE_RDMA=1; p4d.24xlarge's EFA has RDMA read"
    )


@pytest.mark.parametrize("instance_type", ["p5.48xlarge", "ml.p5.48xlarge", "ml.trn1.32xlarge"])
def test_ec2_and_sagemaker_names_alike(instance_type: str) -> None:
    facts = FabricFacts(("rdmap0s6",), True, 8, instance_type)
    assert efa_settings(facts, ()).variables["FI_EFA_USE_DEVICE_RDMA"] == "1"


@pytest.mark.parametrize("instance_type", ["ml.g5.48xlarge", "ml.p3dn.24xlarge", "local", None])
def test_device_rdma_only_where_the_instance_type_has_rdma_read(instance_type) -> None:
    """Libfabric aborts on FI_EFA_USE_DEVICE_RDMA=1 without RDMA read (g5, p3dn); where the
    type is unknown it is left to libfabric, which uses RDMA read by itself when it exists."""
    settings = efa_settings(FabricFacts(("rdmap0s6",), True, 4, instance_type), ())
    assert settings.variables == {"FI_PROVIDER": "efa"}
    assert settings.note is not None and "FI_EFA_USE_DEVICE_RDMA not set" in settings.note


def test_no_nccl_proto_or_rdmav_fork_safe() -> None:
    """aws-ofi-nccl: NCCL_PROTO=simple only for plugin <= 1.5.0; RDMAV_FORK_SAFE: do not use."""
    variables = efa_settings(P4D_WITH_EFA, ()).variables
    assert set(variables) == {"FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA"}


def test_a_value_already_given_is_left_alone() -> None:
    settings = efa_settings(P4D_WITH_EFA, already_set={"FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA"})
    assert settings.variables == {}
    assert settings.note is not None
    assert "ranks get nothing" in settings.note
    assert "already set, left as given: FI_PROVIDER, FI_EFA_USE_DEVICE_RDMA" in settings.note


def test_devices_not_passed_into_the_container_set_nothing_but_say_so() -> None:
    facts = FabricFacts(("rdmap16s27",), False, 8, "ml.p4d.24xlarge")
    settings = efa_settings(facts, ())
    assert settings.variables == {}
    assert settings.note is not None and "not passed in" in settings.note


# hostenv: the variables reach the host environment file; the leader logs them


def job(current_host: str, custom_options: tuple[str, ...] = ()) -> JobConfig:
    topology = parse_topology({}, {"hosts": ["algo-1", "algo-2"], "current_host": current_host})
    return JobConfig(
        topology=topology,
        source=SourceConfig("train.py"),
        hyperparameters={},
        mpi=MpiConfig(custom_options=custom_options),
    )


def test_leader_logs_what_it_set() -> None:
    lines: list[str] = []
    variables = hostenv.fabric_variables(job("algo-1"), P4D_WITH_EFA, {}, lines.append)
    assert variables == {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}
    assert len(lines) == 1 and "ranks get FI_PROVIDER=efa" in lines[0]


def test_worker_sets_the_same_without_a_log_line() -> None:
    lines: list[str] = []
    assert hostenv.fabric_variables(job("algo-2"), P4D_WITH_EFA, {}, lines.append) == {
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
    }
    assert lines == []


def test_container_env_and_mpirun_x_are_the_users() -> None:
    config = job("algo-1", ("-x", "FI_EFA_USE_DEVICE_RDMA=0"))
    environ = {"FI_PROVIDER": "tcp"}
    variables = hostenv.fabric_variables(config, P4D_WITH_EFA, environ, lambda line: None)
    assert variables == {}


def sagemaker_env_vars_with(tmp_path: Path, monkeypatch, with_efa: bool) -> dict[str, str]:
    """hostenv.sagemaker_env_vars with fabric's sysfs and /dev pointed at fake trees."""
    sys_class, dev_dir = tmp_path / "sys" / "class" / "infiniband", tmp_path / "dev" / "ib"
    if with_efa:
        add_rdma_device(sys_class, "rdmap16s27", "efa")
        add_verbs_node(dev_dir)
    real_probe = fabric.probe_fabric
    monkeypatch.setattr(
        hostenv.fabric,
        "probe_fabric",
        lambda instance_type, gpus: real_probe(instance_type, gpus, sys_class, dev_dir),
    )
    for name in ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "SM_CURRENT_INSTANCE_TYPE"):
        monkeypatch.delenv(name, raising=False)
    config_dir = tmp_path / "config"
    config_dir.mkdir(exist_ok=True)
    resource = {
        "current_host": "algo-1",
        "hosts": ["algo-1", "algo-2"],
        "current_instance_type": "ml.p4d.24xlarge",
    }
    (config_dir / "resourceconfig.json").write_text(json.dumps(resource))
    return hostenv.sagemaker_env_vars(job("algo-1"), ConfigFiles(config_dir), lambda line: None)


def test_without_efa_the_host_environment_is_unchanged(tmp_path: Path, monkeypatch) -> None:
    """No EFA devices: exactly SageMaker's SM_* variables and what AWS's framework
    containers add for every job (MASTER_ADDR, MASTER_PORT), no FI_* added."""
    variables = sagemaker_env_vars_with(tmp_path, monkeypatch, with_efa=False)
    assert not [name for name in variables if name.startswith(("FI_", "NCCL_", "RDMAV_"))]
    config = job("algo-1")
    resource = json.loads((tmp_path / "config" / "resourceconfig.json").read_text())
    resource["network_interface_name"] = config.topology.network_interface
    facts = sagemaker_env.probe_host(os.environ, "ml.p4d.24xlarge")
    assert variables == {
        **hostenv.container_variables(config, os.environ),
        **sagemaker_env.sagemaker_variables(resource, {}, {}, facts),
    }


def test_with_efa_the_variables_reach_every_rank(tmp_path: Path, monkeypatch) -> None:
    """They go into the host environment file, which every rank wrapper on this host reads
    (mpirun's ranks and spawned ones alike); a user's -x still wins in the wrapper."""
    variables = sagemaker_env_vars_with(tmp_path, monkeypatch, with_efa=True)
    assert variables["FI_PROVIDER"] == "efa"
    assert variables["FI_EFA_USE_DEVICE_RDMA"] == "1"
    host_env = hostenv.host_environment({"PATH": "/usr/bin"}, variables)
    assert rank_environment(host_env, {}, [])["FI_PROVIDER"] == "efa"
    forwarded = rank_environment(host_env, {"FI_PROVIDER": "tcp"}, ["FI_PROVIDER"])
    assert forwarded["FI_PROVIDER"] == "tcp"
