"""The status line on real containers (3 hosts x 2 ranks): each rank's steps from
ringleader.progress(step=, total=) or from its lines (ringleader_step_regex) reach the leader,
which says the job's progress every ringleader_status_interval, in its log, as a metric line,
in metrics.jsonl and in job.json; a job without a step source says nothing."""

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from ringleader.core.jobfile import read_job_file
from tests.container.conftest import JobRun

pytestmark = pytest.mark.container
# Who is slow is relative: on 2 cores shared with other container tests (and CI's other
# Pythons), starved ranks are stragglers too (ci23 named none, ci22 the wrong one). These
# run with the machine to themselves.
ALONE = pytest.mark.alone

HOSTS = ["algo-1", "algo-2", "algo-3"]
JOBS = Path(__file__).resolve().parent / "progress_jobs"
STATUS = re.compile(r"\[ringleader algo-1\] [\d:.]+ progress: step (\d+)/10 \((\d+)%\)(.*)")


def run_steps(run_job: Callable[..., JobRun], say: str, **settings: str) -> JobRun:
    run = run_job(
        source_dir=JOBS,
        entry_point="steps.py",
        hyperparameters={"steps": "10", "seconds": "0.6", "say": say},
        settings={"startup_timeout": "60", "status_interval": "1", **settings},
    )
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    return run


def test_the_leader_says_the_jobs_progress_from_the_ranks_steps(
    run_job: Callable[..., JobRun],
) -> None:
    run = run_steps(run_job, "api")
    said = STATUS.findall(run.output)
    assert len(said) >= 2, run.output
    assert [int(step) for step, _, _ in said] == sorted(int(step) for step, _, _ in said)
    assert any("steps/s" in rest and "ETA" in rest for _, _, rest in said), said
    assert "ringleader_step=" in run.output and "ringleader_total_steps=10;" in run.output
    data = run.job.output_dir / "algo-1" / "output" / "data"
    summary = read_job_file(data / "job.json")
    assert summary.progress, "no status in job.json"
    assert max(len(sample.steps) for sample in summary.progress) == 6  # every rank's step
    assert all(sample.total == 10 for sample in summary.progress)
    records = [json.loads(line) for line in (data / "metrics.jsonl").read_text().splitlines()]
    assert {"ringleader_step", "ringleader_steps_per_second"} <= {r["name"] for r in records}
    assert all(r["rank"] == -1 and r["host"] == "algo-1" for r in records)


def test_a_step_regex_reads_the_steps_from_the_ranks_lines(
    run_job: Callable[..., JobRun],
) -> None:
    run = run_steps(run_job, "lines", step_regex=r"step (\d+) of", total_steps="10")
    assert STATUS.search(run.output), run.output


def test_a_job_without_a_step_source_says_no_progress(run_job: Callable[..., JobRun]) -> None:
    run = run_steps(run_job, "lines")
    assert " progress: " not in run.output
    summary = read_job_file(run.job.output_dir / "algo-1" / "output" / "data" / "job.json")
    assert summary.progress == ()


def run_slow_rank(
    run_job: Callable[..., JobRun],
    code: int = 0,
    action: str = "warn",
    job: dict[str, str] | None = None,
    window: int = 4,
    interval: int = 3,
    rate: int = 10,
    **hyperparameters: str,
) -> JobRun:
    """3 x 2 ranks, 40 steps of 0.5 s of work (long beside an allreduce on a busy 2-core
    machine, where it can take 0.3 s); a status every `interval` s, each rank's stacks recorded
    in periods of one interval (`rate` samples a second), judged over `window` intervals: 120
    samples of each rank, enough to show the slow one (of 12, at a sample a second, a rank that
    never waits against others that wait 30% of the time is one chance in 70, not shown).
    `job`: another entry point, image, distribution."""
    run = run_job(
        source_dir=JOBS,
        **({"entry_point": "slow_rank.py"} | (job or {})),
        hyperparameters={"steps": "40", "seconds": "0.5", **hyperparameters},
        settings={
            "startup_timeout": "60",
            "status_interval": str(interval),
            "straggler_window": str(window),
            "straggler_sample_rate": str(rate),
            "straggler_action": action,
        },
    )
    assert run.codes() == dict.fromkeys(HOSTS, code), run.output
    return run


def assert_rank_5_on_algo_3_named(run: JobRun) -> None:
    warning = re.search(
        r"warning: straggler: rank (\d) on (algo-\d) waits (\d+)% of the time, "
        r"the median rank (\d+)%",
        run.output,
    )
    assert warning is not None, run.output
    rank, host, share, median = warning.groups()
    assert (rank, host) == ("5", "algo-3")
    assert int(median) - int(share) >= 15
    summary = read_job_file(run.job.output_dir / "algo-1" / "output" / "data" / "job.json")
    assert [(episode.rank, episode.host) for episode in summary.stragglers][:1] == [(5, "algo-3")]


@ALONE
def test_a_rank_that_computes_longer_is_named_as_the_straggler(
    run_job: Callable[..., JobRun],
) -> None:
    """Rank 5 (on algo-3) computes 40% longer each step: the others wait for it in every
    allreduce (Open MPI through mpi4py), it hardly waits. Named within the window, with its
    share against the median's."""
    assert_rank_5_on_algo_3_named(run_slow_rank(run_job, **{"slow-rank": "5", "slower": "1.4"}))


@ALONE
def test_a_ddp_rank_that_computes_longer_is_named_as_the_straggler(
    run_job: Callable[..., JobRun], horovod_image: str
) -> None:
    """The same with PyTorch DDP (gloo, torch_distributed): the others wait in the backward's
    gradient allreduce (c10d's Reducer) for rank 5."""
    job = {
        "entry_point": "slow_rank_ddp.py",
        "image": horovod_image,
        "distribution": "torch_distributed",
    }
    # Each period's py-spy reads libtorch's symbols (about 0.5 s of a core; 6 at once on 2
    # cores): at periods of 3 s that burst held ranks back unevenly and named rank 3 (ci28).
    # Rank 5 waits about 10% here (gloo's allreduce), the others 35%: 240 samples a window
    # (111, at 5 a second, named it late or not at all). The ranks' start fills the first
    # windows with waits of every rank: named from about 40 s on; the job lasts about 85 s.
    run = run_slow_rank(
        run_job,
        job=job,
        window=4,
        interval=6,
        steps="60",
        seconds="1.0",
        **{"slow-rank": "5", "slower": "1.4"},
    )
    assert_rank_5_on_algo_3_named(run)


@ALONE
def test_a_job_that_slows_down_as_a_whole_has_no_straggler(
    run_job: Callable[..., JobRun],
) -> None:
    run = run_slow_rank(run_job, **{"all-slower-after": "20", "slower": "1.4"})
    assert "straggler" not in run.output, run.output
    summary = read_job_file(run.job.output_dir / "algo-1" / "output" / "data" / "job.json")
    assert summary.stragglers == () and summary.progress


@ALONE
def test_with_stop_the_straggler_ends_the_job_with_its_code_and_host(
    run_job: Callable[..., JobRun],
) -> None:
    run = run_slow_rank(run_job, 72, "stop", **{"slow-rank": "5", "slower": "1.4"})
    failure = run.failure("algo-2")
    assert failure.startswith("Rank 5 on host algo-3 is a straggler: it waits "), failure
    assert "(ringleader_straggler_action=stop) so that algo-3 can be replaced." in failure
    assert all(run.failure(host) == failure for host in HOSTS)
