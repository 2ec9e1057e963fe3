"""Restart after a rank's failure: ringleader's in-place restart vs torchrun --max-restarts vs a
fresh start of the whole job (the SageMaker way), on 3 hosts x 2 ranks of PyTorch DDP (gloo on
CPU), same image, same fake hosts, same script.

The script is bench/probe/restart_ddp.py: a small DDP model; every rank prints `RUNNING
attempt=.. launch=.. rank=.. at=<time.time()>` once its first DDP step is done, and on the
first attempt rank 3 (on the second host) prints `FAILING at=<time.time()>` before its step 5
and exits 1. Every container runs on this machine, so the ranks' clocks are one clock.

  restart   FAILING at -> the last of the 6 ranks of the next attempt RUNNING
  launched  FAILING at -> the last of them STARTED (the probe's first line, before it imports
            torch): the launcher's share; the rest (import torch, init_process_group, one
            step) is the same work whoever launched the rank
  first     FAILING at -> the first of them RUNNING

The three ways:
  ringleader  `ringleader local --hosts 3 --processes-per-host 2 --distribution
              torch_distributed --max-restarts 1` (restart backoff as configured, by default
              ringleader's): the leader stops every rank and starts them all again in the same
              containers (RINGLEADER_ATTEMPT=1, TORCHELASTIC_RESTART_COUNT=1)
  torchrun    3 containers of the image on a private network (ringleader's local runner with
              the entry point swapped, as bench/ddp.py does), each running `torchrun --nnodes 3
              --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint algo-1:29400
              --max-restarts 1` (torchrun's defaults otherwise: monitor interval 0.1 s), and
              TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: torch 2.13's default hands the ranks of
              every attempt the agents' one TCPStore (same port, no prefix per attempt), where
              the first attempt's gloo addresses still are; the second attempt's ranks connect
              to the dead ones (connectFullMesh: connection refused) and the job fails or hangs
              (both runs tried here without it: one ended 1, one hung until stopped; see
              github.com/pytorch/pytorch/issues/167288). With the opt-out the rank 0 of each
              attempt hosts a new store
  fresh       `ringleader local` without restarts: the failure ends the job (its containers
              are stopped and removed), then a second `ringleader local` starts the same job
              again in new containers; the restart runs to that job's last rank RUNNING.
              Also shown: `ended`, FAILING -> the first job's `ringleader local` returned
Only the ranks that print RUNNING after the FAILING line count, and a run counts only if all 6
did so once each, launched for the second time in place (or the first time in the new job) and
the job (the second job, for fresh) ended 0; otherwise its restart is n/a and the reason shown.

Every round runs each way once, the order rotating round by round; each cell of the table is
the median over the rounds, every run listed below it with the machine's load average (1 min)
when it began (other jobs on the machine show there). Targets: ringleader / torchrun <= 1.2,
fresh / ringleader >= 5. --logs DIR keeps each run's output, every line with the seconds since
that run started when this script read it (the ringleader runs' leader notes show where the
restart's time went).

Usage: .venv/bin/python bench/restart.py [--rounds 3] [--image ringleader:horovod]
       [--restart-backoff SECONDS] [--logs DIR] [--ways ringleader torchrun fresh]
Needs an image with PyTorch (ringleader:horovod). Other container tests share this machine:
  flock /tmp/ringleader-docker.lock .venv/bin/python bench/restart.py --rounds 3
"""

import argparse
import contextlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import docker
import docker.errors

from ringleader.tools.local.plan import LocalJobSpec, host_names
from ringleader.tools.local.run import LocalJob

