"""ringleader in a user's image of another distribution: ringleader:trixie (`make image-trixie`),
Debian trixie's Python 3.13 and Open MPI 5 (PRRTE), the user's packages in the user's venv
/opt/venv, ringleader in its own. The failure model holds as under Open MPI 4.1: success, a
failing rank (its code on every host, named), MPI_Abort, a killed worker (host lost), SIGTERM
to the leader (143 everywhere). 3 hosts x 2 ranks each."""

import re
import time
from pathlib import Path

import pytest

from tests.container.conftest import IMAGE, rank_lines

pytestmark = pytest.mark.container

HOSTS = ["algo-1", "algo-2", "algo-3"]
LONG_JOB = {"rounds": "100", "sleep": "5"}

# The user's program: in ringleader:trixie numpy is only in the user's venv, mpi4py is Debian's
# (built for the image's Open MPI), seen through it. Rank `abort-rank` calls MPI_Abort with
# `abort-code`. (ringleader:latest has no numpy: the MPI_Abort test runs there too.)
USER_JOB = """\
import argparse
import sys

from mpi4py import MPI

try:
    import numpy
except ImportError:
    numpy = None

parser = argparse.ArgumentParser()
parser.add_argument("--abort-rank", type=int, default=-1)
parser.add_argument("--abort-code", type=int, default=1)
args, _ = parser.parse_known_args()
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
if numpy is not None:
    total = numpy.zeros(4)
    comm.Allreduce(numpy.full(4, float(rank)), total)
    found, summed = numpy.__version__, total[0]
else:
    found, summed = "missing", comm.allreduce(rank)
library = MPI.Get_library_version().split(",")[0].strip()
print(f"rank {rank}/{size} python {sys.version_info[0]}.{sys.version_info[1]} in {sys.prefix}; "
      f"numpy {found}; {library}; sum={summed:g}", flush=True)
if rank == args.abort_rank:
    print(f"rank {rank} calls MPI_Abort({args.abort_code})", file=sys.stderr, flush=True)
    comm.Abort(args.abort_code)
comm.Barrier()
"""


@pytest.fixture
def user_code(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    code.mkdir()
    (code / "user_job.py").write_text(USER_JOB)
    return code


def launching_line(output: str) -> str:
    return next(line for line in output.splitlines() if "launching: mpirun" in line)


def first_line(run, host: str) -> str:
    return run.failure(host).splitlines()[0]


def test_success_in_the_users_venv_under_open_mpi_5(run_job, trixie_image, user_code):
    run = run_job(image=trixie_image, source_dir=user_code, entry_point="user_job.py")
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    for host in HOSTS:
        assert run.has_success_file(host)
    ran = rank_lines(run.output, "python 3.13 in /opt/venv; numpy 2.")
    assert ran == set(range(6)), run.output
    assert rank_lines(run.output, "Open MPI v5.") == set(range(6))
    assert rank_lines(run.output, "sum=15") == set(range(6))
    assert "mpirun: Open MPI 5." in run.output
    # Open MPI 5's own names; nothing of ORTE's that it would ignore. PRRTE's out-of-band
    # channel is pinned by eth0's network (it rejects a named interface numbered above 32767)
    argv = launching_line(run.output)
    assert "--prtemca plm_ssh_args" in argv and "--mca btl_tcp_if_include eth0" in argv
    assert re.search(r"--prtemca oob_tcp_if_include \d+\.\d+\.\d+\.\d+/\d+ ", argv), argv
    assert "orte_" not in argv and "vader" not in argv and "plm_rsh" not in argv


def test_a_failing_rank_gives_its_code_on_every_host(run_job, trixie_image):
    run = run_job(
        image=trixie_image, hyperparameters={"rounds": "2", "fail-rank": "4", "fail-code": "3"}
    )
    assert run.codes() == dict.fromkeys(HOSTS, 3), run.output
    for host in HOSTS:
        failure = run.failure(host)
        assert failure.startswith("Rank 4 on host algo-3 exited with code 3."), failure
        assert "failing on purpose with code 3" in failure


@pytest.mark.parametrize("image", ["trixie", "bookworm"])
def test_mpi_abort_names_the_aborting_rank_under_both_open_mpis(
    run_job, trixie_image, user_code, image
):
    """Open MPI 5 words its MPI_ABORT report differently, and its other ranks end on their own
    with MPI_ERR_UNKNOWN (14) before the aborting rank: still rank 2 and its code everywhere."""
    run = run_job(
        image=trixie_image if image == "trixie" else IMAGE,
        source_dir=user_code,
        entry_point="user_job.py",
        hyperparameters={"abort-rank": "2", "abort-code": "7"},
    )
    assert run.codes() == dict.fromkeys(HOSTS, 7), run.output
    for host in HOSTS:
        failure = run.failure(host)
        assert failure.startswith("Rank 2 on host algo-2 exited with code 7."), failure
        assert "calls MPI_Abort(7)" in failure


def test_a_killed_worker_is_a_lost_host_on_every_surviving_host(
    start_job, trixie_image, docker_client
):
    run = start_job(
        image=trixie_image,
        hyperparameters=LONG_JOB,
        settings={"startup_timeout": "60", "leader_timeout": "4"},
    )
    run.capture.wait_for(lambda text: len(rank_lines(text, "round 1:")) == 6, timeout=90)
    docker_client.api.kill(run.container_id("algo-3"), signal="SIGKILL")
    run.join(timeout=60)
    assert run.codes() == {"algo-1": 75, "algo-2": 75, "algo-3": 137}, run.output
    for host in ("algo-1", "algo-2"):
        assert first_line(run, host).startswith("Host algo-3 (ranks 4, 5): "), run.failure(host)


def test_sigterm_to_the_leader_ends_every_host_with_143(start_job, trixie_image, docker_client):
    run = start_job(image=trixie_image, hyperparameters=LONG_JOB)
    run.capture.wait_for(lambda text: len(rank_lines(text, "round 1:")) == 6, timeout=90)
    started = time.monotonic()
    docker_client.api.kill(run.container_id("algo-1"), signal="SIGTERM")
    run.join(timeout=60)
    assert run.codes() == dict.fromkeys(HOSTS, 143), run.output
    assert rank_lines(run.output, "received SIGTERM") == set(range(6))
    for host in HOSTS:
        assert "Job stopped by SIGTERM received on host algo-1" in run.failure(host)
    print(f"SIGTERM to exit: {time.monotonic() - started:.1f} s")
