"""SageMaker Python SDK v2 local mode, end to end: the SDK runs our image under docker compose.

What the SDK's local mode does (sagemaker/local/image.py, SDK 2.2xx), which these tests rely on:
- hosts are algo-1-xxxxx .. algo-N-xxxxx (one random suffix per job), each a compose service on
  the network `sagemaker-local` with its host name as alias; the container's own hostname is
  its container id; resourceconfig.json says network_interface_name eth0;
- it runs `docker compose` v2 if present, else `docker-compose` (v1), always
  `up --build --abort-on-container-exit`: the first container to exit stops the others, and
  compose's exit code (that first container's) decides whether fit() raises;
- per host it mounts <root>/<host>/{input,output,output/data}; /opt/ml/model is ONE directory
  shared by every host; with local_code, source_dir is mounted at /opt/ml/code;
- afterwards it copies every host's /opt/ml/output and the model dir into one tree (later hosts
  overwrite files of the same name) and writes output.tar.gz and model.tar.gz directly into a
  file:// output_path; compose's containers are left behind (we remove them).

Nothing here may use the network: telemetry is opted out through the SDK defaults config,
credentials are dummies, and a guard fails the test on any connection that is not loopback,
the Docker socket or our own moto server.
"""

import base64
import contextlib
import datetime
import hashlib
import io
import ipaddress
import json
import os
import re
import shutil
import socket
import tarfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import docker
import docker.errors
import pytest

from tests.container.conftest import EXAMPLES, ready_docker_client

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "mpi_allreduce.py"
IMAGE = os.environ.get("RINGLEADER_IMAGE", "ringleader:latest")
ROLE = "arn:aws:iam::123456789012:role/RingleaderLocalTests"
REGION = "us-west-2"
NETWORK = "sagemaker-local"  # the SDK's compose network
PROBE_REQUIREMENT = "ringleader-probe==1.0"

TELEMETRY_OPT_OUT = """\
SchemaVersion: '1.0'
SageMaker:
  PythonSDK:
    Modules:
      TelemetryOptOut: true
"""

# The test's entry point: records what this rank sees, then runs the bundled mpi4py example.
TRAIN_PY = '''\
"""Records this rank's view of the SageMaker contract, then runs examples/mpi_allreduce.py."""
import json, os, runpy, sys
from pathlib import Path

rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
host = os.environ["SM_CURRENT_HOST"]
try:
    import ringleader_probe
    probe = ringleader_probe.VERSION
except ImportError:
    probe = None
channel = os.environ.get("SM_CHANNEL_TRAINING")
checkpoint = Path("/opt/ml/checkpoints") / f"{host}-rank{rank}"
try:
    checkpoint.write_text("x")
    checkpoints = True
except OSError:
    checkpoints = False
record = {
    "rank": rank,
    "world": os.environ.get("OMPI_COMM_WORLD_SIZE"),
    "host": host,
    "hosts": json.loads(os.environ["SM_HOSTS"]),
    "argv": sys.argv[1:],
    "probe": probe,
    "channel": channel,
    "channel_files": sorted(os.listdir(channel)) if channel else None,
    "checkpoints_writable": checkpoints,
    "option": os.environ.get("RINGLEADER_PROBE_OPTION"),
    "cwd": os.getcwd(),
}
out = Path(os.environ.get("SM_OUTPUT_DATA_DIR", "/opt/ml/output/data"))
(out / f"{host}-rank{rank}.json").write_text(json.dumps(record))
example = Path(__file__).with_name("mpi_allreduce.py")
sys.argv = [str(example), *sys.argv[1:]]
runpy.run_path(str(example), run_name="__main__")
'''


# ------------------------------------------------------------------------------- Docker


@pytest.fixture(scope="session")
def docker_client() -> docker.DockerClient:
    """Docker, the image and a compose CLI, or a failure (never a skip)."""
    client = ready_docker_client(IMAGE)
    if shutil.which("docker-compose") is None and shutil.which("docker") is None:
        pytest.fail("neither `docker compose` nor `docker-compose` is installed")
    return client


