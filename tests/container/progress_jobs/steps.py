"""A job that counts its steps: --steps steps of --seconds each, every rank at the same pace.

--say api: each rank calls ringleader.progress(step=N, total=--steps) after each step;
--say lines: each rank only prints `step N of M` (for ringleader_step_regex).
"""

import argparse
import time

import ringleader


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--say", choices=("api", "lines"), default="api")
    args = parser.parse_args()
    started = time.monotonic()
    for step in range(1, args.steps + 1):
        # a steady pace: each step ends on its own tick, however late the last one was
        time.sleep(max(started + step * args.seconds - time.monotonic(), 0))
        if args.say == "api":
            ringleader.progress(step=step, total=args.steps)
        else:
            print(f"step {step} of {args.steps}", flush=True)


if __name__ == "__main__":
    main()
