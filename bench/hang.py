"""Hang benchmark: the same hung job under ringleader and under the launchers used without it.

3 hosts x 2 ranks: every rank takes --steps steps (each prints `step N rank R ...`), then rank
4 (on algo-3) is stuck in its own code while the other five wait in a collective: the jobs of
tests/container/hang_jobs/. Peers:

  ringleader-ddp    ddp_skip.py (PyTorch, gloo) as torch_distributed, ringleader_hang_timeout
                    --timeout; gloo keeps torch's default timeout (30 min)
  torchrun-default  ddp_skip.py under torchrun on every host, the command line AWS's PyTorch
                    container uses (bench/ddp.py's), gloo's default timeout (30 min)
  torchrun-timeout  the same with init_process_group's timeout --timeout (the script's
                    --gloo-timeout), what a user who knows about the hang sets
  ringleader-mpi    mpi_stuck.py (mpi4py) as mpi, ringleader_hang_timeout --timeout
  mpirun            mpi_stuck.py under an expert's bare mpirun (bench/probe/bare_mpirun.sh)
PyTorch jobs run in ringleader:horovod, mpi4py jobs in ringleader:latest.

Per peer, it measures:
  seconds   from the hang (the last `step N` line's arrival here, through `docker logs`) to
            every container exited (Docker's FinishedAt); a peer still running --cap seconds
            after the hang is "still running" (its containers are then killed)
  codes     each host's exit code ("?" = still running at the cap)
  culprit   whether anything says which rank hangs: a line of the output or of a failure file,
            other than the job's own step lines, that names rank 4 together with the function
            it is stuck in; a line naming rank 4 otherwise (e.g. as a victim) is shown apart
Progress goes to stderr, one table to stdout at the end.

Usage: .venv/bin/python bench/hang.py [--peers ringleader-ddp torchrun-default ...]
       [--timeout 30] [--cap 600] [--log-dir DIR]
All five peers take about 25 minutes (torchrun-default and mpirun each run to the cap).
"""

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO, cast

import docker
from ddp import IMAGE as TORCH_IMAGE
from ddp import torchrun_on_every_host
from faults import (
    Capture,
    JobThread,
    container_states,
    force_end,
    known_code,
    progress,
    wait_until,
)
from startup import ENTRYPOINTS, bare_env

from ringleader.tools.local.plan import LocalJobSpec, host_names, mpi_options
from ringleader.tools.local.run import LocalJob

REPO = Path(__file__).resolve().parents[1]
JOBS = REPO / "tests" / "container" / "hang_jobs"
BARE_MPIRUN = REPO / "bench" / "probe" / "bare_mpirun.sh"
MPI_IMAGE = "ringleader:latest"
HOSTS = 3
PER_HOST = 2
RANKS = HOSTS * PER_HOST
CULPRIT = 4  # on algo-3
STARTUP_WAIT = 240  # seconds from launch to every rank's last step line, at most
MASTER_PORT = 7777  # as AWS's PyTorch container and bench/ddp.py use


@dataclass(frozen=True)
class Peer:
    name: str
    runner: str  # ringleader, torchrun or mpirun
    script: str  # in tests/container/hang_jobs/
    stuck_in: str  # the function rank 4 hangs in
    describe: Callable[[float], str]  # what bounds the hang, given --timeout


DDP = ("ddp_skip.py", "tokenize_forever")
MPI = ("mpi_stuck.py", "load_batch_forever")
PEERS = {
    peer.name: peer
    for peer in (
        Peer("ringleader-ddp", "ringleader", *DDP, lambda t: f"hang timeout {t:g} s"),
        Peer("torchrun-default", "torchrun", *DDP, lambda _: "gloo timeout 30 min (default)"),
        Peer("torchrun-timeout", "torchrun", *DDP, lambda t: f"gloo timeout {t:g} s"),
        Peer("ringleader-mpi", "ringleader", *MPI, lambda t: f"hang timeout {t:g} s"),
        Peer("mpirun", "mpirun", *MPI, lambda _: "none"),
    )
}


def script_args(peer: Peer, steps: int, timeout: float) -> dict[str, str]:
    values = {"steps": str(steps), "rank-to-hang": str(CULPRIT)}
    if peer.script == DDP[0]:
        # 0: torch's own default; only the peer that sets a timeout sets one
        values["gloo-timeout"] = f"{timeout:g}" if peer.name == "torchrun-timeout" else "0"
    return values


