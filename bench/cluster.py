"""`ringleader cluster run` vs a bare `mpirun -H ...` of the same job on the same "instances"
(containers with only sshd, as in tests/container/test_cluster.py), both launched from inside
the first one, alternating, for several cluster sizes.

  startup   the command started -> the last rank's user code running
  teardown  the last rank's user code ended -> the command returned
The job is bench/probe/probe.py (barrier, --work seconds, barrier), 2 ranks per host. The bare
command is what an expert types: mpirun --allow-run-as-root -np N -H a:2,b:2 -bind-to none
-map-by slot python probe.py. ringleader's includes its preflight and fetching every host's
results.

Usage: .venv/bin/python bench/cluster.py [--hosts 2,4,8] [--rounds 2] [--work 1]
"""

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import docker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.container.instances import Instances

BENCH = Path(__file__).resolve().parent
IMAGE = "ringleader:latest"
PER_HOST = 2


def times(output: str, kind: str) -> list[float]:
    return [float(m) for m in re.findall(rf"BENCH {kind} \d+ (\d+\.\d{{6}})", output)]


def measure(cluster: Instances, argv: list[str], ranks: int) -> tuple[float, float]:
    node = cluster.nodes["node1"].name
    started = time.time()
    done = subprocess.run(
        ["docker", "exec", "-w", "/work", node, *argv], capture_output=True, text=True, check=False
    )
    returned = time.time()
    starts, ends = times(done.stdout, "start"), times(done.stdout, "end")
    if done.returncode != 0 or len(starts) != ranks or len(ends) != ranks:
        sys.exit(f"{argv[0]} failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr}")
    return max(starts) - started, returned - max(ends)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", default="2,4,8")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--work", type=float, default=1.0)
    args = parser.parse_args()
    client = docker.from_env()
    probe = (BENCH / "probe" / "probe.py").read_bytes()
    rows = []
    for count in (int(n) for n in args.hosts.split(",")):
        cluster = Instances(client, IMAGE, count)
        try:
            cluster.put_everywhere("/work/probe.py", probe)
            hosts = ",".join(f"node{i}:{PER_HOST}" for i in range(1, count + 1))
            ranks = count * PER_HOST
            job = ["python", "probe.py", "--work", f"{args.work:g}"]
            commands = {
                "ringleader": ["ringleader", "cluster", "run", "-H", hosts, "--", *job],
                "bare": [
                    "mpirun",
                    "--allow-run-as-root",
                    "-np",
                    str(ranks),
                    "-H",
                    hosts,
                    "-bind-to",
                    "none",
                    "-map-by",
                    "slot",
                    *job,
                ],
            }
            results: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
            for _ in range(args.rounds):
                for name, argv in commands.items():
                    results[name].append(measure(cluster, argv, ranks))
            row = {"hosts": count}
            for name, samples in results.items():
                row[f"{name} startup"] = statistics.median(s for s, _ in samples)
                row[f"{name} teardown"] = statistics.median(t for _, t in samples)
            rows.append(row)
            print(f"{count} hosts: {row}", flush=True)
        finally:
            cluster.remove()
    print()
    print(f"median of {args.rounds} rounds, {PER_HOST} ranks per host, seconds")
    print("| hosts | startup ringleader | bare | ratio | teardown ringleader | bare |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        ratio = row["ringleader startup"] / row["bare startup"]
        print(
            f"| {row['hosts']} | {row['ringleader startup']:.2f} | {row['bare startup']:.2f} | "
            f"{ratio:.2f} | {row['ringleader teardown']:.2f} | {row['bare teardown']:.2f} |"
        )


if __name__ == "__main__":
    main()
