"""Probe for bench/restart.py: a small DDP model on CPU (gloo) that fails once and marks the times
a restart is measured by, in wall clock (time.time(); every container runs on one machine).

Every rank prints as soon as its script runs (before it imports torch):

  STARTED launch=<n> rank=<r> at=<t>

and once its first DDP step (forward, backward with gradient allreduce, optimizer step) is done:

  RUNNING attempt=<RINGLEADER_ATTEMPT or TORCHELASTIC_RESTART_COUNT> launch=<n> rank=<r> at=<t>

launch counts this local rank's starts in this container (a file in /tmp): 0 on the first
attempt, 1 after an in-place restart, 0 again in the new containers of a fresh start. torchrun
only counts restarts (TORCHELASTIC_RESTART_COUNT) on the host whose rank failed; the hosts that
restart because the group changed keep 0, so launch is the attempt that holds on every host.

With --fail, rank --fail-rank (default 3, on the second host) prints `FAILING at=<t>` before its
step --fail-step and exits 1, on its first launch only; the other ranks run until the launcher
stops them. Without --fail (or once restarted) every rank runs --steps steps and exits 0.
"""

import argparse
import os
import sys
import time
from pathlib import Path


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fail", type=int, default=0, help="1: fail on the first launch")
    parser.add_argument("--fail-rank", type=int, default=3)
    parser.add_argument("--fail-step", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--step-sleep", type=float, default=0.1, help="seconds per step")
    return parser.parse_args()


def next_launch(local_rank: str) -> int:
    """How many times this local rank started before in this container (and count this one)."""
    marker = Path("/tmp/restart_ddp") / f"launches-{local_rank}"
    marker.parent.mkdir(parents=True, exist_ok=True)
    launch = int(marker.read_text()) if marker.exists() else 0
    marker.write_text(str(launch + 1))
    return launch


def say(text: str) -> None:
    """One write of the whole line: the ranks of a host share the launcher's pipe."""
    os.write(1, f"{text}\n".encode())


def main() -> int:
    args = parse_args()
    rank = int(os.environ["RANK"])
    attempt = os.environ.get("RINGLEADER_ATTEMPT", os.environ.get("TORCHELASTIC_RESTART_COUNT"))
    launch = next_launch(os.environ.get("LOCAL_RANK", "0"))
    say(f"STARTED launch={launch} rank={rank} at={time.time():.6f}")
    import torch  # after STARTED: what torch's import costs is the framework's, not the launcher's
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    torch.manual_seed(1234)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    fails = bool(args.fail) and launch == 0 and rank == args.fail_rank
    # A first launch that fails runs until the launcher stops it.
    steps = 10**9 if args.fail and launch == 0 else args.steps
    for step in range(1, steps + 1):
        if fails and step == args.fail_step:
            say(f"FAILING at={time.time():.6f}")
            os._exit(1)
        inputs, labels = torch.randn(16, 32), torch.randint(0, 10, (16,))
        optimizer.zero_grad()
        loss_fn(model(inputs), labels).backward()
        optimizer.step()
        if step == 1:
            say(f"RUNNING attempt={attempt} launch={launch} rank={rank} at={time.time():.6f}")
        time.sleep(args.step_sleep)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
