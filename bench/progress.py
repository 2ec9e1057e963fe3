"""What the status line and the straggler watch cost, and how fast they name a straggler.

Three measurements, each printed as a table:
  leader     the leader's rules alone (no containers): --ranks ranks each reporting its step
             and its wait samples --rate times a second for --seconds simulated seconds, a
             status every 10 s; the CPU the leader's step() takes per second of the job (cores)
  cost       bench/../tests/container/progress_jobs/slow_rank.py on 2 fake hosts x 1 rank (one
             rank per core: this machine has 2), 40 steps of 0.25 s of computing each, with the
             watch on (a status every 12 s: each rank's stacks sampled every second, the most
             often the watch samples) and off (ringleader_status_interval=0), alternating
             rounds; the ranks' time from their start to their end, and the cost
  latency    the same job on 3 x 2 with rank 5 computing 40% longer from its first step, a
             status every 3 s and a window of 3: from the first rank's start to the warning

Usage: .venv/bin/python bench/progress.py [--rounds 3] [--ranks 256] [--rate 10]
"""

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

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

JOBS = Path(__file__).resolve().parent.parent / "tests" / "container" / "progress_jobs"


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


def run_job(hosts: int, per_host: int, settings: dict[str, str], **hyper: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="bench-progress-"))
    spec = LocalJobSpec(
        hosts=hosts,
        processes_per_host=per_host,
        source_dir=JOBS,
        entry_point="slow_rank.py",
        hyperparameters=hyper,
        output_dir=folder,
        settings={"startup_timeout": "120", **settings},
    )
    result = LocalJob(spec, io.StringIO(), docker.from_env()).run()
    if result.exit_code != 0:
        print(f"  the job failed with {result.exit_code}: {folder}", file=sys.stderr)
    found = sorted(folder.glob("*/algo-1/output/data/job.json"))
    if not found:
        raise SystemExit(f"no job.json under {folder}")
    return found[0]


def ranks_time(job_file: Path) -> float:
    ranks = read_job_file(job_file).ranks
    return max(r.ended_at for r in ranks) - min(r.started_at for r in ranks)


def cost(rounds: int) -> None:
    work = {"steps": "40", "seconds": "0.25"}
    times: dict[str, list[float]] = {"on": [], "off": []}
    modes = {"on": {"status_interval": "12"}, "off": {"status_interval": "0"}}
    for number in range(rounds):
        for mode in ("on", "off") if number % 2 == 0 else ("off", "on"):
            took = ranks_time(run_job(2, 1, modes[mode], **work))
            times[mode].append(took)
            print(f"cost round {number + 1}, watch {mode}: ranks ran {took:.2f} s")
    on, off = statistics.median(times["on"]), statistics.median(times["off"])
    print()
    print("| ranks' time, watch on | watch off | cost | rounds |")
    print("|---|---|---|---|")
    print(f"| {on:.2f} s | {off:.2f} s | {(on - off) / off:+.1%} | {rounds} + {rounds} |")


def latency(rounds: int) -> None:
    found = []
    settings = {"status_interval": "3", "straggler_window": "3"}
    for number in range(rounds):
        job_file = run_job(3, 2, settings, steps="80", seconds="0.25", **{"slow-rank": "5"})
        summary = read_job_file(job_file)
        first = min(r.started_at for r in summary.ranks)
        named = [e for e in summary.stragglers if e.rank == 5]
        took = named[0].since - first if named else None
        found.append(took)
        print(f"latency round {number + 1}: {'not named' if took is None else f'{took:.1f} s'}")
    named_in = [took for took in found if took is not None]
    print()
    print("| named in | rounds named | window (3 x 3 s) |")
    print("|---|---|---|")
    median = f"{statistics.median(named_in):.1f} s" if named_in else "-"
    print(f"| {median} | {len(named_in)} of {rounds} | 9 s |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--only", choices=("leader", "cost", "latency"))
    args = parser.parse_args()
    if args.only in (None, "leader"):
        cores = leader_cpu(args.ranks, args.rate, args.seconds)
        print("| ranks | reports/s | leader's rules, cores |")
        print("|---|---|---|")
        print(f"| {args.ranks} | {args.ranks * args.rate:.0f} | {cores:.3f} |")
    if args.only in (None, "cost"):
        cost(args.rounds)
    if args.only in (None, "latency"):
        latency(args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
