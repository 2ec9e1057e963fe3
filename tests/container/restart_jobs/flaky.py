"""A 3 x 2 mpi4py job that fails, or hangs, in the ways the restart tests need.

Every rank prints `rank R attempt A` (A: RINGLEADER_ATTEMPT), works --seconds, and ends with an
allreduce whose sum it prints (`rank R sum 15`). Rank --fail-rank, depending on --mode:
  once       exits with --fail-code after --seconds, on the first attempt only: it leaves a
             marker in its host's model directory first (the next attempt finds it)
  always     exits with --fail-code after --seconds, on every attempt
  startup    exits with --fail-code at once, and no rank prints anything (no progress)
  hang-once  never reaches the allreduce on the first attempt (the others wait in it)
  segv-once  is killed by SIGSEGV after --seconds on the first attempt, then exits with
             --fail-code after --seconds on every later one
"""

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from mpi4py import MPI

parser = argparse.ArgumentParser()
parser.add_argument(
    "--mode", choices=["once", "always", "startup", "hang-once", "segv-once"], default="once"
)
parser.add_argument("--fail-rank", type=int, default=3)
parser.add_argument("--fail-code", type=int, default=5)
parser.add_argument("--seconds", type=float, default=3.0)
args = parser.parse_args()

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
attempt = os.environ.get("RINGLEADER_ATTEMPT")
failing = rank == args.fail_rank
if args.mode == "startup":
    if failing:
        sys.exit(args.fail_code)
    comm.Barrier()  # silent: the failing rank never comes
print(f"rank {rank} attempt {attempt}", flush=True)
marker = Path(os.environ.get("SM_MODEL_DIR", "/opt/ml/model")) / "failed-once"
if failing and args.mode == "hang-once" and attempt == "0":
    while True:
        time.sleep(1)
time.sleep(args.seconds)
if failing and args.mode == "segv-once":
    if attempt == "0":
        print(f"rank {rank} segfaulting", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    sys.exit(args.fail_code)
if failing and (args.mode == "always" or (args.mode == "once" and not marker.exists())):
    marker.write_text(f"rank {rank} failed on attempt {attempt}\n")
    print(f"rank {rank} failing with code {args.fail_code}", file=sys.stderr, flush=True)
    sys.exit(args.fail_code)
print(f"rank {rank} sum {comm.allreduce(rank)}", flush=True)