BENCH = Path(__file__).resolve().parent
SCRIPT = "restart_ddp.py"
PYTHON = "/opt/ringleader/venv/bin/python"
RINGLEADER = Path(sys.executable).with_name("ringleader")
HOSTS, PER_HOST = 3, 2
WORLD = HOSTS * PER_HOST
RDZV_PORT = 29400
RUN_TIMEOUT = 300  # seconds a job may take before it is stopped (its run then counts as n/a)
WAYS = ("ringleader", "torchrun", "fresh")
MARK = r"launch=(?P<launch>\d+) rank=(?P<rank>\d+) at=(?P<at>[0-9.]+)"
RUNNING = re.compile(rf"RUNNING attempt=\S+ {MARK}")
STARTED = re.compile(rf"STARTED {MARK}")
FAILING = re.compile(r"FAILING at=([0-9.]+)")
JOB = re.compile(r"==> job (rl-[0-9a-f]+):")


@dataclass(frozen=True)
class Output:
    lines: list[tuple[float, str]]  # (seconds since the run started, line)
    code: int | None
    ended: float  # wall clock when the job had ended (its runner returned)


@dataclass(frozen=True)
class Measurement:
    restart: float | None
    first: float | None
    launched: float | None  # FAILING -> the last rank of the next attempt STARTED
    ended: float | None = None  # fresh: FAILING -> the first job's runner returned
    codes: str = ""
    problem: str = ""
    load: float = 0.0  # the machine's load average (1 min) when the run began


class Jobs:
    """Every job this bench started, by id: whatever a runner left behind is removed at the
    end of the run (the runners clean up after themselves; this is for when they could not)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.ids: set[str] = set()

    def cleanup(self) -> None:
        for job in sorted(self.ids):
            for container in self.client.containers.list(
                all=True, filters={"label": f"ringleader.job={job}"}
            ):
                with contextlib.suppress(docker.errors.APIError):
                    container.remove(force=True)
            for network in self.client.networks.list(names=[f"{job}-net"]):
                with contextlib.suppress(docker.errors.APIError):
                    network.remove()
        self.ids.clear()


def ringleader_local(
    args: argparse.Namespace, source: Path, out_dir: Path, jobs: Jobs, restarts: int, fail: bool
) -> Output:
    """One `ringleader local` run of the probe, its output read line by line as it comes."""
    command = [
        str(RINGLEADER),
        "local",
        f"--hosts={HOSTS}",
        f"--processes-per-host={PER_HOST}",
        "--distribution=torch_distributed",
        f"--image={args.image}",
        f"--source-dir={source}",
        f"--entry-point={SCRIPT}",
        f"--output={out_dir}",
    ]
    if restarts:
        command.append(f"--max-restarts={restarts}")
        if args.restart_backoff is not None:
            command.append(f"--restart-backoff={args.restart_backoff}")
    command += ["--", "--fail", "1" if fail else "0"]
    lines: list[tuple[float, str]] = []
    started = time.monotonic()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append((time.monotonic() - started, line.rstrip("\n")))
            if match := JOB.search(line):
                jobs.ids.add(match.group(1))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code: int | None = process.wait(RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        code = None
        lines.append((time.monotonic() - started, f"### bench: timed out after {RUN_TIMEOUT} s"))
    finally:
        if process.poll() is None:  # timed out or interrupted: it stops its hosts on SIGINT
            process.send_signal(signal.SIGINT)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    ended = time.time()
    reader.join(10)
    return Output(lines, code, ended)


class _Lines:
    """A text stream that keeps whole lines with the time each was written."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.lines: list[tuple[float, str]] = []
        self._partial = ""

    def write(self, text: str) -> int:
        now = time.monotonic() - self.started
        *complete, self._partial = (self._partial + text).split("\n")
        self.lines += [(now, line) for line in complete]
        return len(text)

    def flush(self) -> None:
        pass


