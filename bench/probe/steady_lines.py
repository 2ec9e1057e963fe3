"""Job for bench/leader_cpu.py: every rank prints --rate numbered lines per second for --seconds
seconds, paced in 10 ms ticks, then exits. No MPI calls (mpirun runs it like any program)."""

import argparse
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--rate", type=int, default=2000)
parser.add_argument("--seconds", type=float, default=60.0)
args, _ = parser.parse_known_args()
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
tick = 0.01
per_tick = max(round(args.rate * tick), 1)
total = round(args.rate * args.seconds)
payload = "x" * 40
out = sys.stdout
start = time.monotonic()
index = 0
while index < total:
    batch = min(per_tick, total - index)
    out.write("".join(f"R{rank} L{index + n} {payload} END\n" for n in range(batch)))
    out.flush()
    index += batch
    delay = start + (index / per_tick) * tick - time.monotonic()
    if delay > 0:
        time.sleep(delay)
