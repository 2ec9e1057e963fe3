"""Restarts in place (issue 27): 3 fake hosts x 2 ranks, `ringleader_max_restarts`.

After a rank fails or the job hangs, every rank on every host is stopped and started again in
the same containers: RINGLEADER_ATTEMPT (and torch's TORCHELASTIC_RESTART_COUNT) counts the
attempts, /opt/ml/model and /opt/ml/checkpoints stay as the last attempt left them, job.json
lists every attempt and the failure file names each earlier one. Never restarted: a
configuration error, SIGTERM (also during the backoff). Two attempts in a row that fail before
any progress end the restarts with 79 (do not retry), as does a failure ringleader_restart_on
refuses. The jobs are restart_jobs/flaky.py (mpi4py) and
examples/resume_train.py (PyTorch DDP, needs `make image-horovod`).
"""

import json
import re
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.container.conftest import EXAMPLES, JobRun

pytestmark = pytest.mark.container

JOBS = Path(__file__).resolve().parent / "restart_jobs"
HOSTS = ["algo-1", "algo-2", "algo-3"]
FAIL_CODE = 5


def flaky(mode: str, **hyperparameters: str) -> dict[str, Any]:
    return {
        "source_dir": JOBS,
        "entry_point": "flaky.py",
        "hyperparameters": {"mode": mode, "fail-code": str(FAIL_CODE), **hyperparameters},
    }


def settings(max_restarts: int, **more: str) -> dict[str, str]:
    return {
        "startup_timeout": "60",
        "max_restarts": str(max_restarts),
        "restart_backoff": "0.5",
        **more,
    }


def rank_lines(output: str, text: str) -> set[int]:
    """Ranks whose own output (tagged `[algo-N rank R]`) has `text`; ringleader's lines about
    attempts are not a rank's."""
    found = re.findall(
        rf"^(?:algo-\d \| )?\[algo-\d rank (\d+)\] .*{re.escape(text)}", output, re.M
    )
    return {int(rank) for rank in found}


def job_json(run: JobRun) -> dict[str, Any]:
    path = run.job.output_dir / "algo-1" / "output" / "data" / "job.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def attempts_of(run: JobRun) -> list[tuple[int, int]]:
    return [(each["attempt"], each["exit_code"]) for each in job_json(run)["attempts"]]


def test_a_rank_that_fails_once_is_restarted_in_place_and_the_job_succeeds(run_job) -> None:
    run = run_job(**flaky("once"), settings=settings(2))
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    assert rank_lines(run.output, "attempt 0") == set(range(6))
    assert rank_lines(run.output, "attempt 1") == set(range(6))
    assert rank_lines(run.output, "sum 15") == set(range(6))
    assert attempts_of(run) == [(0, FAIL_CODE), (1, 0)]
    first = job_json(run)["attempts"][0]
    assert first["cause"].startswith(f"Rank 3 on host algo-2 exited with code {FAIL_CODE}")
    assert first["progressed"] is True
    assert {record["attempt"] for record in job_json(run)["ranks"]} == {1}
    # the containers were not restarted: the marker of attempt 0 is still in algo-2's model
    model = run.job.output_dir / "algo-2" / "model"
    assert "failed on attempt 0" in next(model.rglob("failed-once")).read_text()
    assert "restarting every rank in 0.5 s" in run.output


def test_a_rank_that_fails_every_time_ends_with_its_code_and_every_attempt_named(
    run_job,
) -> None:
    # 3 s: each attempt makes progress (the wrappers report it every 2 s)
    run = run_job(**flaky("always", seconds="3"), settings=settings(2))
    assert run.codes() == dict.fromkeys(HOSTS, FAIL_CODE), run.output
    assert attempts_of(run) == [(0, FAIL_CODE), (1, FAIL_CODE), (2, FAIL_CODE)]
    for host in HOSTS:
        lines = run.failure(host).splitlines()
        assert lines[0].startswith(f"Rank 3 on host algo-2 exited with code {FAIL_CODE}")
        assert lines[1] == "Not restarted: no restart left (ringleader_max_restarts 2)."
        earlier = f"exit code {FAIL_CODE} (rank-failure): Rank 3"
        assert lines[2].startswith(f"Earlier attempt 0: {earlier}")
        assert lines[3].startswith(f"Earlier attempt 1: {earlier}")
    assert "no restart: no restart left (ringleader_max_restarts 2)" in run.output
    assert [each["restart"] for each in job_json(run)["attempts"]] == [
        "allowed",
        "allowed",
        "no restart left (ringleader_max_restarts 2)",
    ]


