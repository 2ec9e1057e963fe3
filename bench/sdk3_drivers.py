"""SageMaker Python SDK v3's own distributed drivers against `Ringleader(...)`, side by side in
one run: ModelTrainer(source_code=..., distributed=...) in local mode (Mode.LOCAL_CONTAINER),
3 instances x 2 processes, the same script and image for both, rounds alternating.

  mpi4py  examples/mpi_allreduce.py in ringleader:latest:
          MPI(process_count_per_node=2)  vs  Ringleader(distribution="mpi", processes_per_host=2)
  ddp     examples/ddp_train.py in ringleader:horovod:
          Torchrun(process_count_per_node=2)  vs  Ringleader(distribution="torch_distributed", ...)

Each job once as a success and once with rank 3 exiting with code 3. Measured: train()'s wall
time (medians over the rounds), and for a job that failed what train() raised, every
container's exit code and every host's failure file (its first and last line; the last round).

Usage: .venv/bin/python bench/sdk3_drivers.py [--rounds 3] [--timeout 600] [--only CASES]
       (RINGLEADER_SDK3_PYTHON, default build/sdk3-venv/bin/python: a Python with sagemaker>=3)
"""

import argparse
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))

from tests.sdk.conftest import SdkJob  # noqa: E402
from tests.sdk.v3_runner import new_root, remove_containers, run_v3_job, v3_spec  # noqa: E402

EXAMPLES = REPOSITORY / "examples"
SDK3_PYTHON = os.environ.get(
    "RINGLEADER_SDK3_PYTHON", str(REPOSITORY / "build/sdk3-venv/bin/python")
)
FAIL = {"fail-rank": 3, "fail-code": 3}


@dataclass(frozen=True)
class Case:
    job: str  # mpi4py or ddp
    driver: str  # the SDK's config class, or Ringleader
    image: str
    entry_script: str
    distributed: dict[str, Any]
    hyperparameters: dict[str, Any]


def cases() -> list[Case]:
    mpi = {"rounds": 3}
    ddp = {"steps": 60, "log-interval": 20}
    return [
        Case("mpi4py", "MPI", "ringleader:latest", "mpi_allreduce.py",
             {"driver": "MPI", "process_count_per_node": 2}, mpi),
        Case("mpi4py", "Ringleader", "ringleader:latest", "mpi_allreduce.py",
             {"distribution": "mpi", "processes_per_host": 2}, mpi),
        Case("ddp", "Torchrun", "ringleader:horovod", "ddp_train.py",
             {"driver": "Torchrun", "process_count_per_node": 2}, ddp),
        Case("ddp", "Ringleader", "ringleader:horovod", "ddp_train.py",
             {"distribution": "torch_distributed", "processes_per_host": 2}, ddp),
    ]  # fmt: skip


def run(
    case: Case, failing: bool, work: Path, client: docker.DockerClient, timeout: float
) -> SdkJob:
    channel = work / "channel"
    channel.mkdir(exist_ok=True)
    (channel / "sample.csv").write_text("x,y\n1,2\n")
    hyperparameters = {**case.hyperparameters, **(FAIL if failing else {})}
    spec = v3_spec(
        new_root(work),
        EXAMPLES,
        channel,
        case.image,
        distributed=case.distributed,
        entry_script=case.entry_script,
        hyperparameters=hyperparameters,
    )
    job = run_v3_job(SDK3_PYTHON, work, client, spec, timeout)
    remove_containers(client, job)
    return job


def first_and_last(text: bytes | None) -> str:
    """A failure file's first line, and its last when there are more."""
    lines = (text or b"").decode(errors="replace").strip().splitlines()
    if not lines:
        return "(none)"
    shown = lines[0][:100]
    return shown if len(lines) == 1 else f"{shown} ... {lines[-1][:100]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per train()")
    parser.add_argument(
        "--only",
        help="these cases only, e.g. ddp:Torchrun,ddp:Ringleader (the SDK's MPI driver waits "
        "out its 300 s ssh checks in an image not prepared as AWS's are)",
    )
    args = parser.parse_args()
    chosen = [
        case
        for case in cases()
        if not args.only or f"{case.job}:{case.driver}" in args.only.split(",")
    ]
    client = docker.from_env()
    seconds: dict[tuple[str, str, bool], list[float]] = {}
    last: dict[tuple[str, str, bool], SdkJob] = {}
    with tempfile.TemporaryDirectory(prefix="rl-sdk3-bench-") as scratch:
        for round_number in range(args.rounds):
            order = chosen if round_number % 2 == 0 else chosen[::-1]
            for case in order:
                for failing in (False, True):
                    work = Path(scratch) / f"r{round_number}-{case.job}-{case.driver}-{failing}"
                    work.mkdir()
                    job = run(case, failing, work, client, args.timeout)
                    key = (case.job, case.driver, failing)
                    seconds.setdefault(key, []).append(job.seconds)
                    last[key] = job
    print(f"\nSDK v3 local mode, 3 instances x 2 processes, {args.rounds} round(s), medians")
    print(f"{'job':7} {'driver':11} {'outcome':8} {'train() s':>10}  raised / exit codes")
    for case in chosen:
        for failing in (False, True):
            key = (case.job, case.driver, failing)
            job = last[key]
            codes = ",".join(
                str(job.containers[host].exit_code) if host in job.containers else "?"
                for host in sorted(job.containers)
            )
            raised = "nothing" if job.error is None else str(job.error)[-70:]
            outcome = "rank 3" if failing else "success"
            median = statistics.median(seconds[key])
            print(
                f"{case.job:7} {case.driver:11} {outcome:8} {median:10.1f}  {raised}; codes {codes}"
            )
            if job.error is not None:
                for host in sorted(job.snapshots):
                    failure = job.snapshots[host].files.get("failure")
                    print(f"{'':39}{host} failure: {first_and_last(failure)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
