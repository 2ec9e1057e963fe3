"""A hung job gets a verdict (issue 25): 3 fake hosts x 2 ranks, ringleader_hang_timeout 20 s.

When no rank shows progress (a line of output, or a heartbeat: ringleader.progress() or a touch
of $RINGLEADER_PROGRESS_FILE) for the timeout, every host takes its ranks' stacks, and the job
ends on every host with exit code 124; the failure file's first line names the culprit. Each
host keeps its own ranks' stacks under /opt/ml/output/data/hang/ (`<host>.rank-<N>.txt`); the
leader keeps every rank's, with summary.txt and stacks.json. The jobs are in hang_jobs/, each
printing `step N rank R ...` lines that the tests wait for.

Jobs that are quiet by design but send heartbeats, or that print from rank 0 only, must run
past the timeout untouched. Ctrl-\\ (SIGQUIT) to `ringleader local` prints every rank's stacks,
grouped, and the job goes on.

The PyTorch (gloo) and Horovod cases need `make image-horovod`; without it they fail.
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from tests.container.conftest import REPO, Capture, JobRun, rank_lines

pytestmark = pytest.mark.container

JOBS = Path(__file__).resolve().parent / "hang_jobs"
HOSTS = ["algo-1", "algo-2", "algo-3"]
RANKS_OF = {host: {2 * index, 2 * index + 1} for index, host in enumerate(HOSTS)}
HANG_TIMEOUT = 20
HUNG_CODE = 124  # the hang's own exit code, the same on every host
# Every host has ended within the timeout and this much after the last progress (issue 25).
END_MARGIN = 15
SETTINGS = {"startup_timeout": "60", "hang_timeout": str(HANG_TIMEOUT)}
STEPS = 3  # steps before the hang: every rank prints "step 3 rank R", then nothing
STARTUP_WAIT = 180  # seconds for every rank's last step line (PyTorch imports are slow here)
# Bounds the job's end well past what the verdict allows, so a late end is reported with its
# numbers by the assertion, not as a join timeout.
JOIN_WAIT = HANG_TIMEOUT + END_MARGIN + 120
JOB_ENDED = "==> job exit code"  # LocalJob's last line
STUCK_RANK_4 = {"steps": str(STEPS), "rank-to-hang": "4"}  # rank 4 is on algo-3


def every_rank_printed(text: str, line: str) -> bool:
    return len(rank_lines(text, line)) == 6


def last_step_seen(
    run: JobRun, ranks: frozenset[int] = frozenset(range(6)), wait: float = STARTUP_WAIT
) -> float:
    """Wait until each of `ranks` has printed its last step line (`step 3 ...`); the wall clock
    when they had.

    That line is the job's last progress: the hang's clock starts there. A job that ends
    before (a configuration error) fails the test at once, not at the bound."""
    last_step = f"step {STEPS} "

    def every_one_printed(text: str) -> bool:
        return rank_lines(text, last_step) == ranks

    text = run.capture.wait_for(lambda text: every_one_printed(text) or JOB_ENDED in text, wait)
    assert every_one_printed(text), f"the job ended before it hung:\n{text}"
    return time.time()


def hang_dir(run: JobRun, host: str) -> Path:
    return run.job.output_dir / host / "output" / "data" / "hang"


def rank_files(directory: Path) -> set[str]:
    return {path.name for path in directory.glob("*.rank-*.txt")}


def first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""


def assert_hung_verdict(
    run: JobRun,
    last_step_at: float,
    verdict: str,
    stuck_in: str,
    ranks_of: dict[str, set[int]] = RANKS_OF,
    leader: str = HOSTS[0],
) -> None:
    """Every host (with the ranks `ranks_of`) exited 124 in time, with a failure file whose
    first line starts with `verdict`, and left its ranks' stacks; the leader has every rank's,
    the summary and the stacks as JSON, where `stuck_in` (the function the hang is in) shows."""
    run.join(JOIN_WAIT)
    assert run.codes() == dict.fromkeys(ranks_of, HUNG_CODE), run.output
    assert run.result is not None
    for ended in run.result.hosts:
        took = ended.finished_at - last_step_at
        assert took <= HANG_TIMEOUT + END_MARGIN, (
            f"{ended.name} ended {took:.1f} s after the last step line"
        )
    for host in ranks_of:
        line = first_line(run.failure(host))
        assert line.startswith(verdict), f"{host}: {line!r}"

    def files(hosts: list[str]) -> set[str]:
        return {f"{host}.rank-{rank}.txt" for host in hosts for rank in ranks_of[host]}

    for host in ranks_of:
        if host != leader:
            assert rank_files(hang_dir(run, host)) == files([host]), host
    directory = hang_dir(run, leader)
    assert rank_files(directory) == files(list(ranks_of))
    stacks = (directory / "stacks.json").read_text()
    json.loads(stacks)  # whole, valid JSON
    assert stuck_in in stacks
    assert stuck_in in (directory / "summary.txt").read_text()


def run_hung(
    start_job: Callable[..., JobRun], entry_point: str, **overrides: Any
) -> tuple[JobRun, float]:
    """Start a job of hang_jobs/ that hangs after its step STEPS; the job and the wall clock
    of its last step line."""
    run = start_job(source_dir=JOBS, entry_point=entry_point, settings=SETTINGS, **overrides)
    return run, last_step_seen(run)


def assert_culprit_named(run: JobRun) -> None:
    """The rest of a culprit's verdict: where the others wait, and the timeout that ran out."""
    line = first_line(run.failure("algo-1"))
    assert "where the other 5 ranks wait" in line, line
    assert f"no rank made progress for {HANG_TIMEOUT} s" in line, line


