"""Benchmark probe run on every rank: prints when user code starts and ends (wall clock)."""

import argparse
import sys
import time

from mpi4py import MPI

parser = argparse.ArgumentParser()
parser.add_argument("--work", type=float, default=1.0)
parser.add_argument("--fail-rank", type=int, default=-1)
args, _ = parser.parse_known_args()

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
print(f"BENCH start {rank} {time.time():.6f}", flush=True)
comm.Barrier()
time.sleep(args.work)
if rank == args.fail_rank:
    print(f"BENCH fail {rank} {time.time():.6f}", flush=True)
    sys.exit(3)
comm.Barrier()
print(f"BENCH end {rank} {time.time():.6f}", flush=True)
