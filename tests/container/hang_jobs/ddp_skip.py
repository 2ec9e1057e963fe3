"""A hung PyTorch job (gloo): one rank never enters the allreduce the others wait in.

Started the torchrun way (RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in the environment:
ringleader's torch_distributed, or torchrun itself). Every rank all_reduces its rank number
and prints `step N rank R allreduce=S` for --steps steps; then rank --rank-to-hang calls
tokenize_forever() (its own preprocessing, never returning, never printing) instead of the
next all_reduce, in which every other rank blocks.

  --gloo-timeout S   init_process_group's timeout: how long gloo lets a collective wait before
                     it raises. Default 3600 s, so that gloo does not end the hang before the
                     launcher does; 0 leaves torch's own default (30 minutes for gloo).
"""

import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="steps before the hang")
    parser.add_argument("--rank-to-hang", type=int, default=4)
    parser.add_argument("--gloo-timeout", type=float, default=3600.0, help="seconds; 0: torch's")
    return parser.parse_args()


def tokenize_forever() -> None:
    """Preprocessing that never finishes: quiet, and never in a collective."""
    while True:
        time.sleep(0.1)


def train_step(step: int, rank: int) -> None:
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    print(f"step {step} rank {rank} allreduce={total.item():g}", flush=True)


def main() -> None:
    args = parse_args()
    if args.gloo_timeout > 0:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.gloo_timeout))
    else:
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    for step in range(1, args.steps + 1):
        train_step(step, rank)
    if rank == args.rank_to_hang:
        tokenize_forever()
    train_step(args.steps + 1, rank)  # the allreduce that rank --rank-to-hang never enters


if __name__ == "__main__":
    main()
    # Not reached while the hang lasts. Leave without the interpreter's teardown, which can
    # abort with a live gloo process group (see examples/ddp_train.py's leave()).
    sys.stdout.flush()
    os._exit(0)