def test_a_configuration_error_is_never_restarted(run_job) -> None:
    run = run_job(**flaky("once"), settings=settings(2, sigterm_grace="soon"))
    assert run.codes() == dict.fromkeys(HOSTS, 78), run.output
    assert "ringleader_sigterm_grace" in run.failure("algo-1")
    assert "restarting every rank" not in run.output
    assert rank_lines(run.output, "attempt") == set()


def test_two_attempts_that_fail_before_any_progress_end_with_do_not_retry(run_job) -> None:
    run = run_job(**flaky("startup"), settings=settings(5))
    assert run.codes() == dict.fromkeys(HOSTS, 79), run.output
    assert attempts_of(run) == [(0, FAIL_CODE), (1, FAIL_CODE)]
    assert [each["progressed"] for each in job_json(run)["attempts"]] == [False, False]
    assert "2 attempts in a row failed before any progress" in run.output
    for host in HOSTS:
        lines = run.failure(host).splitlines()
        assert lines[0].startswith(f"Rank 3 on host algo-2 exited with code {FAIL_CODE}")
        assert lines[1] == (
            "Not retried: 2 attempts in a row failed before any progress; exit code 79 (do not "
            f"retry) instead of {FAIL_CODE}."
        )
        assert "(before any progress)" in lines[2]


def test_a_policy_of_codes_restarts_a_segfault_but_not_an_exit_code(run_job) -> None:
    """ringleader_restart_on=codes:137,139: rank 3 killed by SIGSEGV on attempt 0 is restarted;
    its sys.exit(5) on attempt 1 is refused: 79 on every host, its own code named."""
    run = run_job(
        **flaky("segv-once", seconds="3"), settings=settings(3, restart_on="codes:137,139")
    )
    assert run.codes() == dict.fromkeys(HOSTS, 79), run.output
    assert attempts_of(run) == [(0, 139), (1, FAIL_CODE)]
    attempts = job_json(run)["attempts"]
    assert [(each["kind"], each["restart"]) for each in attempts] == [
        ("rank-failure", "allowed"),
        ("rank-failure", "exit code 5 is not in ringleader_restart_on's codes:137,139"),
    ]
    for host in HOSTS:
        lines = run.failure(host).splitlines()
        assert lines[0].startswith(f"Rank 3 on host algo-2 exited with code {FAIL_CODE}")
        assert lines[1] == (
            f"Not retried: exit code {FAIL_CODE} is not in ringleader_restart_on's "
            f"codes:137,139; exit code 79 (do not retry) instead of {FAIL_CODE}."
        )
        assert lines[2].startswith(
            "Earlier attempt 0: exit code 139 (rank-failure): Rank 3 on host algo-2 was killed "
            "by signal 11 (SIGSEGV)"
        )


def test_sigterm_during_the_backoff_ends_the_job_with_143_and_no_further_attempt(
    start_job, docker_client: docker.DockerClient
) -> None:
    run = start_job(**flaky("always", seconds="1"), settings=settings(3, restart_backoff="60"))
    run.capture.wait_for(lambda text: "restarting every rank in 60 s" in text, 120)
    docker_client.api.kill(run.container_id("algo-2"), signal="SIGTERM")
    run.join(90)
    assert run.codes() == dict.fromkeys(HOSTS, 143), run.output
    lines = run.failure("algo-3").splitlines()
    assert lines[0].startswith("Job stopped by SIGTERM received on host algo-2")
    assert lines[1].startswith(f"Earlier attempt 0: exit code {FAIL_CODE}")
    assert rank_lines(run.output, "attempt 1") == set()
    assert attempts_of(run) == [(0, FAIL_CODE)]


def test_a_hung_job_is_restarted_and_then_succeeds(run_job) -> None:
    run = run_job(
        **flaky("hang-once", seconds="1"),
        settings=settings(1, hang_timeout="6", stack_dump_timeout="5"),
    )
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    assert attempts_of(run) == [(0, 124), (1, 0)]
    assert "the job hung" in run.output
    assert rank_lines(run.output, "sum 15") == set(range(6))


def test_torch_ranks_see_the_restart_count_and_resume_from_the_checkpoint(
    run_job, horovod_image: str
) -> None:
    run = run_job(
        image=horovod_image,
        distribution="torch_distributed",
        source_dir=EXAMPLES,
        entry_point="resume_train.py",
        hyperparameters={"fail-once-at": "12", "steps": "20", "checkpoint-every": "5"},
        settings=settings(1, startup_timeout="120"),
    )
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    assert rank_lines(run.output, "attempt 0 restart_count 0 starts at step 1") == set(range(6))
    # rank 0 saved at step 10 before rank 3 failed before step 12: the next attempt goes on
    assert rank_lines(run.output, "attempt 1 restart_count 1 starts at step 11") == set(range(6))
    assert rank_lines(run.output, "done at step 20") == {0}
    assert attempts_of(run) == [(0, 7), (1, 0)]
