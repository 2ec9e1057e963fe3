"""TensorFlow's distributions as SageMaker lays them out, and how spawned TF tasks end."""

import json

import pytest

from ringleader.config.job import parse_job_config
from ringleader.config.topology import parse_topology
from ringleader.core.errors import ConfigError
from ringleader.launch import tfconfig
from ringleader.launch.spawn import SpawnSpec, rank_environment, task_command

HOSTS = ("algo-1", "algo-2", "algo-3")
PORTS = tfconfig.TfPorts()


def spec(tf: str, roles: str = "master") -> SpawnSpec:
    return SpawnSpec(
        hosts=HOSTS,
        processes_per_host=1 if tf == tfconfig.MULTI_WORKER_MIRRORED else 2,
        master_addr="algo-1",
        master_port=7777,
        run_id="job",
        interface="eth0",
        torch=False,
        tf=tf,
        tf_roles=roles,
    )


def test_parameter_server_layout_is_sagemakers() -> None:
    tasks = tfconfig.host_tasks(tfconfig.PARAMETER_SERVER, HOSTS, "algo-2", "master", PORTS)
    assert [(t.job, t.index, t.runs_script, t.main) for t in tasks] == [
        ("worker", 0, True, False),
        ("ps", 1, False, False),
    ]
    config = json.loads(tasks[0].env["TF_CONFIG"])
    assert config == {
        "cluster": {
            "master": ["algo-1:2222"],
            "worker": ["algo-2:2222", "algo-3:2222"],
            "ps": ["algo-1:2223", "algo-2:2223", "algo-3:2223"],
        },
        "environment": "cloud",
        "task": {"type": "worker", "index": 0},
    }
    master = tfconfig.host_tasks(tfconfig.PARAMETER_SERVER, HOSTS, "algo-1", "master", PORTS)[0]
    assert (master.role, master.runs_script, master.main) == ("master:0", True, True)


def test_chief_roles_run_the_script_on_the_chief_only() -> None:
    chief = tfconfig.host_tasks(tfconfig.PARAMETER_SERVER, HOSTS, "algo-1", "chief", PORTS)
    worker = tfconfig.host_tasks(tfconfig.PARAMETER_SERVER, HOSTS, "algo-3", "chief", PORTS)
    assert [(t.role, t.runs_script, t.main) for t in chief] == [
        ("chief:0", True, True),
        ("ps:0", False, False),
    ]
    assert [(t.role, t.runs_script) for t in worker] == [("worker:1", False), ("ps:2", False)]
    assert json.loads(chief[0].env["TF_CONFIG"])["cluster"]["chief"] == ["algo-1:2222"]


def test_mirrored_workers_on_port_8890_in_host_order() -> None:
    tasks = tfconfig.host_tasks(tfconfig.MULTI_WORKER_MIRRORED, HOSTS, "algo-3", "master", PORTS)
    assert len(tasks) == 1 and tasks[0].main and tasks[0].runs_script
    assert json.loads(tasks[0].env["TF_CONFIG"]) == {
        "cluster": {"worker": ["algo-1:8890", "algo-2:8890", "algo-3:8890"]},
        "environment": "cloud",
        "task": {"type": "worker", "index": 2},
    }


def test_one_host_parameter_server_runs_the_script_alone_as_sagemaker_does() -> None:
    """SageMaker's TensorFlow container gives a one-host parameter_server job no ps task and
    no TF_CONFIG: the script runs once, as it would without a distribution."""
    tasks = tfconfig.host_tasks(tfconfig.PARAMETER_SERVER, ("algo-1",), "algo-1", "master", PORTS)
    assert [(t.role, t.runs_script, t.main, t.env) for t in tasks] == [("master:0", True, True, {})]
    assert tfconfig.ports_on(tfconfig.PARAMETER_SERVER, PORTS, 1) == []
    assert tfconfig.ports_on(tfconfig.PARAMETER_SERVER, PORTS, 2) == [2222, 2223]
    alone = SpawnSpec(
        hosts=("algo-1",),
        processes_per_host=1,
        master_addr="algo-1",
        master_port=7777,
        run_id="job",
        interface=None,
        torch=False,
        tf=tfconfig.PARAMETER_SERVER,
    )
    env = rank_environment(alone, "algo-1", 0, {})
    assert "TF_CONFIG" not in env and env["RINGLEADER_ROLE"] == "master:0"
    assert (alone.world_size, alone.main_ranks()) == (1, frozenset({0}))


