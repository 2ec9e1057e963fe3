"""Benchmark probe for bench/slurm.py (mpi4py): every rank prints `BENCH start <rank> <time>` as
it starts, does --rounds allreduces and prints `BENCH end <rank> <time>` just before it exits.
With --fail-rank R, rank R prints `BENCH fail <rank> <time>` after the first allreduce and exits
--fail-code at once (os._exit: no MPI_Finalize, which could wait for the other ranks).
The times are time.time() on the rank's node."""

import argparse
import os
import sys
import time

from mpi4py import MPI


def mark(what: str, rank: int) -> None:
    print(f"BENCH {what} {rank} {time.time():.6f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fail-rank", type=int, default=None)
    parser.add_argument("--fail-code", type=int, default=3)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    mark("start", rank)
    expected = size * (size - 1) // 2
    for number in range(1, args.rounds + 1):
        total = comm.allreduce(rank, op=MPI.SUM)
        if total != expected:
            print(f"rank {rank}: allreduce {number} gave {total}, not {expected}", flush=True)
            sys.exit(1)
        if rank == args.fail_rank:
            mark("fail", rank)
            sys.stderr.flush()
            os._exit(args.fail_code)
    comm.Barrier()
    mark("end", rank)


if __name__ == "__main__":
    main()
