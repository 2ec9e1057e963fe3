"""A hung heterogeneous-cluster job: the host outside the distribution stuck in its own code
while the distributed ranks wait for the data it should have prepared.

Hosts of the distribution's instance groups (SM_DISTRIBUTION_INSTANCE_GROUPS) allreduce their
rank number with mpi4py and print `step N rank R allreduce=S` for --steps steps, then wait in
wait_for_data() for the file --data-ready names, polling quietly. The host outside them (a
data group) prints `step N host H prepared part N` for --steps steps, then calls
prepare_data_forever(): preprocessing that never returns and never prints, so it never writes
that file (which, on a real cluster, would be on a shared file system; the fake hosts share
none, and it is never written anyway).
"""

import argparse
import json
import os
import time
from pathlib import Path


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="steps before the hang")
    parser.add_argument("--data-ready", default="/opt/ml/input/data/shared/ready")
    return parser.parse_args()


def prepare_data_forever() -> None:
    """Preprocessing that never finishes: quiet, in no collective."""
    while True:
        time.sleep(0.1)


def wait_for_data(ready: Path) -> None:
    """Wait, quietly, for the plain host's data. A long sleep between checks: a stack taken now
    is in the sleep, on every rank alike."""
    while not ready.exists():
        time.sleep(1.0)


def distributed_part(steps: int, ready: Path) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    for step in range(1, steps + 1):
        total = comm.allreduce(rank, op=MPI.SUM)
        print(f"step {step} rank {rank} allreduce={total}", flush=True)
    wait_for_data(ready)
    print(f"done rank {rank}", flush=True)


def plain_part(steps: int) -> None:
    host = os.environ["SM_CURRENT_HOST"]
    for step in range(1, steps + 1):
        print(f"step {step} host {host} prepared part {step}", flush=True)
    prepare_data_forever()


def main() -> None:
    args = parse_args()
    group = os.environ["SM_CURRENT_INSTANCE_GROUP"]
    if group in json.loads(os.environ["SM_DISTRIBUTION_INSTANCE_GROUPS"]):
        distributed_part(args.steps, Path(args.data_ready))
    else:
        plain_part(args.steps)


if __name__ == "__main__":
    main()