def test_each_spawned_task_gets_its_tf_config_and_role() -> None:
    ps = spec(tfconfig.PARAMETER_SERVER)
    env = rank_environment(ps, "algo-2", 1, {})
    assert env["RINGLEADER_RANK"] == "3" and env["RINGLEADER_ROLE"] == "ps:1"
    assert env["CUDA_VISIBLE_DEVICES"] == ""  # parameter servers stay on the CPU
    assert json.loads(env["TF_CONFIG"])["task"] == {"type": "ps", "index": 1}
    assert "CUDA_VISIBLE_DEVICES" not in rank_environment(ps, "algo-2", 0, {})
    assert ps.main_ranks() == frozenset({0})  # the master
    assert spec(tfconfig.MULTI_WORKER_MIRRORED).main_ranks() == frozenset({0, 1, 2})


def test_servers_run_ringleaders_tf_server_inside_the_rank_wrapper() -> None:
    wrapper = ["py", "-m", "ringleader.rank", "--grace", "30", "--", "py", "train.py"]
    chief = spec(tfconfig.PARAMETER_SERVER, "chief")
    assert task_command(chief, "algo-1", 0, wrapper) == wrapper
    server = ["py", "-m", "ringleader.rank", "--grace", "30", "--"]
    assert task_command(chief, "algo-1", 1, wrapper) == [*server, "py", "-m", tfconfig.__name__]
    assert task_command(chief, "algo-2", 0, wrapper)[-1] == tfconfig.__name__


def test_spec_with_tensorflow_travels_as_json() -> None:
    original = spec(tfconfig.PARAMETER_SERVER, "chief")
    assert SpawnSpec.from_json(json.loads(json.dumps(original.to_json()))) == original


TOPOLOGY = parse_topology({}, {"hosts": list(HOSTS), "current_host": "algo-1"})


@pytest.mark.parametrize(
    ("values", "field"),
    [
        (
            {"sagemaker_parameter_server_enabled": True, "sagemaker_mpi_enabled": True},
            "sagemaker_parameter_server_enabled",
        ),
        (
            {
                "sagemaker_multi_worker_mirrored_strategy_enabled": True,
                "sagemaker_torch_distributed_enabled": True,
            },
            "sagemaker_multi_worker_mirrored_strategy_enabled",
        ),
        (
            {"sagemaker_parameter_server_enabled": True, "ringleader_tf_roles": "boss"},
            "ringleader_tf_roles",
        ),
        (
            {"sagemaker_parameter_server_enabled": True, "ringleader_tf_ps_port": 0},
            "ringleader_tf_ps_port",
        ),
    ],
)
def test_bad_tensorflow_settings_name_the_field(values: dict, field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_job_config(TOPOLOGY, {"sagemaker_program": "t.py", **values}, {})
    assert caught.value.field == field


def test_tensorflow_distributions_are_recognised() -> None:
    config = parse_job_config(
        TOPOLOGY,
        {
            "sagemaker_program": "t.py",
            "sagemaker_parameter_server_enabled": "true",
            "ringleader_tf_roles": "chief",
            "ringleader_tf_ps_port": "3333",
        },
        {},
    )
    assert (config.distribution, config.spawn.tf_roles, config.spawn.tf_ps_port) == (
        "parameter_server",
        "chief",
        3333,
    )
