"""A job where every rank deadlocks in its own code, in no collective.

Every rank allreduces its rank number (mpi4py) and prints `step N rank R allreduce=S` for
--steps steps, then calls wait_forever(), which takes a non-reentrant lock it already holds:
each rank waits on itself, forever and quietly, all in the same place.
"""

import argparse
import threading

from mpi4py import MPI


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="steps before the deadlock")
    return parser.parse_args()


def wait_forever(lock: threading.Lock) -> None:
    with lock:
        lock.acquire()  # the same thread already holds it: a self-deadlock


def main() -> None:
    args = parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    for step in range(1, args.steps + 1):
        total = comm.allreduce(rank, op=MPI.SUM)
        print(f"step {step} rank {rank} allreduce={total}", flush=True)
    wait_forever(threading.Lock())


if __name__ == "__main__":
    main()
