"""Stress probe: busy-loop for --seconds, printing --rate lines per second (whole CPU, no sleep)."""

import argparse
import os
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=int, default=20_000, help="lines per second")
    args = parser.parse_args()
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
    out = sys.stdout
    start = time.monotonic()
    written = 0
    while (elapsed := time.monotonic() - start) < args.seconds:
        due = int(elapsed * args.rate)
        while written < due:
            out.write(f"rank {rank} line {written} loss={written % 97 / 97:.4f}\n")
            written += 1
        out.flush()  # and then spin: the CPU stays busy between batches
    print(f"rank {rank} wrote {written} lines", flush=True)


if __name__ == "__main__":
    main()
