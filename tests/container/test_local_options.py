"""`ringleader local` as a real training launcher: data channels, environment, shared memory,
checkpoints and output URIs, checked from inside the ranks of real 3-host jobs."""

import ipaddress
import json
import re
import socket
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import boto3
import docker
import pytest

from tests.container.conftest import JobRun

pytestmark = pytest.mark.container

PROBE = """\
import os

rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
host = os.environ["SM_CURRENT_HOST"]


def files(variable):
    root = os.environ[variable]
    return ",".join(sorted(os.path.relpath(os.path.join(d, f), root)
                           for d, _, names in os.walk(root) for f in names))


print(f"CHECK {rank} host={host} channels={os.environ['SM_CHANNELS']}", flush=True)
for name in ("TRAIN", "PART", "DATA"):
    if f"SM_CHANNEL_{name}" in os.environ and name != "STREAM":
        print(f"CHECK {rank} host={host} {name}={files('SM_CHANNEL_' + name)}", flush=True)
print(f"CHECK {rank} host={host} plain={os.environ.get('PLAIN')} "
      f"only={os.environ.get('ONLY_TWO', '-')} "
      f"secret_len={len(os.environ.get('SECRET_TOKEN', ''))}", flush=True)
shm = os.statvfs("/dev/shm")
print(f"CHECK {rank} host={host} shm={shm.f_blocks * shm.f_frsize}", flush=True)
if local == 0 and os.path.exists("/opt/ml/input/data/stream_0"):
    for epoch in range(2):
        with open(f"/opt/ml/input/data/stream_{epoch}", "rb") as pipe:
            print(f"CHECK {rank} host={host} epoch{epoch}={pipe.read().decode()}", flush=True)
if rank == 0 and os.path.isdir("/opt/ml/checkpoints"):
    with open("/opt/ml/checkpoints/step.txt", "w") as checkpoint:
        checkpoint.write("step 7")
"""

SECRET = "s3cr3t-VALUE-42"


def checks(output: str) -> dict[tuple[int, str], dict[str, str]]:
    """(rank, host) -> the key=value pairs its CHECK lines printed."""
    found: dict[tuple[int, str], dict[str, str]] = {}
    for rank, host, rest in re.findall(r"CHECK (\d+) host=(\S+) (.*)", output):
        pairs = dict(item.split("=", 1) for item in rest.split())
        found.setdefault((int(rank), host), {}).update(pairs)
    return found


@pytest.fixture
def probe_dir(tmp_path: Path) -> Path:
    source = tmp_path / "code"
    source.mkdir()
    (source / "probe.py").write_text(PROBE)
    return source


def test_channels_environment_shm_checkpoints_and_output_uri(
    run_job, probe_dir: Path, tmp_path: Path
) -> None:
    from ringleader.tools.local.options import Channel

    train = tmp_path / "train"
    (train / "nested").mkdir(parents=True)
    for name in ("a.csv", "b.csv", "nested/c.csv"):
        (train / name).write_text(name[-5])
    parts = tmp_path / "parts"
    parts.mkdir()
    for index in range(7):
        (parts / f"p{index}").write_text(str(index))
    env_file = tmp_path / "job.env"
    env_file.write_text(f"# secrets\nSECRET_TOKEN={SECRET}\n")
    run = run_job(
        source_dir=probe_dir,
        entry_point="probe.py",
        hyperparameters={},
        channels=(
            Channel("train", str(train)),
            Channel("part", str(parts), sharding="by-host"),
            Channel("stream", str(train / "a.csv"), mode="pipe"),
        ),
        env={"PLAIN": "yes", "SECRET_TOKEN": SECRET},
        host_env={"algo-2": {"ONLY_TWO": "2"}},
        shm_size="256m",
        checkpoint_dir=tmp_path / "checkpoints",
        output_uri=str(tmp_path / "archives"),
    )
    assert run.result is not None and run.result.exit_code == 0, run.output
    found = checks(run.output)
    assert len(found) == 6, found
    shards = {}
    for (rank, host), values in found.items():
        assert values["channels"] == '["part","stream","train"]', values
        assert values["TRAIN"] == "a.csv,b.csv,nested/c.csv"
        assert values["plain"] == "yes"
        assert values["only"] == ("2" if host == "algo-2" else "-")
        assert values["secret_len"] == str(len(SECRET))
        assert values["shm"] == str(256 << 20)
        shards[host] = values["PART"].split(",")
        if rank % 2 == 0:  # one reader per host: every epoch is the whole channel
            assert values["epoch0"] == "a" and values["epoch1"] == "a", values
    assert sorted(name for part in shards.values() for name in part) == [
        f"p{index}" for index in range(7)
    ]
    assert len(set(shards["algo-1"]) & set(shards["algo-2"])) == 0
    assert (tmp_path / "checkpoints" / "algo-1" / "step.txt").read_text() == "step 7"
    for host in ("algo-1", "algo-2", "algo-3"):
        assert (tmp_path / "archives" / host / "output.tar.gz").is_file()
    assert_secret_nowhere(run, tmp_path)