def test_mpi4py_rank_stuck_in_user_code_is_named_with_its_function(
    start_job: Callable[..., JobRun],
) -> None:
    run, last_step_at = run_hung(start_job, "mpi_stuck.py", hyperparameters=STUCK_RANK_4)
    verdict = "Rank 4 on host algo-3 is in load_batch_forever (mpi_stuck.py:"
    assert_hung_verdict(run, last_step_at, verdict, "load_batch_forever")
    assert_culprit_named(run)
    # The culprit's own stack is in its host's file and in the leader's copy.
    for host in ("algo-3", "algo-1"):
        assert "load_batch_forever" in (hang_dir(run, host) / "algo-3.rank-4.txt").read_text()


def test_ddp_rank_that_never_enters_the_allreduce_is_named(
    start_job: Callable[..., JobRun], horovod_image: str
) -> None:
    # ddp_skip.py gives gloo an hour, so that gloo's own timeout cannot end the job first.
    run, last_step_at = run_hung(
        start_job,
        "ddp_skip.py",
        image=horovod_image,
        distribution="torch_distributed",
        hyperparameters=STUCK_RANK_4,
    )
    verdict = "Rank 4 on host algo-3 is in tokenize_forever (ddp_skip.py:"
    assert_hung_verdict(run, last_step_at, verdict, "tokenize_forever")
    assert_culprit_named(run)


def test_horovod_rank_that_stops_submitting_tensors_is_named(
    start_job: Callable[..., JobRun], horovod_image: str
) -> None:
    run, last_step_at = run_hung(
        start_job,
        "horovod_stall.py",
        image=horovod_image,
        hyperparameters=STUCK_RANK_4,
    )
    verdict = "Rank 4 on host algo-3 is in prefetch_forever (horovod_stall.py:"
    assert_hung_verdict(run, last_step_at, verdict, "prefetch_forever")
    assert_culprit_named(run)


def test_every_rank_deadlocked_in_the_same_place_is_said_so(
    start_job: Callable[..., JobRun],
) -> None:
    run, last_step_at = run_hung(start_job, "deadlock.py", hyperparameters={"steps": str(STEPS)})
    verdict = "Every rank (6) waits in the same place, in wait_forever (deadlock.py:"
    assert_hung_verdict(run, last_step_at, verdict, "wait_forever")
    # Who printed last: one of the step lines just before the deadlock, from some rank.
    line = first_line(run.failure("algo-1"))
    # the ranks whose progress came within a second of the last one's, with their hosts
    last = r"the last progress came from ranks? [\d, -]+ on hosts? algo-\d(, algo-\d)*, [\d.]+ s"
    assert re.search(last, line), line


