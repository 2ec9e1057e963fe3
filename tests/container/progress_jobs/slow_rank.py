"""A synchronous mpi4py job: every step each rank computes --seconds (a sleep stands in for
the work, so that ranks on the same few cores are slowed by nothing else), then all ranks meet
in an allreduce. --slow-rank computes --slower times as long (1.4: 40% longer);
with --all-slower-after N every rank computes --slower times as long from step N on (the whole
job slows down: no straggler)."""

import argparse
import time

from mpi4py import MPI

import ringleader


def compute(seconds: float) -> None:
    """The rank's own work: `seconds` outside any collective."""
    time.sleep(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=0.25)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slower", type=float, default=1.4)
    parser.add_argument("--all-slower-after", type=int, default=-1)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    for step in range(1, args.steps + 1):
        slow = rank == args.slow_rank or 0 <= args.all_slower_after <= step
        compute(args.seconds * (args.slower if slow else 1.0))
        comm.allreduce(step)
        ringleader.progress(step=step, total=args.steps)


if __name__ == "__main__":
    main()