@pytest.fixture(scope="session")
def compose_network(docker_client: docker.DockerClient) -> Any:
    """The SDK's network, made ahead so moto can listen on its gateway (compose reuses it)."""
    try:
        return docker_client.networks.get(NETWORK)
    except docker.errors.NotFound:
        pass
    with contextlib.suppress(docker.errors.APIError):  # another job may create it meanwhile
        docker_client.networks.create(NETWORK, driver="bridge")
    return docker_client.networks.get(NETWORK)


# --------------------------------------------------------------------------- no network


@dataclass
class NetworkGuard:
    allowed: set[str] = field(default_factory=set)
    attempts: list[Any] = field(default_factory=list)

    def permits(self, host: str) -> bool:
        if host in self.allowed or host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False


@pytest.fixture
def network_guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[NetworkGuard]:
    """Fails the test if this process (the SDK) connects or resolves anything but local."""
    guard = NetworkGuard()
    real_connect = socket.socket.connect
    real_getaddrinfo = socket.getaddrinfo

    def connect(sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not guard.permits(address[0]):
            guard.attempts.append(("connect", address))
            raise OSError(f"SDK tests use no network: blocked a connection to {address}")
        real_connect(sock, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and not guard.permits(str(host)):
            guard.attempts.append(("resolve", host))
            raise socket.gaierror(f"SDK tests use no network: blocked resolving {host}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield guard
    assert guard.attempts == [], f"the SDK tried to use the network: {guard.attempts}"


@pytest.fixture
def sdk_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Telemetry off through the SDK defaults config, dummy credentials, a fake region."""
    defaults = tmp_path / "sagemaker-defaults.yaml"
    defaults.write_text(TELEMETRY_OPT_OUT)
    monkeypatch.setenv("SAGEMAKER_USER_CONFIG_OVERRIDE", str(defaults))
    monkeypatch.setenv("SAGEMAKER_ADMIN_CONFIG_OVERRIDE", str(defaults))
    monkeypatch.setenv("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in (
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "S3_ENDPOINT_URL",
    ):
        monkeypatch.delenv(name, raising=False)


# ------------------------------------------------------------------------------- moto S3


@dataclass(frozen=True)
class S3Server:
    url: str
    host: str

    def client(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )


@pytest.fixture(scope="session")
def moto_s3(compose_network: Any) -> Iterator[S3Server]:
    """moto's S3 server on the Docker gateway of `sagemaker-local`: the host and every
    container of the job reach it there, nothing else does."""
    from moto.server import ThreadedMotoServer

    gateway = compose_network.attrs["IPAM"]["Config"][0]["Gateway"]
    with socket.socket() as probe:
        probe.bind((gateway, 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address=gateway, port=port, verbose=False)
    server.start()
    try:
        yield S3Server(f"http://{gateway}:{port}", gateway)
    finally:
        server.stop()


# --------------------------------------------------------------------------- user code


def probe_wheel(directory: Path) -> Path:
    """A tiny pure-Python wheel (ringleader-probe 1.0), so pip can install offline."""
    directory.mkdir(parents=True, exist_ok=True)
    dist_info = "ringleader_probe-1.0.dist-info"
    files = {
        "ringleader_probe/__init__.py": b"VERSION = '1.0'\n",
        f"{dist_info}/METADATA": b"Metadata-Version: 2.1\nName: ringleader-probe\nVersion: 1.0\n",
        f"{dist_info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: ringleader-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = directory / "ringleader_probe-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return wheel


def make_code_dir(path: Path, requirements: str | None = None) -> Path:
    """train.py (records, then runs the bundled example), the example, a wheel, requirements."""
    path.mkdir(parents=True)
    (path / "train.py").write_text(TRAIN_PY)
    shutil.copy(EXAMPLE, path / "mpi_allreduce.py")
    probe_wheel(path / "wheels")
    if requirements is None:
        requirements = f"--no-index\n--find-links wheels\n{PROBE_REQUIREMENT}\n"
    (path / "requirements.txt").write_text(requirements)
    return path


def sourcedir_tarball(code_dir: Path, extra: list[tarfile.TarInfo] | None = None) -> bytes:
    """sourcedir.tar.gz as the SDK makes it (members relative to the code dir), plus `extra`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for item in sorted(code_dir.rglob("*")):
            tar.add(item, arcname=str(item.relative_to(code_dir)), recursive=False)
        for info in extra or []:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.size else None)
    return buffer.getvalue()


# A PEP 517 build backend inside the code (no build requirements), so pip can build and
# install the code directory as a package offline: the "Python package" entry point kind.
IN_TREE_BACKEND = """\
import base64, hashlib, zipfile
from pathlib import Path

NAME, VERSION = "ringleader_probe", "2.0"
INFO = f"{NAME}-{VERSION}.dist-info"
METADATA = f"Metadata-Version: 2.1\\nName: ringleader-probe\\nVersion: {VERSION}\\n"
WHEEL = "Wheel-Version: 1.0\\nGenerator: in-tree\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"


def digest(data):
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {
        f"{NAME}/__init__.py": Path("src", NAME, "__init__.py").read_bytes(),
        f"{INFO}/METADATA": METADATA.encode(),
        f"{INFO}/WHEEL": WHEEL.encode(),
    }
    record = [f"{name},sha256={digest(data)},{len(data)}" for name, data in files.items()]
    files[f"{INFO}/RECORD"] = "\\n".join([*record, f"{INFO}/RECORD,,", ""]).encode()
    name = f"{NAME}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory, name), "w") as wheel:
        for member, data in files.items():
            wheel.writestr(member, data)
    return name
"""


def make_package_code_dir(path: Path) -> Path:
    """train.py plus a package (pyproject.toml, src/ringleader_probe) that only pip can make
    importable: train.py then records probe == "2.0" on every host."""
    path.mkdir(parents=True)
    (path / "train.py").write_text(TRAIN_PY)
    shutil.copy(EXAMPLE, path / "mpi_allreduce.py")
    (path / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
    )
    (path / "backend.py").write_text(IN_TREE_BACKEND)
    package = path / "src" / "ringleader_probe"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VERSION = '2.0'\n")
    return path


# ---------------------------------------------------------------------------- a local job


@dataclass
class HostSnapshot:
    """One host's /opt/ml/output as the SDK found it after compose ended."""

    files: dict[str, bytes]
    mtimes: dict[str, float]

    def text(self, name: str) -> str:
        return self.files[name].decode(errors="replace")


@dataclass
class ContainerState:
    exit_code: int
    finished_at: float  # wall clock


@dataclass
class SdkJob:
    """One estimator run in local mode, with what the SDK saw and did."""

    root: Path
    output: Path
    docker: docker.DockerClient
    hosts: list[str] = field(default_factory=list)
    snapshots: dict[str, HostSnapshot] = field(default_factory=dict)
    containers: dict[str, ContainerState] = field(default_factory=dict)
    project: str = ""
    job_root: Path = Path()  # the SDK's temporary directory for this job, under `root`
    seconds: float = 0.0
    error: BaseException | None = None

    def session(self, s3_endpoint_url: str | None = None) -> Any:
        from sagemaker.local import LocalSession

        boto_session = boto3.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
        )
        session = LocalSession(boto_session=boto_session, s3_endpoint_url=s3_endpoint_url)
        session.config = {"local": {"local_code": True, "container_root": str(self.root)}}
        return session

    def fit(self, estimator: Any, inputs: dict[str, str]) -> None:
        """estimator.fit(); an exception is kept in `error` for the test to examine."""
        started = time.monotonic()
        try:
            estimator.fit(inputs=inputs, wait=True)
        except Exception as error:
            self.error = error
        finally:
            self.seconds = time.monotonic() - started
            print(f"fit() took {self.seconds:.1f} s; raised {self.error!r}")

    def output_tar(self) -> dict[str, bytes]:
        """Files of output.tar.gz in the file:// output path."""
        with tarfile.open(self.output / "output.tar.gz") as tar:
            return {
                member.name.removeprefix("./"): tar.extractfile(member).read()  # type: ignore[union-attr]
                for member in tar.getmembers()
                if member.isfile()
            }

    def exit_codes(self) -> dict[str, int]:
        return {host: state.exit_code for host, state in self.containers.items()}

    def first_exit(self) -> float:
        return min(state.finished_at for state in self.containers.values())

    def record(self) -> None:
        """Called by the SDK hook once compose has ended, before the SDK collects anything."""
        for service in self.hosts:
            output = self.job_root / service / "output"
            files: dict[str, bytes] = {}
            mtimes: dict[str, float] = {}
            for path in output.rglob("*"):
                if path.is_file():
                    name = str(path.relative_to(output))
                    files[name] = path.read_bytes()
                    mtimes[name] = path.stat().st_mtime
            self.snapshots[service] = HostSnapshot(files, mtimes)
        label = f"com.docker.compose.project={self.project}"
        for container in self.docker.containers.list(all=True, filters={"label": label}):
            service = container.labels.get("com.docker.compose.service", "")
            state = container.attrs["State"]
            self.containers[service] = ContainerState(
                int(state["ExitCode"]), docker_time(state["FinishedAt"])
            )


def docker_time(text: str) -> float:
    """Docker's RFC 3339 time with nanoseconds, e.g. 2026-11-22T05:04:07.123456789Z."""
    whole, _, fraction = text.rstrip("Z").partition(".")
    seconds = (
        datetime.datetime.fromisoformat(whole).replace(tzinfo=datetime.timezone.utc).timestamp()
    )
    return seconds + float(f"0.{fraction or 0}")


def compose_project(directory: str) -> str:
    """docker-compose v1's project name: the compose file's directory, normalised."""
    return re.sub(r"[^-_a-z0-9]", "", Path(directory).name.lower())


@pytest.fixture
def sdk_job(
    docker_client: docker.DockerClient,
    sdk_environment: None,
    network_guard: NetworkGuard,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[SdkJob]:
    from sagemaker.local import image

    root = tmp_path / "container-root"
    root.mkdir()
    job = SdkJob(root=root, output=tmp_path / "model-output", docker=docker_client)
    original = image._SageMakerContainer.retrieve_artifacts

    def retrieve_artifacts(self: Any, compose_data: Any, *args: Any, **kwargs: Any) -> Any:
        job.hosts = list(self.hosts)
        job.job_root = Path(self.container_root)
        job.project = compose_project(self.container_root)
        job.record()
        return original(self, compose_data, *args, **kwargs)

    monkeypatch.setattr(image._SageMakerContainer, "retrieve_artifacts", retrieve_artifacts)
    try:
        yield job
    finally:
        if job.project:
            label = f"com.docker.compose.project={job.project}"
            for container in docker_client.containers.list(all=True, filters={"label": label}):
                with contextlib.suppress(docker.errors.APIError):
                    container.remove(force=True)


def rank_records(files: dict[str, bytes]) -> dict[int, dict[str, Any]]:
    """The per-rank JSON records train.py wrote to output/data, by rank."""
    records = {}
    for name, data in files.items():
        if re.fullmatch(r"data/[^/]+-rank\d+\.json", name):
            record = json.loads(data)
            records[record["rank"]] = record | {"file": name}
    return records


@pytest.fixture
def code_dir(tmp_path: Path) -> Callable[..., Path]:
    def make(name: str = "code", requirements: str | None = None) -> Path:
        return make_code_dir(tmp_path / name, requirements)

    return make


@pytest.fixture
def channel(tmp_path: Path) -> Path:
    data = tmp_path / "training-data"
    data.mkdir()
    (data / "sample.csv").write_text("x,y\n1,2\n")
    return data


HOST_NAME = r"algo-[1-3]-[a-z0-9]{5}"  # SDK v2 local mode: one random suffix per job


def assert_hosts_agree(
    job: SdkJob, code: int, failure: str | None = None, host_pattern: str = HOST_NAME
) -> None:
    """What the SDK sees is the truth, and every host agrees on it.

    3 hosts named like the SDK names them; every host wrote the right result file (the
    failure text containing `failure`) before the first container exited; every container,
    and so compose's own exit code (the first container's, which decides fit()), is `code`.
    """
    assert len(job.hosts) == 3
    assert all(re.fullmatch(host_pattern, host) for host in job.hosts), job.hosts
    result, other = ("success", "failure") if code == 0 else ("failure", "success")
    for host in job.hosts:
        snapshot = job.snapshots[host]
        assert result in snapshot.files, f"{host} wrote no {result} file: {list(snapshot.files)}"
        assert other not in snapshot.files, f"{host} also wrote {other}"
        if failure is not None:
            assert failure in snapshot.text("failure"), f"{host}: {snapshot.text('failure')}"
            assert len(snapshot.files["failure"]) <= 1024
    codes = job.exit_codes()
    print(f"container exit codes {codes}")
    assert set(codes.values()) == {code}, codes
    first = min(job.containers, key=lambda host: job.containers[host].finished_at)
    for host in job.hosts:
        late = job.snapshots[host].mtimes[result] - job.containers[first].finished_at
        assert late <= 0, f"{host} wrote its {result} file {late:.3f} s after {first} exited"


MPI_HYPERPARAMETERS = {
    "sagemaker_mpi_enabled": True,
    "sagemaker_mpi_num_of_processes_per_host": 2,
    "sagemaker_mpi_custom_mpi_options": "-x RINGLEADER_PROBE_OPTION=from-custom-options",
}


@pytest.fixture
def s3_job(
    sdk_job: SdkJob, moto_s3: S3Server, network_guard: NetworkGuard
) -> Callable[..., SdkJob]:
    """A generic Estimator whose code is an s3:// sourcedir tarball (hyperparameters only)."""
    from sagemaker.estimator import Estimator

    network_guard.allowed.add(moto_s3.host)
    client = moto_s3.client()
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(
            Bucket="ringleader-code", CreateBucketConfiguration={"LocationConstraint": REGION}
        )

    def run(
        uri: str,
        tarball: bytes | None = None,
        program: str = "train.py",
        channel: Path | None = None,
        **hyperparameters: Any,
    ) -> SdkJob:
        if tarball is not None:
            bucket, _, key = uri.removeprefix("s3://").partition("/")
            client.put_object(Bucket=bucket, Key=key, Body=tarball)
        estimator = Estimator(
            image_uri=IMAGE,
            role=ROLE,
            instance_count=3,
            instance_type="local",
            hyperparameters={
                "sagemaker_program": program,
                # The SDK's local mode json.loads() this one hyperparameter: JSON-encode it.
                "sagemaker_submit_directory": json.dumps(uri),
                **MPI_HYPERPARAMETERS,
                "ringleader_startup_timeout": 60,
                **hyperparameters,
            },
            output_path=f"file://{sdk_job.output}",
            sagemaker_session=sdk_job.session(s3_endpoint_url=moto_s3.url),
            base_job_name="ringleader-sdk-s3",
        )
        inputs = {"training": f"file://{channel}"} if channel else {}
        sdk_job.fit(estimator, inputs)
        return sdk_job

    return run


def framework_estimator(
    estimator_class: Any,
    job: SdkJob,
    *,
    image: str,
    entry_point: str,
    framework_version: str,
    distribution: dict[str, Any],
    name: str,
    hyperparameters: dict[str, Any],
) -> Any:
    """A framework estimator (PyTorch, TensorFlow) on 3 local instances of one of our images,
    with the examples as its source directory."""
    ready_docker_client(image)
    return estimator_class(
        entry_point=entry_point,
        source_dir=str(EXAMPLES),
        image_uri=image,  # framework_version and py_version are then only recorded
        framework_version=framework_version,
        py_version="py310",
        role=ROLE,
        instance_count=3,
        instance_type="local",
        distribution=distribution,
        hyperparameters=hyperparameters,
        output_path=f"file://{job.output}",
        sagemaker_session=job.session(),
        base_job_name=name,
    )
