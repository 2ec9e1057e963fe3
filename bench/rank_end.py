"""What the rank wrappers add to a job's end: N ranks on one machine ending at one instant.

At a job's end every rank exits at about the same moment, and under ringleader each rank's
wrapper ends with it (its pumps drain, its record goes to the host agent, it exits); mpirun
returns only once all of them have. This measures that burst alone, in one container of the
image, without MPI: N children that each print one line and exit at a shared instant T, either
started bare or each under `python -m ringleader.rank` talking to a real host agent
(`ringleader.wire.agent.HostAgent`). It prints, per N, the time from T until every process
started has been reaped: medians of --rounds rounds whose order alternates.

Usage (the lock keeps it off others' heavy Docker runs):
  flock /tmp/ringleader-docker.lock .venv/bin/python bench/rank_end.py [--ranks 64 256]
      [--rounds 5] [--image ringleader:latest]
"""

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PYTHON = "/opt/ringleader/venv/bin/python3"  # the image's venv, where ringleader is installed
LATE_EXIT = 9  # a child that was not running before T: the allowance was too short
# Each child sleeps until T, prints its last line and exits; started after T it exits LATE_EXIT.
CHILD = (
    "import sys, time\n"
    "instant = float(sys.argv[1])\n"
    f"if time.time() >= instant: sys.exit({LATE_EXIT})\n"
    "time.sleep(instant - time.time())\n"
    "print('end', flush=True)\n"
)
# The start-up allowance before T: a wrapper costs about 60 ms of CPU to start on a 2-core
# machine, and the children start only once the processes before them have.
START_SECONDS = 3.0
START_SECONDS_PER_RANK = 0.1


# ---- inside the container -------------------------------------------------------------------


def burst(ranks: int, wrapped: bool, agent: Path, workdir: Path) -> float:
    """Seconds from T until all `ranks` processes have been reaped."""
    instant = time.time() + START_SECONDS + START_SECONDS_PER_RANK * ranks
    processes = []
    for rank in range(ranks):
        command = [PYTHON, "-c", CHILD, repr(instant)]
        if wrapped:
            command = [
                *(PYTHON, "-m", "ringleader.rank", "--agent", str(agent)),
                *("--host-env", str(workdir / "absent.json"), "--log-dir", str(workdir / "logs")),
                *("--", *command),
            ]
        env = {**os.environ, "RINGLEADER_RANK": str(rank), "RINGLEADER_RUN_DIR": str(workdir)}
        processes.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL))
    codes = [process.wait() for process in processes]
    ended = time.time() - instant
    late = sum(code == LATE_EXIT for code in codes)
    if late or any(codes):
        sys.exit(f"{late} of {ranks} ranks started after the instant; codes {set(codes)}")
    return ended


def inside(ranks: list[int], rounds: int) -> None:
    from ringleader.wire.agent import HostAgent
    from ringleader.wire.events import Event, RankEnded

    events: queue.Queue[Event] = queue.Queue()
    results: dict[str, dict[int, list[float]]] = {"bare": {}, "wrapped": {}}
    with tempfile.TemporaryDirectory() as folder:
        workdir = Path(folder)
        agent = workdir / "agent.sock"
        host_agent = HostAgent(agent, events, lambda frame: None)
        for round_number in range(1, rounds + 1):
            for count in ranks:
                order = (False, True) if round_number % 2 else (True, False)
                for wrapped in order:
                    seconds = burst(count, wrapped, agent, workdir)
                    reported = 0
                    while not events.empty():
                        reported += isinstance(events.get_nowait(), RankEnded)
                    if wrapped and reported != count:
                        sys.exit(f"the host agent got {reported} of {count} ranks' ends")
                    label = "wrapped" if wrapped else "bare"
                    results[label].setdefault(count, []).append(seconds)
                    print(
                        f"... round {round_number}/{rounds}: {count} ranks {label}: "
                        f"{seconds:.3f} s",
                        file=sys.stderr,
                        flush=True,
                    )
        host_agent.close()
    print(json.dumps(results))


# ---- on this machine ------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--image", default="ringleader:latest")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        inside(args.ranks, args.rounds)
        return 0
    command = [
        *("docker", "run", "--rm", "--entrypoint", PYTHON),
        *("-v", f"{Path(__file__).resolve()}:/bench/rank_end.py:ro"),
        *(args.image, "/bench/rank_end.py", "--inside", "--rounds", str(args.rounds)),
        *("--ranks", *map(str, args.ranks)),
    ]
    result = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed with code {result.returncode}")
    results: dict[str, dict[str, list[float]]] = json.loads(result.stdout)
    print(
        f"{os.cpu_count()} CPUs; seconds from the instant every rank ends until all are reaped, "
        f"median of {args.rounds} alternating rounds"
    )
    print(f"{'ranks':>6}{'bare':>10}{'wrapped':>10}{'added':>10}{'per rank':>12}")
    for count in map(str, args.ranks):
        bare = statistics.median(results["bare"][count])
        wrapped = statistics.median(results["wrapped"][count])
        added = wrapped - bare
        print(
            f"{count:>6}{bare:>10.3f}{wrapped:>10.3f}{added:>10.3f}"
            f"{added / int(count) * 1000:>10.2f}ms"
        )
    for label, runs in results.items():
        for count, seconds in runs.items():
            print(f"  {label} {count}: " + ", ".join(f"{each:.3f}" for each in seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