def torchrun(args: argparse.Namespace, source: Path, out_dir: Path, jobs: Jobs) -> Output:
    """torchrun --max-restarts 1 on every host (c10d rendezvous on the first), through the local
    runner with the entry point swapped: the same containers, network and configuration."""
    first = host_names(HOSTS, random_suffix=False)[0]
    spec = LocalJobSpec(
        hosts=HOSTS,
        processes_per_host=PER_HOST,
        source_dir=source,
        entry_point=SCRIPT,
        image=args.image,
        output_dir=out_dir,
        env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"},
        entrypoint=(PYTHON, "-m", "torch.distributed.run"),
        command=(
            f"--nnodes={HOSTS}",
            f"--nproc-per-node={PER_HOST}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={first}:{RDZV_PORT}",
            "--rdzv-id=restart-bench",
            "--max-restarts=1",
            f"/opt/ml/code/{SCRIPT}",
            "--fail",
            "1",
        ),
    )
    client = jobs.client
    out = _Lines(time.monotonic())
    job = LocalJob(spec, out, client)  # type: ignore[arg-type]
    jobs.ids.add(job.job_id)
    result: list[int] = []
    # In a thread, so that a job that never ends can be stopped (the runner then cleans up).
    runner = threading.Thread(target=lambda: result.append(job.run().exit_code), daemon=True)
    runner.start()
    try:
        runner.join(RUN_TIMEOUT)
    finally:
        if runner.is_alive():
            out.write(f"### bench: stopping the job after {RUN_TIMEOUT} s or an interrupt\n")
            for container in job.container_ids.values():
                with contextlib.suppress(docker.errors.APIError):
                    client.api.kill(container)
            runner.join(60)
    return Output(out.lines, result[0] if result else None, time.time())


def marks(output: Output, pattern: re.Pattern[str]) -> list[tuple[int, int, float]]:
    """(launch, rank, at) of every STARTED or RUNNING line."""
    return [
        (int(m.group("launch")), int(m.group("rank")), float(m.group("at")))
        for _, line in output.lines
        for m in pattern.finditer(line)  # two ranks' lines can share one (a shared pipe)
    ]


def measure(failed: Output, restarted: Output, launch: int) -> Measurement:
    """Restart seconds from the failure in `failed` to the ranks of `restarted` (the same
    output for an in-place restart) that run after it, each at its `launch`."""
    codes = f"{failed.code}" if failed is restarted else f"{failed.code} then {restarted.code}"
    failing = [float(m.group(1)) for _, line in failed.lines for m in FAILING.finditer(line)]
    if len(failing) != 1:
        return Measurement(None, None, None, codes=codes, problem="no single FAILING line")
    failure = failing[0]
    after = [mark for mark in marks(restarted, RUNNING) if mark[2] > failure]
    started = [mark for mark in marks(restarted, STARTED) if mark[2] > failure]
    ranks = sorted(rank for _, rank, _ in after)
    problem = ""
    if ranks != list(range(WORLD)):
        problem = f"ranks running after the failure: {ranks}"
    elif any(lau != launch for lau, _, _ in after):
        problem = f"launches {sorted(lau for lau, _, _ in after)}, expected {launch}"
    elif restarted.code != 0:
        problem = f"the job ended {restarted.code}"
    if problem:
        return Measurement(None, None, None, codes=codes, problem=problem)
    ats = [at for _, _, at in after]
    starts = {rank: at for lau, rank, at in started if lau == launch}
    launched = max(starts.values()) - failure if len(starts) == WORLD else None
    ended = None if failed is restarted else failed.ended - failure
    return Measurement(max(ats) - failure, min(ats) - failure, launched, ended, codes)


def run(way: str, args: argparse.Namespace, source: Path, tmp: Path, jobs: Jobs) -> Measurement:
    out_dir = tmp / "out"
    load = os.getloadavg()[0]
    try:
        if way == "ringleader":
            output = ringleader_local(args, source, out_dir, jobs, restarts=1, fail=True)
            outputs = [output]
            result = measure(output, output, launch=1)
        elif way == "torchrun":
            output = torchrun(args, source, out_dir, jobs)
            outputs = [output]
            result = measure(output, output, launch=1)
        else:
            failed = ringleader_local(args, source, out_dir, jobs, restarts=0, fail=True)
            outputs = [failed]
            again = ringleader_local(args, source, out_dir, jobs, restarts=0, fail=False)
            outputs.append(again)
            result = measure(failed, again, launch=0)
    finally:
        jobs.cleanup()
    if args.logs is not None:
        save_logs(args.logs, way, outputs)
    return replace(result, load=load)


