"""A synchronous PyTorch DDP job (gloo on CPU, started the torchrun way): every step each rank
computes --seconds (busy, on its CPU), then a small model's backward whose gradients DDP
allreduces; --slow-rank computes --slower times as long."""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import ringleader


def compute(seconds: float) -> None:
    end = time.perf_counter() + seconds
    total = 0
    while time.perf_counter() < end:
        total += sum(range(1000))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seconds", type=float, default=0.25)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slower", type=float, default=1.4)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(64, 8))
    data = torch.randn(32, 64)
    for step in range(1, args.steps + 1):
        compute(args.seconds * (args.slower if rank == args.slow_rank else 1.0))
        model(data).sum().backward()  # DDP allreduces the gradients: the others wait here
        ringleader.progress(step=step, total=args.steps)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