def build_spec(peer: Peer, source: Path, out: Path, steps: int, timeout: float) -> LocalJobSpec:
    values = script_args(peer, steps, timeout)
    argv = tuple(f"--{key}={value}" for key, value in values.items())
    spec = LocalJobSpec(
        hosts=HOSTS,
        processes_per_host=PER_HOST,
        source_dir=source,
        entry_point=peer.script,
        image=TORCH_IMAGE if peer.script == DDP[0] else MPI_IMAGE,
        output_dir=out,
    )
    if peer.runner == "ringleader":
        return replace(
            spec,
            distribution="torch_distributed" if peer.script == DDP[0] else "mpi",
            hyperparameters=values,
            settings={"hang_timeout": f"{timeout:g}", "startup_timeout": "60"},
        )
    if peer.runner == "torchrun":
        return torchrun_on_every_host(spec, MASTER_PORT, peer.script, argv)
    # bare mpirun as bench/startup.py runs it, with the mpirun options ringleader would use
    spec = replace(spec, entrypoint=ENTRYPOINTS["bare"], command=(peer.script, *argv))
    options = mpi_options(spec, os.cpu_count() or 1)
    return replace(spec, env=bare_env(options, PER_HOST))


@dataclass
class Outcome:
    peer: Peer
    timeout: float
    seconds: float | None = None  # the hang -> every container exited
    still_running_at: float | None = None  # the cap, when the job outlived it
    codes: tuple[str, ...] = ("?",) * HOSTS
    culprit: str = ""  # the line that names rank 4 and its function
    mentioned: str = ""  # else a line that names rank 4 only
    note: str = ""

    def seconds_text(self) -> str:
        if self.still_running_at is not None:
            return f"still running at {self.still_running_at:.0f}"
        return "n/a" if self.seconds is None else f"{self.seconds:.1f}"

    def culprit_text(self) -> str:
        if self.culprit:
            return f"yes: {self.culprit}"
        return f"no (rank {CULPRIT} only in: {self.mentioned})" if self.mentioned else "no"


# What precedes a line's text: the container's `algo-N | `, then ringleader's `[algo-N rank R] `
# or torch's `[rankR]: `: tags of a rank's own lines, which must not count as naming it.
PREFIX = re.compile(r"^(\S+ \| )?(\[[^\]]*\]:? )?")
OWN_LINE = re.compile(r"^(step \d+ rank \d+ |done rank \d+)")  # the job's own prints
# "Rank 4 on host algo-3", torchrun's error summary "rank      : 4 (local_rank: 0)"
NAMES_CULPRIT = re.compile(rf"\brank[\s:=#]*{CULPRIT}\b", re.IGNORECASE)
CELL_WIDTH = 110


def shorten(text: str) -> str:
    return text if len(text) <= CELL_WIDTH else text[: CELL_WIDTH - 3] + "..."


def find_culprit(outcome: Outcome, texts: list[str]) -> None:
    """Set what names rank 4: with its function (`culprit`), or at all (`mentioned`)."""
    for text in texts:
        for raw in text.splitlines():
            line = PREFIX.sub("", raw.strip(), count=1).strip()
            if OWN_LINE.match(line) or not NAMES_CULPRIT.search(line):
                continue
            if outcome.peer.stuck_in in line:
                outcome.culprit = shorten(line)
                return
            outcome.mentioned = outcome.mentioned or shorten(line)


def failure_files(job: LocalJob) -> list[str]:
    texts = []
    for name in host_names(HOSTS, random_suffix=False):
        path = job.output_dir / name / "output" / "failure"
        if path.is_file():
            texts.append(path.read_text(errors="replace"))
    return texts


def hang_time(capture: Capture, steps: int) -> float | None:
    """When the last rank's last step line arrived: the job's last progress."""
    seen = [capture.first(f"step {steps} rank {rank} ") for rank in range(RANKS)]
    return max(at for at in seen if at is not None) if None not in seen else None


