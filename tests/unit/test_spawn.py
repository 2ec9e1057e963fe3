"""The spawn launch strategy's pure parts and its per-host launcher process."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ringleader.config.job import MPI, NO_DISTRIBUTION, TORCH_DISTRIBUTED, parse_job_config
from ringleader.config.topology import parse_topology
from ringleader.core.errors import ConfigError
from ringleader.core.exitcodes import first_failure
from ringleader.launch.spawn import (
    RANK_VARIABLE,
    TORCH_VARIABLES,
    SpawnSpec,
    rank_environment,
    spawn_argv,
)
from ringleader.launch.strategy import check_port_free
from ringleader.rank.errorfile import error_lines, read_error_file

SPEC = SpawnSpec(
    hosts=("algo-1", "algo-2", "algo-3"),
    processes_per_host=2,
    master_addr="algo-1",
    master_port=7777,
    run_id="job-1",
    interface="eth0",
    torch=True,
)
TOPOLOGY = parse_topology({}, {"hosts": ["algo-1", "algo-2"], "current_host": "algo-2"})


def test_each_rank_gets_torchruns_contract() -> None:
    env = rank_environment(SPEC, "algo-2", 1, {})
    assert env == {
        RANK_VARIABLE: "3",
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "6",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "3",
        "ROLE_RANK": "3",
        "ROLE_WORLD_SIZE": "6",
        "ROLE_NAME": "default",
        "MASTER_ADDR": "algo-1",
        "MASTER_PORT": "7777",
        "TORCHELASTIC_RUN_ID": "job-1",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_ERROR_FILE": "/run/ringleader/errors/rank-3.json",
        "OMP_NUM_THREADS": "1",
        "NCCL_SOCKET_IFNAME": "eth0",
        "GLOO_SOCKET_IFNAME": "eth0",
    }
    assert set(env) - {RANK_VARIABLE} <= set(TORCH_VARIABLES)


def test_the_users_own_threads_and_interface_win() -> None:
    inherited = {"OMP_NUM_THREADS": "4", "NCCL_SOCKET_IFNAME": "ens5"}
    env = rank_environment(SPEC, "algo-1", 0, inherited)
    assert "OMP_NUM_THREADS" not in env and "NCCL_SOCKET_IFNAME" not in env
    assert env["GLOO_SOCKET_IFNAME"] == "eth0"
    one_per_host = SpawnSpec(**{**SPEC.to_json(), "hosts": SPEC.hosts, "processes_per_host": 1})
    assert "OMP_NUM_THREADS" not in rank_environment(one_per_host, "algo-3", 0, {})


def test_without_torch_a_spawned_rank_only_learns_its_rank() -> None:
    plain = SpawnSpec.from_json({**SPEC.to_json(), "torch": False})
    assert rank_environment(plain, "algo-3", 0, {}) == {RANK_VARIABLE: "4"}


def test_spec_travels_as_json() -> None:
    assert SpawnSpec.from_json(json.loads(json.dumps(SPEC.to_json()))) == SPEC


def test_the_first_failure_in_exit_order_is_the_hosts_code() -> None:
    assert first_failure([0, 0]) == 0
    assert first_failure([0, 3, 143]) == 3


def test_the_launcher_runs_every_local_rank_and_exits_with_the_first_failure(
    tmp_path: Path,
) -> None:
    script = (
        "import os, sys, time; rank = int(os.environ['RANK']); "
        "line = f\"{rank} {os.environ['LOCAL_RANK']} {os.environ['WORLD_SIZE']}\\n\"; "
        "os.write(1, line.encode()); "  # one write per rank: lines never interleave
        "time.sleep(0.3 * rank); sys.exit({0: 0, 1: 4, 2: 0, 3: 5}[rank])"
    )
    spec = SpawnSpec.from_json({**SPEC.to_json(), "processes_per_host": 4, "hosts": ["algo-1"]})
    argv = spawn_argv(spec, "algo-1", [sys.executable, "-c", script])
    done = subprocess.run(
        [argv[0], "-c", _RUN_WITH_PATCHED_DIR.format(str(tmp_path / "errors")), *argv[3:]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 4, done.stderr  # rank 1 failed first; rank 3 later with 5
    assert sorted(done.stdout.split("\n")[:-1]) == ["0 0 4", "1 1 4", "2 2 4", "3 3 4"]


# Runs `python -m ringleader.launch.spawn` with the error-file directory under tmp_path.
_RUN_WITH_PATCHED_DIR = (
    "import sys, pathlib; from ringleader.core import paths; "
    "paths.RANK_ERROR_DIR = pathlib.Path({0!r}); "
    "from ringleader.launch import spawn; sys.exit(spawn.main(sys.argv[1:]))"
)


def test_a_recorded_exception_becomes_its_last_frames_and_message(tmp_path: Path) -> None:
    callstack = "Traceback (most recent call last):\n" + "".join(
        f'  File "train.py", line {n}, in f{n}\n    step()\n' for n in range(20)
    )
    data = {
        "message": {
            "message": "ValueError: bad shape",
            "extraInfo": {"py_callstack": callstack + "ValueError: bad shape\n", "timestamp": "1"},
        }
    }
    path = tmp_path / "error.json"
    path.write_text(json.dumps(data))
    lines = read_error_file(path)
    assert lines[-1] == "ValueError: bad shape"
    assert lines[-2] == "    step()" and len(lines) == 12
    assert error_lines({"message": "RuntimeError: from C++"}) == ("RuntimeError: from C++",)
    assert error_lines({"message": {"message": "Boom", "extraInfo": {}}}) == ("Boom",)


@pytest.mark.parametrize("text", ["", "{", "[]", '{"message": 3}', '{"message": {"x": 1}}'])
def test_an_unusable_error_file_gives_no_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "error.json"
    path.write_text(text)
    assert read_error_file(path) == ()
    assert read_error_file(tmp_path / "missing.json") == ()


def test_a_master_port_in_use_is_a_configuration_error() -> None:
    with socket.socket() as listener:
        listener.bind(("", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with pytest.raises(ConfigError) as caught:
            check_port_free(port, "algo-1")
    assert caught.value.field == "ringleader_master_port"
    assert f"MASTER_PORT {port} is not free on algo-1" in str(caught.value)
    check_port_free(port, "algo-1")  # free again


def config(**values: object) -> object:
    return parse_job_config(TOPOLOGY, {"sagemaker_program": "t.py", **values}, {})


def test_distribution_follows_the_sdks_fields() -> None:
    assert config().distribution == NO_DISTRIBUTION  # type: ignore[attr-defined]
    assert config(sagemaker_mpi_enabled="true").distribution == MPI  # type: ignore[attr-defined]
    torch = config(sagemaker_torch_distributed_enabled="true")
    assert torch.distribution == TORCH_DISTRIBUTED  # type: ignore[attr-defined]
    assert torch.spawn.master_port == 7777  # type: ignore[attr-defined]


def test_torch_distributed_and_mpi_together_are_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        config(sagemaker_torch_distributed_enabled="true", sagemaker_mpi_enabled="true")
    assert caught.value.field == "sagemaker_torch_distributed_enabled"
    assert "sagemaker_mpi_enabled" in caught.value.problem


@pytest.mark.parametrize("port", ["0", "70000", "x"])
def test_master_port_out_of_range_is_refused(port: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config(sagemaker_torch_distributed_enabled="true", ringleader_master_port=port)
    assert caught.value.field == "ringleader_master_port"


def test_processes_per_host() -> None:
    torch = parse_job_config(
        TOPOLOGY,
        {
            "sagemaker_program": "t.py",
            "sagemaker_torch_distributed_enabled": "true",
            "ringleader_processes_per_host": "3",
        },
        {},
    )
    assert torch.ranks_per_host(gpus=8) == 3
    mpi = parse_job_config(
        TOPOLOGY,
        {
            "sagemaker_program": "t.py",
            "sagemaker_mpi_enabled": "true",
            "sagemaker_mpi_num_of_processes_per_host": "2",
            "ringleader_processes_per_host": "3",
        },
        {},
    )
    assert mpi.ranks_per_host(gpus=8) == 2  # the SDK's field keeps winning for mpi
    bare = parse_job_config(
        TOPOLOGY, {"sagemaker_program": "t.py", "sagemaker_torch_distributed_enabled": "1"}, {}
    )
    assert bare.ranks_per_host(gpus=4) == 4
    assert bare.ranks_per_host(gpus=0) == 1


def test_a_module_entry_point_is_named_with_dash_m() -> None:
    module = config(sagemaker_program="-m pkg.train")
    assert module.source.module == "pkg.train"  # type: ignore[attr-defined]
    assert config(sagemaker_program="train.py").source.module is None  # type: ignore[attr-defined]
    with pytest.raises(ConfigError) as caught:
        config(sagemaker_program="-m not a module")
    assert caught.value.field == "sagemaker_program"
    assert "expected -m followed by a dotted module name" in caught.value.problem
