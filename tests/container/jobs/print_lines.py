"""Test job: every rank prints --lines numbered lines of mixed length, some over 4 KiB.

Each line is `R<rank> L<index> <payload> END<index>`; the payload length cycles so lines are
short, long and very long, and every 50th line is preceded by a carriage-return progress bar.
"""

import argparse
import sys

from mpi4py import MPI

parser = argparse.ArgumentParser()
parser.add_argument("--lines", type=int, default=1000)
args, _ = parser.parse_known_args()
rank = MPI.COMM_WORLD.Get_rank()
out = sys.stdout
for index in range(args.lines):
    if index % 50 == 0:
        out.write("progress 10%\rprogress 50%\rprogress 100%\n")
    size = (index * 997) % 9000 if index % 7 == 0 else index % 120
    out.write(f"R{rank} L{index} {'x' * size} END{index}\n")
    if index % 100 == 0:
        print(f"loss={1.0 / (index + 1):.6f}", file=sys.stderr)
out.flush()
