"""A hung mpi4py job: one rank stuck in its own code while the others wait in an allreduce.

Every rank allreduces its rank number and prints `step N rank R allreduce=S` for --steps
steps. Then rank --rank-to-hang calls load_batch_forever(), a data loader that never returns
and never prints, while every other rank blocks in the next allreduce: the hang of issue 25.

  --stall-seconds S   load_batch_forever() gives up after S seconds instead, and every rank
                      then runs --steps-after more steps and prints "done" (the Ctrl-\\ test:
                      the job must go on after its stacks are printed)
"""

import argparse
import time

from mpi4py import MPI


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="steps before the hang")
    parser.add_argument("--rank-to-hang", type=int, default=4)
    parser.add_argument("--stall-seconds", type=float, default=0.0, help="0: forever")
    parser.add_argument("--steps-after", type=int, default=3)
    return parser.parse_args()


def load_batch_forever(stall_seconds: float) -> None:
    """A data loader waiting for a batch that never comes: quiet, never in MPI."""
    deadline = time.monotonic() + stall_seconds if stall_seconds > 0 else None
    while deadline is None or time.monotonic() < deadline:
        time.sleep(0.1)


def train_step(comm: MPI.Intracomm, step: int) -> None:
    rank = comm.Get_rank()
    total = comm.allreduce(rank, op=MPI.SUM)
    print(f"step {step} rank {rank} allreduce={total}", flush=True)


def main() -> None:
    args = parse_args()
    comm = MPI.COMM_WORLD
    for step in range(1, args.steps + 1):
        train_step(comm, step)
    if comm.Get_rank() == args.rank_to_hang:
        load_batch_forever(args.stall_seconds)
    for step in range(args.steps + 1, args.steps + args.steps_after + 1):
        train_step(comm, step)
    print(f"done rank {comm.Get_rank()}", flush=True)


if __name__ == "__main__":
    main()
