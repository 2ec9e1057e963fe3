"""What AWS's framework containers export for every job, whatever its distribution
(launch/hostenv.py container_variables; the table in docs/sagemaker.md)."""

from ringleader.config.job import JobConfig, SourceConfig, SpawnConfig
from ringleader.config.topology import parse_topology
from ringleader.launch import hostenv


def job(current_host: str, master_port: int = 7777, groups: bool = False) -> JobConfig:
    resource_config: dict[str, object] = {
        "hosts": ["algo-1", "algo-2", "algo-3"],
        "current_host": current_host,
    }
    hyperparameters: dict[str, object] = {}
    if groups:  # the distribution on the train group; data's host is listed first
        resource_config["instance_groups"] = [
            {"instance_group_name": "data", "hosts": ["algo-1"]},
            {"instance_group_name": "train", "hosts": ["algo-2", "algo-3"]},
        ]
    topology = parse_topology({}, resource_config)
    if groups:
        topology = topology.with_distribution_groups("groups", ("train",))
    return JobConfig(
        topology=topology,
        source=SourceConfig("train.py"),
        hyperparameters=hyperparameters,
        spawn=SpawnConfig(master_port=master_port),
    )


def test_every_host_gets_the_first_host_and_port_7777():
    for host in ("algo-1", "algo-2", "algo-3"):
        assert hostenv.container_variables(job(host), {}) == {
            "MASTER_ADDR": "algo-1",
            "MASTER_PORT": "7777",
        }


def test_ringleader_master_port_moves_it():
    assert hostenv.container_variables(job("algo-2", 29500), {})["MASTER_PORT"] == "29500"


def test_the_master_is_the_distribution_s_first_host():
    assert hostenv.container_variables(job("algo-1", groups=True), {})["MASTER_ADDR"] == "algo-2"


def test_the_container_s_own_values_win():
    environ = {"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "1234"}
    assert hostenv.container_variables(job("algo-1"), environ) == {}
    assert hostenv.container_variables(job("algo-1"), {"MASTER_PORT": "1234"}) == {
        "MASTER_ADDR": "algo-1"
    }