def assert_secret_nowhere(run: JobRun, tmp_path: Path) -> None:
    """The secret reached the ranks, but not the job's output, job.json or the report."""
    from ringleader.tools.cli import main

    assert SECRET not in run.output
    job_json = run.job.output_dir / "algo-1" / "output" / "data" / "job.json"
    assert job_json.is_file() and SECRET not in job_json.read_text()
    report = tmp_path / "report"
    assert main(["report", str(run.job.output_dir), "--out", str(report)]) == 0
    assert SECRET not in (report / "index.html").read_text()
    with tarfile.open(tmp_path / "archives" / "algo-1" / "output.tar.gz") as archive:
        for member in archive.getmembers():
            handle = archive.extractfile(member)
            if handle is not None:
                assert SECRET.encode() not in handle.read(), member.name


@pytest.fixture
def moto_on_docker0(docker_client: docker.DockerClient) -> Iterator[str]:
    """moto's S3 on the gateway of Docker's default bridge: this machine and the job's
    containers reach it there, nothing else does."""
    from moto.server import ThreadedMotoServer

    config = docker_client.networks.get("bridge").attrs["IPAM"]["Config"][0]
    # A fresh daemon may report only the subnet; the bridge's address is then its first host.
    gateway = config.get("Gateway") or str(next(ipaddress.ip_network(config["Subnet"]).hosts()))
    with socket.socket() as probe:
        probe.bind((gateway, 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address=gateway, port=port, verbose=False)
    server.start()
    try:
        yield f"http://{gateway}:{port}"
    finally:
        server.stop()


def test_s3_channel_is_cached_and_output_goes_to_s3(
    run_job, probe_dir: Path, tmp_path: Path, moto_on_docker0: str, monkeypatch
) -> None:
    from ringleader.tools.local.options import Channel

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    env = {
        "AWS_ENDPOINT_URL": moto_on_docker0,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    s3 = boto3.client(
        "s3",
        endpoint_url=moto_on_docker0,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing-secret",
    )
    s3.create_bucket(Bucket="train-data")
    for name in ("x/1.bin", "x/2.bin", "x/deep/3.bin"):
        s3.put_object(Bucket="train-data", Key=f"set/{name}", Body=name.encode())
    job = {
        "source_dir": probe_dir,
        "entry_point": "probe.py",
        "hyperparameters": {},
        "hosts": 2,
        "processes_per_host": 1,
        "channels": (Channel("data", "s3://train-data/set/"),),
        "env": env,
        "output_uri": "s3://train-data/out",
    }
    first = run_job(**job)
    assert first.result is not None and first.result.exit_code == 0, first.output
    assert "channel data: s3://train-data/set/ -> " in first.output
    assert "(3 downloaded, 0 already cached)" in first.output
    for values in checks(first.output).values():
        assert values["DATA"] == "x/1.bin,x/2.bin,x/deep/3.bin"
    keys = {
        item["Key"] for item in s3.list_objects_v2(Bucket="train-data", Prefix="out/")["Contents"]
    }
    assert {"out/algo-1/output.tar.gz", "out/algo-2/model.tar.gz"} <= keys
    second = run_job(**job)
    assert second.result is not None and second.result.exit_code == 0, second.output
    assert "(0 downloaded, 3 already cached)" in second.output
    assert "testing-secret" not in first.output + second.output
    print(json.dumps(sorted(keys)), file=sys.stderr)
