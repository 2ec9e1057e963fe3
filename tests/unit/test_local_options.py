"""`ringleader local`'s data, environment and resource options (pure parts)."""

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from ringleader.tools.local.data import HostData, PipeFeeder, channel_files
from ringleader.tools.local.errors import UsageError
from ringleader.tools.local.options import (
    Channel,
    gpu_plan,
    gpus_per_host,
    input_data_config,
    parse_channels,
    parse_env,
    parse_env_file,
    parse_host_env,
    parse_size,
    resource_warnings,
    shard,
)
from ringleader.tools.local.plan import LocalJobSpec, plan_hosts, validate


def test_channels_with_modes_sharding_and_content_types():
    channels = parse_channels(
        ["train=/data/train", "eval=s3://bucket/eval/"],
        ["eval=pipe"],
        ["train=by-host"],
        ["train=text/csv"],
    )
    assert channels == (
        Channel("train", "/data/train", "file", "by-host", "text/csv"),
        Channel("eval", "s3://bucket/eval/", "pipe", "replicated", None),
    )
    assert channels[1].from_s3 and not channels[0].from_s3
    assert input_data_config(channels) == {
        "train": {
            "TrainingInputMode": "File",
            "S3DistributionType": "ShardedByS3Key",
            "RecordWrapperType": "None",
            "ContentType": "text/csv",
        },
        "eval": {
            "TrainingInputMode": "Pipe",
            "S3DistributionType": "FullyReplicated",
            "RecordWrapperType": "None",
        },
    }


@pytest.mark.parametrize(
    ("inputs", "modes", "expected"),
    [
        (["train"], [], "--input: expected NAME=PATH"),
        (["tr ain=/x"], [], "channel name 'tr ain'"),
        (["t" * 65 + "=/x"], [], "1-64 letters"),
        (["train=/x", "train=/y"], [], "channel 'train' is given twice"),
        (["train=/x"], ["eval=pipe"], "--input-mode: 'eval' is not a channel"),
        (["train=/x"], ["train=stream"], "--input-mode: expected file or pipe for train"),
    ],
)
def test_bad_channels(inputs, modes, expected):
    with pytest.raises(UsageError, match=expected.replace("(", r"\(")):
        parse_channels(inputs, modes)


def test_sharding_is_disjoint_and_complete():
    files = [f"f{n:02}" for n in range(10)]
    shards = [shard(files, 3, index) for index in range(3)]
    assert sorted(name for part in shards for name in part) == files
    assert all(not set(a) & set(b) for a in shards for b in shards if a is not b)
    assert shards[0] == ["f00", "f03", "f06", "f09"]


def test_environment_options_never_echo_values():
    assert parse_env(["A=1", "B=x=y", "EMPTY="]) == {"A": "1", "B": "x=y", "EMPTY": ""}
    with pytest.raises(UsageError) as error:
        parse_env(["1BAD=secret-value"])
    assert "secret-value" not in str(error.value)
    text = "# comment\n\nTOKEN=abc\nURL=http://x\n"
    assert parse_env_file(text, "f.env") == {"TOKEN": "abc", "URL": "http://x"}
    with pytest.raises(
        UsageError, match=r"--env-file: f.env:2: expected KEY=VALUE, got 'NOEQUALS'"
    ):
        parse_env_file("A=1\nNOEQUALS\n", "f.env")
    hosts = ["algo-1", "algo-2"]
    assert parse_host_env(["algo-2:A=1", "algo-2:B=2"], hosts) == {"algo-2": {"A": "1", "B": "2"}}
    with pytest.raises(UsageError, match="HOST one of algo-1, algo-2"):
        parse_host_env(["algo-3:A=1"], hosts)


def test_sizes_gpus_and_warnings():
    assert parse_size("--shm-size", "1g") == 1 << 30
    assert parse_size("--memory", "512m") == 512 << 20
    assert parse_size("--memory", "1000") == 1000
    for bad in ("abc", "0", "1t", ""):
        with pytest.raises(UsageError, match="--shm-size: expected a size"):
            parse_size("--shm-size", bad)
    with pytest.raises(UsageError, match="no GPU found"):
        gpu_plan("all", 0, 3)
    assert gpu_plan(None, 0, 2) == [None, None]
    assert gpu_plan("all", 4, 2) == [-1, -1]
    assert gpu_plan("per-host", 4, 2) == [["0", "1"], ["2", "3"]]
    assert gpu_plan("1", 4, 3) == [1, 1, 1]
    assert gpus_per_host(gpu_plan("per-host", 8, 4), 8) == 2
    assert gpus_per_host(gpu_plan("all", 8, 4), 8) == 8
    with pytest.raises(UsageError, match="only 2 GPU"):
        gpu_plan("3", 2, 1)
    assert resource_warnings(3, 1.0, None, 2, 8 << 30) == [
        "--cpus 1 x 3 hosts asks for more than the machine's 2 CPUs"
    ]
    assert resource_warnings(2, None, 1 << 30, 2, 8 << 30) == []


