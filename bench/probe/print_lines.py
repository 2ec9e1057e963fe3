"""Job for tests and bench/logs.py: every rank prints --lines numbered lines of mixed length.

Each line is `R<rank> L<index> <payload> END<index>`: short lines, and every --long-every-th
line up to 9 KB long (over 4 KiB); every 50th line follows a carriage-return progress bar;
every 100th step a `loss=` line goes to stderr.
"""

import argparse
import sys

from mpi4py import MPI

parser = argparse.ArgumentParser()
parser.add_argument("--lines", type=int, default=1000)
parser.add_argument("--long-every", type=int, default=7)
args, _ = parser.parse_known_args()
rank = MPI.COMM_WORLD.Get_rank()
out = sys.stdout
for index in range(args.lines):
    if index % 50 == 0:
        out.write("progress 10%\rprogress 50%\rprogress 100%\n")
    size = (index * 997) % 9000 if index % args.long_every == 0 else index % 120
    out.write(f"R{rank} L{index} {'x' * size} END{index}\n")
    if index % 100 == 0:
        print(f"loss={1.0 / (index + 1):.6f}", file=sys.stderr)
out.flush()
