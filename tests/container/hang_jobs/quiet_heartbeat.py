"""A job that is quiet by design and says so with heartbeats: it must outlive the hang timeout.

Every rank prints one line, then prints nothing for --quiet-seconds (give 2.5 x the
ringleader_hang_timeout), then prints `done rank R after Q s quiet` and exits 0. While quiet:
  first half   every rank calls ringleader.progress() once a second (the Python way);
  second half  only rank --touch-rank heartbeats, with `touch "$RINGLEADER_PROGRESS_FILE"` in a
               shell (the way for scripts that are not Python); the others are silent.
Each half is longer than the timeout, so each way alone has to keep the job alive.
"""

import argparse
import os
import subprocess
import time

import ringleader


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quiet-seconds", type=float, default=50.0)
    parser.add_argument("--touch-rank", type=int, default=1)
    return parser.parse_args()


def rank_number() -> int:
    """The rank under mpirun (Open MPI's variable) or the torchrun way (RANK)."""
    return int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))


def touch_progress_file() -> None:
    # check=True: a rank environment without the variable fails the job instead of passing it
    subprocess.run(["sh", "-c", 'touch "$RINGLEADER_PROGRESS_FILE"'], check=True)


def main() -> None:
    args = parse_args()
    rank = rank_number()
    print(f"rank {rank} going quiet for {args.quiet_seconds:g} s", flush=True)
    started = time.monotonic()
    half = started + args.quiet_seconds / 2
    end = started + args.quiet_seconds
    while (now := time.monotonic()) < end:
        if now < half:
            ringleader.progress()
        elif rank == args.touch_rank:
            touch_progress_file()
        time.sleep(min(1.0, end - now))  # a heartbeat a second: the job's pace, not a wait
    print(f"done rank {rank} after {time.monotonic() - started:.1f} s quiet", flush=True)


if __name__ == "__main__":
    main()
