"""A hung Horovod job: one rank stops submitting tensors while the others allreduce.

Every rank allreduces its rank number with horovod.torch and prints `step N rank R
allreduce=S` for --steps steps; then rank --rank-to-hang calls prefetch_forever() (its own
code, never returning, never printing) and submits no more tensors, while every other rank
blocks in the next hvd.allreduce, waiting for Horovod's coordinator to see that tensor from
every rank. Horovod itself never ends such a job (its stall inspector only warns, after 60 s).
"""

import argparse
import time

import horovod.torch as hvd
import torch


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="steps before the hang")
    parser.add_argument("--rank-to-hang", type=int, default=4)
    return parser.parse_args()


def prefetch_forever() -> None:
    """Prefetching that never finishes: quiet, and no tensor submitted to Horovod."""
    while True:
        time.sleep(0.1)


def train_step(step: int, rank: int) -> None:
    total = hvd.allreduce(torch.tensor([float(rank)]), name=f"step{step}", op=hvd.Sum)
    print(f"step {step} rank {rank} allreduce={total.item():g}", flush=True)


def main() -> None:
    args = parse_args()
    hvd.init()
    rank = hvd.rank()
    for step in range(1, args.steps + 1):
        train_step(step, rank)
    if rank == args.rank_to_hang:
        prefetch_forever()
    train_step(args.steps + 1, rank)  # the tensor rank --rank-to-hang never submits
    hvd.shutdown()


if __name__ == "__main__":
    main()