def test_a_quiet_job_with_heartbeats_runs_past_the_timeout_untouched(
    run_job: Callable[..., JobRun],
) -> None:
    quiet = 2.5 * HANG_TIMEOUT  # half with ringleader.progress(), half with a shell `touch`
    run = run_job(
        source_dir=JOBS,
        entry_point="quiet_heartbeat.py",
        settings=SETTINGS,
        hyperparameters={"quiet-seconds": f"{quiet:g}", "touch-rank": "1"},
    )
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    assert rank_lines(run.output, "done rank ") == set(range(6))
    assert not any(rank_files(hang_dir(run, host)) for host in HOSTS)


def test_a_job_where_only_rank_0_prints_runs_past_the_timeout_untouched(
    run_job: Callable[..., JobRun],
) -> None:
    run = run_job(
        source_dir=JOBS,
        entry_point="rank0_prints.py",
        settings=SETTINGS,
        hyperparameters={"seconds": f"{2.5 * HANG_TIMEOUT:g}"},
    )
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    assert rank_lines(run.output, "step ") == {0}
    assert rank_lines(run.output, "done after ") == {0}
    assert not any(rank_files(hang_dir(run, host)) for host in HOSTS)


# Ctrl-\ in `ringleader local`: the grouped stacks name the group sizes like py-spy's and the
# flight recorder's grouping ("5 ranks: ...", "1 rank: ...").
FIVE_RANKS = re.compile(r"\b5 ranks\b")
ONE_RANK = re.compile(r"\b1 rank\b")
STALL = 45  # seconds rank 4 stays in load_batch_forever: the stacks are taken in that time
STUCK = "load_batch_forever"  # rank 4's function
WAIT = "train_step"  # the function whose allreduce the other five wait in


def read_lines(process: "subprocess.Popen[str]", capture: Capture) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        capture.write(line)


def remove_leftovers(client: docker.DockerClient, output: Path) -> None:
    """Remove the containers and network of the jobs under `output` (named by their output
    directories), in case `ringleader local` died without removing them itself."""
    for job in output.glob("rl-*"):
        for container in client.containers.list(
            all=True, filters={"label": f"ringleader.job={job.name}"}
        ):
            with contextlib.suppress(docker.errors.APIError):
                container.remove(force=True)
        for network in client.networks.list(names=[f"{job.name}-net"]):
            with contextlib.suppress(docker.errors.APIError):
                network.remove()