def run_peer(
    peer: Peer, args: argparse.Namespace, client: Any, source: Path, workdir: Path
) -> Outcome:
    outcome = Outcome(peer, args.timeout)
    capture = Capture()
    spec = build_spec(peer, source, workdir, args.steps, args.timeout)
    job = LocalJob(spec, cast(TextIO, capture), client)  # it only writes and flushes
    thread = JobThread(job)
    progress(f"{peer.name}: job {job.job_id} ({peer.script} in {spec.image})")
    launched = time.time()
    thread.start()
    try:
        if not wait_until(
            lambda: hang_time(capture, args.steps) is not None, launched + STARTUP_WAIT, thread
        ):
            ended = thread.result
            if ended is not None:
                outcome.codes = tuple(str(host.exit_code) for host in ended.hosts)
                outcome.note = f"the job ended before every rank printed step {args.steps}"
            elif thread.error is not None:
                outcome.note = f"job error: {thread.error!r}"
            else:
                outcome.note = f"not every rank printed step {args.steps} within {STARTUP_WAIT} s"
            progress(f"{peer.name}: {outcome.note}")
            force_end(client, job, thread)
            return finish(outcome, job, capture, args.log_dir)
        hung_at = hang_time(capture, args.steps)
        assert hung_at is not None
        progress(f"{peer.name}: every rank printed step {args.steps}; the hang begins")
        thread.join(max(hung_at + args.cap - time.time(), 0.0))
        if thread.is_alive():
            outcome.still_running_at = args.cap
            states = container_states(client, job)
            names = host_names(HOSTS, random_suffix=False)
            outcome.codes = tuple(known_code(name, job, states) for name in names)
            progress(f"{peer.name}: still running {args.cap:.0f} s after the hang; killing it")
            force_end(client, job, thread)
        else:
            result = thread.result
            if result is None:
                outcome.note = f"job error: {thread.error!r}"
            else:
                outcome.codes = tuple(str(host.exit_code) for host in result.hosts)
                outcome.seconds = max(host.finished_at for host in result.hosts) - hung_at
        return finish(outcome, job, capture, args.log_dir)
    finally:
        if thread.is_alive():  # interrupted or failed above: never leave containers behind
            force_end(client, job, thread)


def finish(outcome: Outcome, job: LocalJob, capture: Capture, log_dir: Path | None) -> Outcome:
    find_culprit(outcome, [*failure_files(job), capture.text()])
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / f"{outcome.peer.name}.log").write_text(capture.timed_text())
    progress(
        f"{outcome.peer.name}: {outcome.seconds_text()} s, codes {' '.join(outcome.codes)}, "
        f"culprit named: {outcome.culprit_text()}" + (f"; {outcome.note}" if outcome.note else "")
    )
    return outcome


def print_table(outcomes: list[Outcome], args: argparse.Namespace) -> None:
    headers = (
        "peer",
        "job",
        "what bounds the hang",
        "s hang->all exited",
        "exit codes algo-1..3",
        f"culprit (rank {CULPRIT}) named",
    )
    rows = [
        (
            o.peer.name,
            o.peer.script,
            o.peer.describe(o.timeout),
            o.seconds_text(),
            " ".join(o.codes),
            o.culprit_text() + (f" [{o.note}]" if o.note else ""),
        )
        for o in outcomes
    ]
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=False)]
    for line in (headers, *rows):
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        )
    print(
        f"{HOSTS} hosts x {PER_HOST} ranks; rank {CULPRIT} hangs after step {args.steps}. "
        "The hang: the last step line's arrival via docker logs; exits: Docker's FinishedAt; "
        f"capped at {args.cap:.0f} s ('?' = still running then)."
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", nargs="+", default=list(PEERS), choices=PEERS)
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="ringleader_hang_timeout, and torchrun-timeout's gloo timeout (seconds)",
    )
    parser.add_argument(
        "--cap", type=float, default=600.0, help="seconds after the hang before a peer is killed"
    )
    parser.add_argument("--steps", type=int, default=3, help="steps before the hang")
    parser.add_argument(
        "--log-dir", type=Path, help="keep each peer's output here, lines timed on arrival"
    )
    args = parser.parse_args()
    client = docker.from_env()
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="rl-bench-hang-") as tmp:
        # One source dir for every peer: the jobs, and the bare mpirun script next to them.
        source = Path(tmp) / "code"
        shutil.copytree(JOBS, source, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(BARE_MPIRUN, source)
        for name in args.peers:
            outcomes.append(run_peer(PEERS[name], args, client, source, Path(tmp) / "out"))
    print_table(outcomes, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
