"""ringleader in an image prepared by `ringleader image setup`: `image check` on real images,
setup run twice, and the bad inputs (no sshd, no image) named with their fix."""

import io
import subprocess
import sys
from collections.abc import Iterator

import docker
import docker.errors
import pytest

from tests.container.conftest import IMAGE

# One pytest-xdist worker runs the module: its derived images have fixed tags.
ONE_WORKER = pytest.mark.xdist_group("own-image")
pytestmark = [pytest.mark.container, ONE_WORKER]

HOSTS = ["algo-1", "algo-2", "algo-3"]
WITHOUT_SSHD = "ringleader-test:without-sshd"
WITHOUT_MPIRUN = "ringleader-test:without-mpirun"


def ringleader(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ringleader.tools.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def derived_image(client: docker.DockerClient, tag: str, step: str) -> Iterator[str]:
    dockerfile = f"FROM {IMAGE}\n{step}\n".encode()
    client.images.build(fileobj=io.BytesIO(dockerfile), tag=tag, rm=True)
    yield tag
    client.images.remove(tag, force=True)


@pytest.fixture(scope="module")
def without_mpirun(docker_client: docker.DockerClient) -> Iterator[str]:
    yield from derived_image(docker_client, WITHOUT_MPIRUN, "RUN rm /usr/bin/mpirun")


@pytest.fixture(scope="module")
def without_sshd(docker_client: docker.DockerClient) -> Iterator[str]:
    """The image with OpenSSH's server removed after `image setup` ran (a user image that
    never had one would be refused by setup itself, which is checked below)."""
    yield from derived_image(docker_client, WITHOUT_SSHD, "RUN rm /usr/sbin/sshd")


def test_image_check_finds_our_image_ready_for_mpi() -> None:
    checked = ringleader("image", "check", IMAGE, "--distribution", "mpi")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    assert lines[0].startswith(f"image {IMAGE}: Debian GNU/Linux 12"), lines
    assert "  mpirun: mpirun (Open MPI) 4.1" in checked.stdout
    assert any(line.split() == ["mpi", "ready"] for line in lines), lines
    assert any(line.split()[:2] == ["torch_distributed", "missing:"] for line in lines), lines


def test_image_check_of_an_image_that_does_not_exist_exits_2() -> None:
    checked = ringleader("image", "check", "ringleader-test:no-such-image")
    assert checked.returncode == 2
    assert "image 'ringleader-test:no-such-image' does not exist here" in checked.stderr


def test_setup_run_again_in_the_image_changes_nothing(docker_client: docker.DockerClient) -> None:
    output = docker_client.containers.run(
        IMAGE, ["image", "setup"], entrypoint=["ringleader"], remove=True, network_mode="none"
    ).decode()
    assert "ringleader image setup: already prepared; nothing changed" in output, output


def test_an_image_without_sshd_is_named_by_check_and_setup(without_sshd: str) -> None:
    checked = ringleader("image", "check", without_sshd, "--distribution", "mpi")
    assert checked.returncode == 1
    assert (
        "sshd: mpirun starts the ranks of other hosts over ssh, so every host runs sshd. Add "
        "it: RUN apt-get update && apt-get install -y --no-install-recommends openssh-server"
    ) in checked.stdout
    run = ["docker", "run", "--rm", "--network", "none", "--entrypoint", "ringleader"]
    refused = subprocess.run(
        [*run, without_sshd, "image", "setup"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "this image cannot be prepared yet" in refused.stderr
    assert "openssh-server" in refused.stderr and "--without-mpi" in refused.stderr


@pytest.mark.parametrize(
    ("image", "problem", "fix"),
    [
        ("without_sshd", "an mpi job needs sshd on every host", "has no /usr/sbin/sshd"),
        ("without_mpirun", "an mpi job starts its ranks with Open MPI's mpirun", "openmpi-bin"),
    ],
)
def test_an_mpi_job_in_an_image_without_sshd_or_mpirun_fails_every_host_with_78(
    run_job, request: pytest.FixtureRequest, image: str, problem: str, fix: str
) -> None:
    run = run_job(image=request.getfixturevalue(image))
    assert run.codes() == dict.fromkeys(HOSTS, 78), run.output
    for host in HOSTS:
        failure = run.failure(host)
        assert f"Configuration error in image: {problem}" in failure and fix in failure


def test_image_check_names_a_missing_mpirun(without_mpirun: str) -> None:
    checked = ringleader("image", "check", without_mpirun, "--distribution", "mpi")
    assert checked.returncode == 1 and "- mpirun: mpi jobs start their ranks" in checked.stdout
