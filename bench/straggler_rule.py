"""How many samples the straggler verdict (core/straggler.py) needs, and how often it names a
rank by chance: the rule itself, no containers.

Two tables:
  samples    the fewest samples of each rank in a window with which a rank that waits
             `share` of the time is named against ranks that wait `others`, the counts
             exactly as expected, for 6, 64 and 256 ranks
  simulated  jobs of --statuses statuses on 6 ranks, each rank's waiting samples drawn at
             random (each sample waits with its rank's share): how many jobs got a rank
             named, with no straggler (every rank waits 30%) and with rank 5 waiting 5%, at
             10 samples a status interval (a status every 10 s, or the first 10 s of 60 s)
             and at 60 (a status every 60 s, a sample a second)

Usage: .venv/bin/python bench/straggler_rule.py [--jobs 1000] [--statuses 20] [--seed 1]
"""

import argparse
import random

from ringleader.core.straggler import chance_of_so_few, shares, straggler

THRESHOLD = 0.15  # ringleader_straggler_threshold's default
WINDOW = 3  # ringleader_straggler_window's default
CASES = ((0.0, 0.3), (0.05, 0.3), (0.1, 0.3), (0.15, 0.5))


def samples_needed(share: float, others: float, ranks: int) -> int | None:
    """The fewest samples a rank (each rank as many) with which the one waiting `share` is
    named against `ranks` - 1 waiting `others`, every count as expected; None past 10,000."""
    for samples in range(3, 10_001):
        counts = {rank: (samples, round(others * samples)) for rank in range(ranks - 1)}
        counts[ranks - 1] = (samples, round(share * samples))
        found = shares(counts)
        if found is not None and straggler(found, THRESHOLD) == ranks - 1:
            return samples
    return None


def simulated(
    rng: random.Random, jobs: int, statuses: int, per_interval: int, slow_share: float
) -> int:
    """Jobs (of `jobs`) in which some rank was named: rank 5 waits `slow_share`, the others
    30%."""
    named = 0
    for _ in range(jobs):
        intervals: list[dict[int, tuple[int, int]]] = []
        for _ in range(statuses):
            intervals.append(
                {
                    rank: (
                        per_interval,
                        sum(
                            rng.random() < (slow_share if rank == 5 else 0.3)
                            for _ in range(per_interval)
                        ),
                    )
                    for rank in range(6)
                }
            )
            if len(intervals) < WINDOW:
                continue
            window = intervals[-WINDOW:]
            counts = {
                rank: (sum(each[rank][0] for each in window), sum(each[rank][1] for each in window))
                for rank in range(6)
            }
            found = shares(counts)
            if found is not None and straggler(found, THRESHOLD) is not None:
                named += 1
                break
    return named


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--statuses", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print("| a rank waits | the others | 6 ranks | 64 ranks | 256 ranks |")
    print("|---|---|---|---|---|")
    for share, others in CASES:
        needed = [samples_needed(share, others, ranks) for ranks in (6, 64, 256)]
        cells = " | ".join("-" if n is None else str(n) for n in needed)
        print(f"| {share:.0%} | {others:.0%} | {cells} |")
    print()
    print(
        f"chance of a rank that never waits among 6 ranks waiting 30%, 40 samples each: "
        f"{chance_of_so_few((40, 0), (200, 60)):.1e}"
    )
    print()
    rng = random.Random(args.seed)
    print(
        f"| samples a rank an interval | window | no straggler: jobs with a rank named | "
        f"rank 5 at 5%: jobs with it named (of {args.jobs}, {args.statuses} statuses) |"
    )
    print("|---|---|---|---|")
    for per_interval in (10, 60):
        chance = simulated(rng, args.jobs, args.statuses, per_interval, 0.3)
        power = simulated(rng, args.jobs, args.statuses, per_interval, 0.05)
        print(f"| {per_interval} | {WINDOW * per_interval} | {chance} | {power} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