def test_env_reaches_every_host_and_host_env_one(tmp_path):
    spec = LocalJobSpec(
        hosts=2,
        source_dir=tmp_path,
        entry_point="train.py",
        env={"A": "1"},
        host_env={"algo-2": {"B": "2"}},
        output_uri=str(tmp_path / "out"),
    )
    hosts = plan_hosts(spec, "rl-x", ["algo-1-abcde", "algo-2-fghij"], 2)
    job = {"TRAINING_JOB_NAME": "rl-x"}
    assert [host.environment for host in hosts] == [{**job, "A": "1"}, {**job, "A": "1", "B": "2"}]
    assert json.loads(hosts[0].hyperparameters["ringleader_output_uri"]) == str(tmp_path / "out")


def test_validation_catches_missing_inputs_and_bad_sizes(tmp_path):
    (tmp_path / "train.py").write_text("")
    base = {"hosts": 1, "source_dir": tmp_path, "entry_point": "train.py"}
    with pytest.raises(UsageError, match="--input: train=/no/such: no such file"):
        validate(LocalJobSpec(**base, channels=(Channel("train", "/no/such"),)))
    with pytest.raises(UsageError, match="--shm-size"):
        validate(LocalJobSpec(**base, shm_size="abc"))
    with pytest.raises(UsageError, match="--shared-checkpoints: needs --checkpoint-dir"):
        validate(LocalJobSpec(**base, shared_checkpoints=True))
    with pytest.raises(UsageError, match="--output-uri"):
        validate(LocalJobSpec(**base, output_uri="ftp://x/y"))


def test_host_data_mounts_shards_and_pipes(tmp_path):
    source = tmp_path / "train"
    (source / "sub").mkdir(parents=True)
    for name in ("a", "b", "c", "sub/d"):
        (source / name).write_text(name[-1])
    assert channel_files(source) == ["a", "b", "c", "sub/d"]
    data = HostData(tmp_path / "host2", 1, 2)
    data.add(Channel("train", str(source)), source)
    data.add(Channel("part", str(source), sharding="by-host"), source)
    data.add(Channel("stream", str(source), mode="pipe"), source)
    assert data.mounts[str(source)] == "/opt/ml/input/data/train"
    shard_dir = next(path for path, inside in data.mounts.items() if inside.endswith("/part"))
    assert channel_files(Path(shard_dir)) == ["b", "sub/d"]
    fifo = data.directory / "stream_0"
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    data.start()
    try:
        for epoch in range(2):  # each epoch: the whole channel, then the next FIFO
            with open(data.directory / f"stream_{epoch}", "rb") as pipe:
                assert pipe.read() == b"abcd"
            assert stat.S_ISFIFO((data.directory / f"stream_{epoch + 1}").stat().st_mode)
    finally:
        data.stop()


def test_pipe_feeder_waiting_for_a_reader_is_released_by_stop(tmp_path):
    (tmp_path / "x").write_text("x")
    feeder = PipeFeeder(tmp_path, "train", [tmp_path / "x"])
    feeder.start()
    stopped = threading.Event()
    threading.Thread(target=lambda: (feeder.stop(), stopped.set()), daemon=True).start()
    assert stopped.wait(10)
    assert not feeder._thread.is_alive()
    assert os.path.exists(tmp_path / "train_0")


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--input", "train=/no/such/dir"], "--input: train=/no/such/dir: no such file"),
        (["--input", "bad name=/tmp"], "channel name 'bad name'"),
        (["--input", "train=/tmp", "--input", "train=/var"], "channel 'train' is given twice"),
        (["--gpus", "all"], "--gpus all: no GPU found"),
        (["--shm-size", "abc"], "--shm-size: expected a size"),
        (["--env", "NOT A NAME=1"], "--env: expected KEY=VALUE"),
    ],
)
def test_bad_local_options_exit_2_before_any_container(flags, expected, capsys, monkeypatch):
    """No Docker Engine is needed to be told: the error comes first."""
    from ringleader.tools import cli

    monkeypatch.setattr("ringleader.tools.local.options.available_gpus", lambda: 0)
    monkeypatch.setattr("ringleader.tools.cli.available_gpus", lambda: 0)
    examples = Path(__file__).resolve().parents[2] / "examples"
    argv = ["local", "--source-dir", str(examples), "--entry-point", "mpi_allreduce.py", *flags]
    assert cli.main(argv) == 2
    assert expected in capsys.readouterr().err


def test_env_file_line_without_equals_exits_2(tmp_path, capsys):
    from ringleader.tools import cli

    env_file = tmp_path / "job.env"
    env_file.write_text("GOOD=1\njust-a-line\n")
    examples = Path(__file__).resolve().parents[2] / "examples"
    argv = ["local", "--source-dir", str(examples), "--entry-point", "mpi_allreduce.py"]
    assert cli.main([*argv, "--env-file", str(env_file)]) == 2
    assert f"--env-file: {env_file}:2: expected KEY=VALUE" in capsys.readouterr().err
