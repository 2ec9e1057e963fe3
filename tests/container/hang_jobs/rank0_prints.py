"""A job whose every rank makes progress but only rank 0 prints: it must not be called hung.

Every rank allreduces its rank number (mpi4py) every --interval seconds for --seconds (give
2.5 x the ringleader_hang_timeout); only rank 0 prints `step N allreduce=S`. Rank 0's clock
decides when to stop (broadcast each step, so every rank stops after the same step); rank 0
then prints "done after N steps" and every rank exits 0.
"""

import argparse
import time

from mpi4py import MPI


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=50.0)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds of work per step")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    started = time.monotonic()
    step = 0
    finished = False
    while not finished:
        step += 1
        time.sleep(args.interval)  # the step's work
        total = comm.allreduce(rank, op=MPI.SUM)
        if rank == 0:
            print(f"step {step} allreduce={total}", flush=True)
        finished = comm.bcast(time.monotonic() - started >= args.seconds if rank == 0 else None)
    if rank == 0:
        print(f"done after {step} steps", flush=True)


if __name__ == "__main__":
    main()
