"""A PyTorch DDP job (gloo on CPU, started as torch_distributed): every step each rank computes
--seconds between its forward and its backward (a sleep stands in for the work, so that ranks on
the same few cores are slowed by nothing else), then its backward's gradient allreduce waits for
every rank's. --slow-rank computes --slower times as long (1.4: 40% longer)."""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import ringleader


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slower", type=float, default=1.4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DistributedDataParallel(nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.randn(8, 16)
    for step in range(1, args.steps + 1):
        optimizer.zero_grad()
        loss = model(inputs).square().mean()
        time.sleep(args.seconds * (args.slower if rank == args.slow_rank else 1.0))
        loss.backward()  # DDP's allreduce of the gradients: waits for every rank
        optimizer.step()
        ringleader.progress(step=step, total=args.steps)
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank} of {os.environ['WORLD_SIZE']} done", flush=True)


if __name__ == "__main__":
    main()
