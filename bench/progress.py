"""What the status line and the straggler watch cost, and how fast they name a straggler.

Three measurements, each printed as a table:
  leader     the leader's rules alone (no containers): --ranks ranks each reporting its step
             and its wait samples --rate times a second for --seconds simulated seconds, a
             status every 10 s; the CPU the leader's step() takes per second of the job (cores)
  cost       the Horovod and the DDP example (examples/horovod_train.py, examples/ddp_train.py
             in ringleader:horovod) on 2 fake hosts x 1 rank (one rank per core: this machine
             has 2), with a step source (`ringleader_step_regex`), three ways in turning
             rounds: no status line (ringleader_status_interval=0), the default (a status
             every 60 s, the straggler watch off) and the straggler watch on (its stacks
             recorded the first 10 s of every 60 s, 4 samples a second), each run long enough
             for two periods and more (about 150 s); the examples' own throughput and the cost
  latency    the same job on 3 x 2 with rank 5 computing 40% longer from its first step, a
             status every 3 s, a window of 4 and 10 samples a second; and a status every
             10 s, a window of 3 and 4 samples a second (each 120 samples of a rank a window):
             from the first rank's start to the warning

Usage: .venv/bin/python bench/progress.py [--rounds 3] [--ranks 256] [--rate 10]
       [--only leader|cost|latency] [--steps-horovod 110000] [--steps-ddp 18000]
"""

import argparse
import io
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import docker

from ringleader.config.job import ProgressConfig, Timeouts
from ringleader.core.jobfile import read_job_file
from ringleader.core.pmap import PMap
from ringleader.core.progress import RankStep
from ringleader.core.straggler import WaitCount
from ringleader.supervise.eventloop import Now
from ringleader.supervise.leading.effects import Deadline
from ringleader.supervise.leading.state import Attempt, LeaderSetup, LeaderState, Phase
from ringleader.supervise.leading.status import status_from_launch
from ringleader.supervise.leading.table import step
from ringleader.tools.local.plan import LocalJobSpec
from ringleader.tools.local.run import LocalJob
from ringleader.wire.events import RanksProgressed

REPO = Path(__file__).resolve().parent.parent
JOBS = REPO / "tests" / "container" / "progress_jobs"
EXAMPLES = REPO / "examples"


