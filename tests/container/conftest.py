"""Container tests: real jobs of the ringleader image on a private Docker network.

They need Docker Engine and the image (`make image`); when either is missing they fail with
that message instead of skipping, so CI can never pass them silently.
"""

import contextlib
import io
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from ringleader.tools.local.plan import LocalJobSpec
from ringleader.tools.local.run import LocalJob, LocalJobResult
from tests.container.slurm import slurm_cluster  # noqa: F401 (the Slurm cluster fixture)

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
IMAGE = os.environ.get("RINGLEADER_IMAGE", "ringleader:latest")
# PyTorch and Horovod: the Horovod and torch_distributed tests (`make image-horovod`)
HOROVOD_IMAGE = os.environ.get("RINGLEADER_HOROVOD_IMAGE", "ringleader:horovod")
# TensorFlow: parameter_server and multi_worker_mirrored_strategy (`make image-tensorflow`)
TENSORFLOW_IMAGE = os.environ.get("RINGLEADER_TENSORFLOW_IMAGE", "ringleader:tensorflow")
# MXNet 1.9.1 and Horovod built for it: the seeds' Gluon job (`make image-mxnet`)
MXNET_IMAGE = os.environ.get("RINGLEADER_MXNET_IMAGE", "ringleader:mxnet")
# TensorFlow, tf-keras, Horovod built for TensorFlow: the seeds' Keras jobs (image-tf-horovod)
TF_HOROVOD_IMAGE = os.environ.get("RINGLEADER_TF_HOROVOD_IMAGE", "ringleader:tf-horovod")
# A user's image of another distribution: Debian trixie, Open MPI 5, no py-spy (`make image-trixie`)
TRIXIE_IMAGE = os.environ.get("RINGLEADER_TRIXIE_IMAGE", "ringleader:trixie")


def ready_docker_client(image: str = IMAGE) -> docker.DockerClient:
    """A client of an answering Docker Engine that has `image`, or a test failure."""
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as error:
        pytest.fail(f"Docker Engine does not answer ({error}); run scripts/setup.sh")
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        pytest.fail(f"image {image} is not built; run `make image`")
    return client


@pytest.fixture(scope="session")
def docker_client() -> docker.DockerClient:
    return ready_docker_client()


def built_image(client: docker.DockerClient, image: str, target: str) -> str:
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        pytest.fail(f"image {image} is not built; run `make {target}`")
    return image


@pytest.fixture(scope="session")
def horovod_image(docker_client: docker.DockerClient) -> str:
    return built_image(docker_client, HOROVOD_IMAGE, "image-horovod")


@pytest.fixture(scope="session")
def tensorflow_image(docker_client: docker.DockerClient) -> str:
    return built_image(docker_client, TENSORFLOW_IMAGE, "image-tensorflow")


@pytest.fixture(scope="session")
def mxnet_image(docker_client: docker.DockerClient) -> str:
    return built_image(docker_client, MXNET_IMAGE, "image-mxnet")


@pytest.fixture(scope="session")
def tf_horovod_image(docker_client: docker.DockerClient) -> str:
    return built_image(docker_client, TF_HOROVOD_IMAGE, "image-tf-horovod")


@pytest.fixture(scope="session")
def trixie_image(docker_client: docker.DockerClient) -> str:
    return built_image(docker_client, TRIXIE_IMAGE, "image-trixie")


class Capture(io.StringIO):
    """A thread-safe text sink that tests can wait on."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    def write(self, text: str) -> int:
        with self._lock:
            written = super().write(text)
            self._changed.notify_all()
            return written

    def text(self) -> str:
        with self._lock:
            return self.getvalue()

    def wait_for(self, predicate: Callable[[str], bool], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        with self._lock:
            while not predicate(self.getvalue()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"output condition not met within {timeout} s; output:\n{self.getvalue()}"
                    )
                self._changed.wait(remaining)
            return self.getvalue()


@dataclass
class JobRun:
    job: LocalJob
    capture: Capture
    result: LocalJobResult | None = None
    thread: threading.Thread | None = None
    seconds: float = 0.0

    @property
    def output(self) -> str:
        return self.capture.text()

    def codes(self) -> dict[str, int | None]:
        assert self.result is not None, "job still running"
        return {host.name: host.exit_code for host in self.result.hosts}

    def failure(self, host: str) -> str:
        return (self.job.output_dir / host / "output" / "failure").read_text()

    def has_success_file(self, host: str) -> bool:
        return (self.job.output_dir / host / "output" / "success").is_file()

    def container_id(self, host: str) -> str:
        return self.job.container_ids[host]

    def join(self, timeout: float) -> None:
        assert self.thread is not None
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"job did not end within {timeout} s:\n{self.output}"


def make_spec(tmp_path: Path, **overrides: Any) -> LocalJobSpec:
    values: dict[str, Any] = {
        "hosts": 3,
        "processes_per_host": 2,
        "source_dir": EXAMPLES,
        "entry_point": "mpi_allreduce.py",
        "image": IMAGE,
        "output_dir": tmp_path / "out",
        "hyperparameters": {"rounds": "2"},
        "settings": {"startup_timeout": "30"},
    }
    values.update(overrides)
    return LocalJobSpec(**values)


def run_to_end(job: LocalJob, capture: Capture) -> JobRun:
    """Run `job` (its output going to `capture`) until every host has exited."""
    started = time.monotonic()
    run = JobRun(job, capture, job.run())
    run.seconds = time.monotonic() - started
    print(run.output)  # shown by pytest when the test fails
    return run


@pytest.fixture
def run_job(docker_client: docker.DockerClient, tmp_path: Path) -> Callable[..., JobRun]:
    def run(**overrides: Any) -> JobRun:
        capture = Capture()
        job = LocalJob(make_spec(tmp_path, **overrides), capture, docker_client)
        return run_to_end(job, capture)

    return run


@pytest.fixture
def start_job(
    docker_client: docker.DockerClient, tmp_path: Path
) -> Iterator[Callable[..., JobRun]]:
    """Runs a job in a thread so the test can act on it (stop, kill) while it runs."""
    runs: list[JobRun] = []

    def start(**overrides: Any) -> JobRun:
        capture = Capture()
        job = LocalJob(make_spec(tmp_path, **overrides), capture, docker_client)
        run = JobRun(job, capture)

        def target() -> None:
            run.result = job.run()

        run.thread = threading.Thread(target=target, daemon=True)
        run.thread.start()
        runs.append(run)
        return run

    yield start
    for run in runs:
        print(run.output)
        if run.thread is not None and run.thread.is_alive():
            for container_id in run.job.container_ids.values():
                with contextlib.suppress(docker.errors.APIError):
                    docker_client.api.remove_container(container_id, force=True)


def rank_lines(output: str, text: str) -> set[int]:
    """Ranks whose tagged output line contains `text`."""
    ranks = set()
    for line in output.splitlines():
        if text in line and " rank " in line and "] " in line:
            tag = line[line.index("[") + 1 : line.index("]")]
            ranks.add(int(tag.rsplit(" ", 1)[1]))
    return ranks
