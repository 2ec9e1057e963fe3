"""MXNet's parameter servers as SageMaker's MXNet container lays them out, and how
`parameter_server` picks TensorFlow's or MXNet's layout."""

import pytest

from ringleader.config.job import parse_job_config
from ringleader.config.topology import parse_topology
from ringleader.core.errors import ConfigError
from ringleader.launch import mxnet_ps
from ringleader.launch.select import MXNET, TENSORFLOW, HostFacts, role_layout, select_strategy
from ringleader.launch.spawn import SpawnSpec, rank_environment, task_command
from ringleader.launch.spawn_strategy import check_mxnet_settings

HOSTS = ("algo-1", "algo-2", "algo-3")
TOPOLOGY = parse_topology({}, {"hosts": list(HOSTS), "current_host": "algo-1"})
RANK_COMMAND = ["/venv/bin/python", "-m", "ringleader.rank", "--", "python", "train.py"]


def config(**values):
    return parse_job_config(
        TOPOLOGY,
        {"sagemaker_program": "train.py", "sagemaker_parameter_server_enabled": True, **values},
        {},
    )


def spec(servers: int = 2) -> SpawnSpec:
    return SpawnSpec(
        hosts=HOSTS,
        processes_per_host=1,
        master_addr="10.0.0.2",
        master_port=7777,
        run_id="job",
        interface="eth0",
        torch=False,
        mxnet_servers=servers,
    )


def test_each_host_runs_a_worker_and_its_servers_the_first_the_scheduler() -> None:
    roles = {
        host: [task.role for task in mxnet_ps.host_tasks(HOSTS, host, 2, "10.0.0.2", 8000, None)]
        for host in HOSTS
    }
    assert roles == {
        "algo-1": ["worker:0", "server:0", "server:1", "scheduler:0"],
        "algo-2": ["worker:1", "server:2", "server:3"],
        "algo-3": ["worker:2", "server:4", "server:5"],
    }
    scheduler = mxnet_ps.host_tasks(HOSTS, "algo-1", 2, "10.0.0.2", 8000, "eth0")[-1]
    assert dict(scheduler.env) == {
        "DMLC_ROLE": "scheduler",
        "DMLC_PS_ROOT_URI": "10.0.0.2",
        "DMLC_PS_ROOT_PORT": "8000",
        "DMLC_NUM_SERVER": "6",
        "DMLC_NUM_WORKER": "3",
        "DMLC_INTERFACE": "eth0",
    }
    assert not scheduler.main and scheduler.server_module == mxnet_ps.SERVER_MODULE


def test_ranks_follow_the_hosts_tasks_and_only_workers_end_the_job() -> None:
    layout = spec()
    assert layout.world_size == 10  # 3 workers, 6 servers, 1 scheduler
    assert [layout.first_rank(host) for host in HOSTS] == [0, 4, 7]
    assert layout.main_ranks() == frozenset({0, 4, 7})
    env = rank_environment(layout, "algo-2", 1, {})
    assert (env["RINGLEADER_RANK"], env["RINGLEADER_ROLE"], env["DMLC_ROLE"]) == (
        "5",
        "server:2",
        "server",
    )
    assert task_command(layout, "algo-2", 0, RANK_COMMAND) == RANK_COMMAND  # the worker
    server = task_command(layout, "algo-1", 3, RANK_COMMAND)
    assert server[-4:] == ["--", "/venv/bin/python", "-m", mxnet_ps.SERVER_MODULE]
    assert set(layout.forwarded_variables()) >= {"DMLC_ROLE", "DMLC_PS_ROOT_URI"}
    assert SpawnSpec.from_json(layout.to_json()) == layout


def installed(*names: str):
    return lambda name: object() if name in names else None


def test_parameter_server_means_the_framework_the_image_has() -> None:
    assert role_layout(config(), installed("tensorflow")) == TENSORFLOW
    assert role_layout(config(), installed("mxnet")) == MXNET
    assert role_layout(config(), installed("tensorflow", "mxnet")) == TENSORFLOW
    assert role_layout(config(ringleader_ps_framework="mxnet"), installed("tensorflow")) == MXNET
    with pytest.raises(ConfigError) as caught:
        role_layout(config(), installed())
    assert caught.value.field == "sagemaker_parameter_server_enabled"
    assert "neither" in str(caught.value)


def test_the_strategy_counts_every_mxnet_task() -> None:
    strategy = select_strategy(
        config(ringleader_ps_framework="mxnet", ringleader_mxnet_servers_per_host="2"),
        HostFacts(own_sshd=False, gpus=0, run_id="job", log=print),
        lambda: ["python", "train.py"],
    )
    assert strategy.world_size == 10


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"ringleader_mxnet_servers_per_host": "0"}, "ringleader_mxnet_servers_per_host"),
        ({"ringleader_mxnet_ps_port": "70000"}, "ringleader_mxnet_ps_port"),
        ({"ringleader_ps_framework": "caffe"}, "ringleader_ps_framework"),
    ],
)
def test_bad_mxnet_settings_name_the_field(values: dict, field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config(**values)
    assert caught.value.field == field


def test_more_servers_than_cpus_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    with pytest.raises(ConfigError) as caught:
        check_mxnet_settings(config(ringleader_mxnet_servers_per_host="3"))
    assert caught.value.field == "ringleader_mxnet_servers_per_host"
    assert "algo-1 has 2 CPUs" in str(caught.value)