def leader_cpu(ranks: int, rate: float, seconds: float) -> float:
    """Cores the leader's rules use for `ranks` ranks reporting `rate` times a second."""
    hosts = [f"algo-{n}" for n in range(1, ranks // 8 + 2)]
    setup = LeaderSetup(
        hosts[0], tuple(hosts[1:]), Timeouts(), progress=ProgressConfig(status_interval=10.0)
    )
    started = PMap({rank: hosts[rank // 8] for rank in range(ranks)})
    base = LeaderState(setup)
    attempt = status_from_launch(base, Attempt(0, 0.0, started=started), Now(0.0, 0.0))
    state = LeaderState(setup, phase=Phase.RUNNING, world_size=ranks, attempt=attempt)
    reports = int(ranks * rate * seconds)
    gap = 1.0 / (ranks * rate)
    used = 0.0
    for number in range(reports):
        rank, at = number % ranks, number * gap
        count = number // ranks + 1
        event = RanksProgressed(
            hosts[rank // 8],
            (rank,),
            (RankStep(rank, count, 100_000),),
            (WaitCount(rank, count, count // 3),),
        )
        began = time.process_time()
        state, _ = step(state, event, Now(at, at))
        deadline = state.deadline
        if deadline is not None and at >= deadline:
            state, _ = step(state, Deadline(), Now(at, at))
        used += time.process_time() - began
    return used / seconds


def run_job(
    hosts: int,
    per_host: int,
    settings: dict[str, str],
    *,
    source_dir: Path = JOBS,
    entry_point: str = "slow_rank.py",
    out: io.StringIO | None = None,
    **spec: Any,
) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="bench-progress-"))
    job = LocalJobSpec(
        hosts=hosts,
        processes_per_host=per_host,
        source_dir=source_dir,
        entry_point=entry_point,
        output_dir=folder,
        settings={"startup_timeout": "120", **settings},
        **spec,
    )
    result = LocalJob(job, out or io.StringIO(), docker.from_env()).run()
    if result.exit_code != 0:
        print(f"  the job failed with {result.exit_code}: {folder}", file=sys.stderr)
    found = sorted(folder.glob("*/algo-1/output/data/job.json"))
    if not found:
        raise SystemExit(f"no job.json under {folder}")
    return found[0]


def ranks_time(job_file: Path) -> float:
    ranks = read_job_file(job_file).ranks
    return max(r.ended_at for r in ranks) - min(r.started_at for r in ranks)


# example -> (distribution, its throughput in the line it ends with, the unit)
EXAMPLE_JOBS = {
    "horovod_train.py": ("mpi", re.compile(r"done: .*\(([0-9.]+) samples/s\)"), "samples/s"),
    "ddp_train.py": ("torch_distributed", re.compile(r"done: .*\(([0-9.]+) steps/s\)"), "steps/s"),
}
WATCH_MODES = {
    "off": {"status_interval": "0"},
    "default": {},  # a status every 60 s, the straggler watch off
    # and the watch on: each rank's stacks recorded for the first 10 s of every 60 s
    "watch": {"straggler_action": "warn"},
}


def example_throughput(example: str, steps: int, watch: dict[str, str]) -> float | None:
    distribution, done, _ = EXAMPLE_JOBS[example]
    out = io.StringIO()
    settings = {"step_regex": r"^step (\d+)", "total_steps": str(steps), **watch}
    run_job(
        2,
        1,
        settings,
        source_dir=EXAMPLES,
        entry_point=example,
        out=out,
        image="ringleader:horovod",
        distribution=distribution,
        hyperparameters={"steps": str(steps), "log-interval": str(max(steps // 20, 1))},
    )
    found = done.search(out.getvalue())
    return float(found.group(1)) if found else None


def cost(rounds: int, steps: dict[str, int]) -> None:
    modes = list(WATCH_MODES)
    rows = []
    for example, (_, _, unit) in EXAMPLE_JOBS.items():
        rates: dict[str, list[float]] = {mode: [] for mode in modes}
        for number in range(rounds):
            order = modes[number % len(modes) :] + modes[: number % len(modes)]
            for mode in order:
                rate = example_throughput(example, steps[example], WATCH_MODES[mode])
                print(f"cost round {number + 1}, {example}, watch {mode}: {rate} {unit}")
                if rate is not None:
                    rates[mode].append(rate)
        medians = {mode: statistics.median(rates[mode]) for mode in modes if rates[mode]}
        rows.append((example, unit, medians, {mode: len(rates[mode]) for mode in modes}))
    print()
    print("| example (2 x 1) | no status | default | cost | straggler watch on | cost | runs |")
    print("|---|---|---|---|---|---|---|")
    for example, unit, medians, counts in rows:
        off = medians.get("off")
        cells = [f"{off:.1f} {unit}" if off else "-"]
        for mode in modes[1:]:
            on = medians.get(mode)
            cells.append(f"{on:.1f}" if on else "-")
            cells.append(f"{(off - on) / off:+.1%}" if on and off else "-")
        runs = " / ".join(str(counts[mode]) for mode in modes)
        print(f"| {example} | {' | '.join(cells)} | {runs} |")


# (status interval s, window, samples a second): each 120 samples of a rank in a window
LATENCY_SETTINGS = ((3, 4, 10), (10, 3, 4))


def latency(rounds: int) -> None:
    found: dict[tuple[int, int, int], list[float | None]] = {s: [] for s in LATENCY_SETTINGS}
    for number in range(rounds):
        for interval, window, rate in LATENCY_SETTINGS:
            settings = {
                "status_interval": str(interval),
                "straggler_window": str(window),
                "straggler_sample_rate": str(rate),
                "straggler_action": "warn",
            }
            # steps of 0.35 s (rank 5's): the job lasts twice the window and its first period
            steps = str(int(2 * (window + 2) * interval / 0.35))
            job_file = run_job(
                3,
                2,
                settings,
                hyperparameters={"steps": steps, "seconds": "0.25", "slow-rank": "5"},
            )
            summary = read_job_file(job_file)
            first = min(r.started_at for r in summary.ranks)
            named = [e for e in summary.stragglers if e.rank == 5]
            took = named[0].since - first if named else None
            found[(interval, window, rate)].append(took)
            print(
                f"latency round {number + 1}, a status every {interval} s, window {window}, "
                f"{rate} samples/s: {'not named' if took is None else f'{took:.1f} s'}"
            )
    print()
    print("| status every | window | samples/s | named in (median) | rounds | window alone |")
    print("|---|---|---|---|---|---|")
    for (interval, window, rate), took_each in found.items():
        named_in = [took for took in took_each if took is not None]
        median = f"{statistics.median(named_in):.1f} s" if named_in else "-"
        print(
            f"| {interval} s | {window} | {rate} | {median} | {len(named_in)} of {rounds} named "
            f"| {interval * window} s |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--only", choices=("leader", "cost", "latency"))
    parser.add_argument("--steps-horovod", type=int, default=110_000)
    parser.add_argument("--steps-ddp", type=int, default=18_000)
    args = parser.parse_args()
    if args.only in (None, "leader"):
        cores = leader_cpu(args.ranks, args.rate, args.seconds)
        print("| ranks | reports/s | leader's rules, cores |")
        print("|---|---|---|")
        print(f"| {args.ranks} | {args.ranks * args.rate:.0f} | {cores:.3f} |")
    if args.only in (None, "cost"):
        cost(args.rounds, {"horovod_train.py": args.steps_horovod, "ddp_train.py": args.steps_ddp})
    if args.only in (None, "latency"):
        latency(args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