def test_ctrl_backslash_in_ringleader_local_prints_grouped_stacks_and_the_job_goes_on(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    output = tmp_path / "out"
    command = [
        str(REPO / ".venv" / "bin" / "ringleader"),
        "local",
        "--hosts",
        "3",
        "--processes-per-host",
        "2",
        "--source-dir",
        str(JOBS),
        "--entry-point",
        "mpi_stuck.py",
        "--output",
        str(output),
        "--setting",
        "startup_timeout=60",
        "--",
        "--steps",
        str(STEPS),
        "--rank-to-hang",
        "4",
        "--stall-seconds",
        str(STALL),
    ]
    capture = Capture()
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    reader = threading.Thread(target=read_lines, args=(process, capture), daemon=True)
    reader.start()
    try:
        last_step = f"step {STEPS} rank "
        text = capture.wait_for(
            lambda text: every_rank_printed(text, last_step) or JOB_ENDED in text, STARTUP_WAIT
        )
        assert every_rank_printed(text, last_step), f"the job ended before it hung:\n{text}"
        before = len(capture.text())
        process.send_signal(signal.SIGQUIT)

        def grouped(text: str) -> bool:
            printed = text[before:]
            return all(
                (
                    FIVE_RANKS.search(printed),
                    ONE_RANK.search(printed),
                    STUCK in printed,
                    WAIT in printed,
                )
            )

        # Well inside the stall: stacks taken after rank 4 went on would not show it stuck.
        capture.wait_for(grouped, STALL - 15)
        assert process.poll() is None, "ringleader local ended on SIGQUIT"
        # The job goes on: after the stall every rank takes its next steps, and the job ends 0.
        capture.wait_for(
            lambda text: every_rank_printed(text, "done rank ") or JOB_ENDED in text, STALL + 120
        )
        assert process.wait(timeout=120) == 0, capture.text()
        assert every_rank_printed(capture.text(), f"step {STEPS + 1} rank ")
        assert every_rank_printed(capture.text(), "done rank ")
    finally:
        if process.poll() is None:
            # Ctrl-C: ringleader local stops every host and removes containers and network.
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        reader.join(timeout=30)
        print(capture.text())
        remove_leftovers(docker_client, output)


# Every launch strategy (issue 25): TensorFlow's MultiWorkerMirroredStrategy (one worker per
# host, rank = task index) and a heterogeneous cluster's host outside the distribution. Their
# ranks are laid out otherwise than 3 x 2, and the heterogeneous job's leader is the first host
# of the distribution, so these take the layout as arguments.
TF_STARTUP_WAIT = 300  # TensorFlow's imports and the workers' rendezvous, 3 at once on 2 cores
TF_SETTINGS = {"startup_timeout": "120", "hang_timeout": str(HANG_TIMEOUT)}


def test_tensorflow_mwms_worker_stuck_in_user_code_is_named(
    start_job: Callable[..., JobRun], tensorflow_image: str
) -> None:
    ranks_of = {host: {index} for index, host in enumerate(HOSTS)}  # one worker per host
    run = start_job(
        source_dir=JOBS,
        entry_point="tf_mwms_stuck.py",
        image=tensorflow_image,
        distribution="multi_worker_mirrored_strategy",
        processes_per_host=None,
        settings=TF_SETTINGS,
        hyperparameters={"steps": str(STEPS), "rank-to-hang": "2"},
    )
    last_step_at = last_step_seen(run, frozenset({0, 1, 2}), TF_STARTUP_WAIT)
    verdict = "Rank 2 on host algo-3 is in read_shard_forever (tf_mwms_stuck.py:"
    assert_hung_verdict(run, last_step_at, verdict, "read_shard_forever", ranks_of, "algo-1")
    line = first_line(run.failure("algo-1"))
    assert "where the other 2 ranks wait" in line, line
    assert f"no rank made progress for {HANG_TIMEOUT} s" in line, line


def test_host_outside_a_heterogeneous_distribution_stuck_in_user_code_is_named(
    start_job: Callable[..., JobRun],
) -> None:
    # Groups data (algo-1) and train (algo-2, algo-3) as in test_hetero.py: mpirun runs ranks
    # 0-3 on the train hosts, led by algo-2; algo-1 runs the script once, as rank 4.
    ranks_of = {"algo-1": {4}, "algo-2": {0, 1}, "algo-3": {2, 3}}
    run = start_job(
        source_dir=JOBS,
        entry_point="hetero_stuck.py",
        instance_groups=(("data", 1), ("train", 2)),
        distribution_groups=("train",),
        settings=SETTINGS,
        hyperparameters={"steps": str(STEPS)},
    )
    last_step_at = last_step_seen(run, frozenset(range(5)))
    verdict = "Rank 4 on host algo-1 is in prepare_data_forever (hetero_stuck.py:"
    assert_hung_verdict(run, last_step_at, verdict, "prepare_data_forever", ranks_of, "algo-2")
    line = first_line(run.failure("algo-2"))
    assert "not at wait_for_data (hetero_stuck.py:" in line, line
    assert "where the other 4 ranks wait" in line, line
    assert f"no rank made progress for {HANG_TIMEOUT} s" in line, line


def test_without_py_spy_the_stacks_come_from_faulthandler_and_the_failure_file_says_so(
    start_job: Callable[..., JobRun], trixie_image: str
) -> None:
    """A user's image without py-spy (Debian trixie, Open MPI 5, the user's venv): every rank's
    Python writes its own stacks on ringleader's signal; the culprit is still named."""
    run, last_step_at = run_hung(
        start_job, "mpi_stuck.py", image=trixie_image, hyperparameters=STUCK_RANK_4
    )
    verdict = "Rank 4 on host algo-3 is in load_batch_forever (mpi_stuck.py:"
    assert_hung_verdict(run, last_step_at, verdict, "load_batch_forever")
    failure = run.failure("algo-1")
    assert "py-spy: not installed" in failure, failure
    assert "via faulthandler:" in failure, failure