def save_logs(directory: Path, way: str, outputs: Sequence[Output]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    number = len(list(directory.glob(f"{way}-*.log"))) + 1
    with open(directory / f"{way}-{number}.log", "w") as log:
        for index, output in enumerate(outputs, 1):
            if len(outputs) > 1:
                log.write(f"### job {index} of {len(outputs)}, exit code {output.code}\n")
            for seconds, line in output.lines:
                log.write(f"{seconds:8.3f}  {line}\n")


def median(values: Sequence[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def fmt(value: float | None, width: int = 10) -> str:
    return f"{'n/a':>{width}}" if value is None else f"{value:{width}.2f}"


def medians(runs: Sequence[Measurement]) -> tuple[float | None, ...]:
    names = ("launched", "first", "ended")
    return tuple(median([getattr(m, name) for m in runs]) for name in names)


def cells(
    way: str,
    restart: float | None,
    launched: float | None,
    first: float | None,
    ended: float | None,
) -> str:
    ended_cell = fmt(ended, 9) if way == "fresh" else f"{'':9}"
    return f"{fmt(restart)}{fmt(launched, 11)}{fmt(first, 9)}{ended_cell}"


def ratio(numerator: float | None, denominator: float | None) -> str:
    return f"{numerator / denominator:.2f}" if numerator is not None and denominator else "n/a"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each way, alternating")
    parser.add_argument("--image", default="ringleader:horovod", help="an image with PyTorch")
    parser.add_argument(
        "--restart-backoff",
        type=float,
        default=None,
        help="ringleader's --restart-backoff (default: ringleader's own)",
    )
    parser.add_argument("--logs", type=Path, default=None, help="keep every run's output here")
    parser.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS), help="a subset")
    args = parser.parse_args()
    jobs = Jobs(docker.from_env())
    results: dict[str, list[Measurement]] = {way: [] for way in WAYS}
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rl-bench-restart-", ignore_cleanup_errors=True) as t:
        tmp = Path(t)
        source = tmp / "code"
        source.mkdir()
        shutil.copy(BENCH / "probe" / SCRIPT, source)
        ways = tuple(way for way in WAYS if way in args.ways)
        for number in range(args.rounds):
            order = ways[number % len(ways) :] + ways[: number % len(ways)]
            for way in order:
                print(f"... round {number + 1}: {way}", file=sys.stderr, flush=True)
                results[way].append(run(way, args, source, tmp, jobs))
    minutes = (time.monotonic() - began) / 60
    backoff = "default" if args.restart_backoff is None else f"{args.restart_backoff:g} s"
    print(
        f"Restart after a rank's failure, {HOSTS} hosts x {PER_HOST} ranks, DDP (gloo, CPU), "
        f"{args.image}, ringleader restart backoff {backoff}; {args.rounds} round(s) in "
        f"{minutes:.1f} min (median; every run listed)"
    )
    print(
        f"{'way':<11}{'restart s':>10}{'launched s':>11}{'first s':>9}{'ended s':>9}"
        "  load average, exit codes, problem"
    )
    summary: dict[str, float | None] = {}
    for way in WAYS:
        runs = results[way]
        summary[way] = median([m.restart for m in runs])
        print(f"{way:<11}{cells(way, summary[way], *medians(runs))}")
    print(
        f"ringleader / torchrun: {ratio(summary['ringleader'], summary['torchrun'])} "
        f"(target <= 1.2);  fresh / ringleader: {ratio(summary['fresh'], summary['ringleader'])} "
        "(target >= 5)"
    )
    print("runs:")
    for way in WAYS:
        for number, m in enumerate(results[way], 1):
            note = f"  load {m.load:4.1f}  {m.codes}" + (f"  {m.problem}" if m.problem else "")
            row = cells(way, m.restart, m.launched, m.first, m.ended)
            print(f"{way + ' ' + str(number):<11}{row}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
