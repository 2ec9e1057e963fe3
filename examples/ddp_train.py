r"""ringleader's PyTorch DDP demo: a small MLP trained data-parallel on synthetic data.

Started the torchrun way (`--distribution torch_distributed`): each rank reads torchrun's
environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), joins the process group
with gloo on CPU (nccl when GPUs are found), checks that environment and an allreduce across all
ranks, then trains. Rank 0 prints, every --log-interval steps, a line that SageMaker metric
regexes such as `loss=([0-9.]+)` match:

  step 100 loss=0.4321 steps_per_s=45.6

The same script runs unchanged under `torchrun --nnodes N --nproc_per_node P ...`. Needs the
image ringleader:horovod (PyTorch CPU). On 3 fake hosts x 2 processes:

  .venv/bin/ringleader local --image ringleader:horovod --distribution torch_distributed \
      --hosts 3 --processes-per-host 2 --source-dir examples --entry-point ddp_train.py

Options for trying out how failures are reported:
  --fail-rank 3 --fail-code 7 --fail-step 20   rank 3 exits with code 7 before its step 20
  --raise-rank 3 --fail-step 20                rank 3 raises ValueError inside the @record main
"""

import argparse
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from types import FrameType

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--log-interval", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds per step")
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    parser.add_argument("--fail-rank", type=int, default=None)
    parser.add_argument("--fail-code", type=int, default=1)
    parser.add_argument("--fail-step", type=int, default=1)
    parser.add_argument("--raise-rank", type=int, default=None)
    return parser.parse_args()


def on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    print(f"rank {os.environ.get('RANK')} got SIGTERM", flush=True)
    leave(143)


def leave(code: int) -> None:
    """Exit with `code` without the interpreter's teardown: with a Gloo process group alive,
    or even just created, torch's native threads can make the teardown abort the process
    ("terminate called without an active exception", SIGABRT) instead of exiting with the
    code; seen in about 1 run in 10 on 2 busy cores."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def check_environment(rank: int, world: int) -> None:
    """torchrun's contract, as the script sees it, and one allreduce across every host."""
    local_rank = int(os.environ["LOCAL_RANK"])
    local_world = int(os.environ["LOCAL_WORLD_SIZE"])
    group_rank = int(os.environ["GROUP_RANK"])
    if rank != group_rank * local_world + local_rank:
        raise SystemExit(f"rank {rank}: RANK does not follow GROUP_RANK and LOCAL_RANK")
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    expected = world * (world - 1) / 2
    print(
        f"env rank={rank} local_rank={local_rank} world={world} group_rank={group_rank} "
        f"master={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} "
        f"host={os.environ.get('SM_CURRENT_HOST')} allreduce={total.item():g} "
        f"{'ok' if total.item() == expected else 'WRONG'}",
        flush=True,
    )
    if total.item() != expected:
        raise SystemExit(f"rank {rank}: allreduce gave {total.item()}, expected {expected}")


@record
def main() -> None:
    args = parse_args()
    signal.signal(signal.SIGTERM, on_sigterm)
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{os.environ['LOCAL_RANK']}" if use_cuda else "cpu")
    check_environment(rank, world)

    torch.manual_seed(args.seed)  # the same teacher and initial weights on every rank
    teacher = torch.randn(args.features, args.classes)
    model = nn.Sequential(
        nn.Linear(args.features, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, args.classes),
    ).to(device)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    data = torch.Generator().manual_seed(args.seed * 1000 + rank + 1)

    started = interval_start = time.perf_counter()
    for step in range(1, args.steps + 1):
        if step == args.fail_step and rank == args.fail_rank:
            print(f"rank {rank} failing on purpose with code {args.fail_code}", file=sys.stderr)
            leave(args.fail_code)
        if step == args.fail_step and rank == args.raise_rank:
            raise ValueError(f"rank {rank} raised on purpose at step {step}")
        x = torch.randn(args.batch_size, args.features, generator=data)
        y = (x @ teacher).argmax(dim=1)
        optimizer.zero_grad()
        loss = loss_fn(ddp(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        if args.step_sleep:
            time.sleep(args.step_sleep)
        if step % args.log_interval == 0 or step == args.steps:
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            now = time.perf_counter()
            if rank == 0:
                rate = args.log_interval / (now - interval_start)
                samples = rate * args.batch_size * world  # every rank's batch per step
                print(
                    f"step {step} loss={mean.item() / world:.4f} steps_per_s={rate:.1f} "
                    f"samples_per_sec={samples:.1f}",
                    flush=True,
                )
            interval_start = now
    elapsed = time.perf_counter() - started
    if rank == 0:
        model_dir = Path(args.model_dir)
        model_dir.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), model_dir / "model.pt")
        print(
            f"done: {args.steps} steps on {world} ranks in {elapsed:.2f} s "
            f"({args.steps / elapsed:.1f} steps/s)",
            flush=True,
        )
    dist.barrier()  # every rank is done communicating before any tears down
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()  # @record writes an exception to torchrun's error file, then raises it again
    except Exception:
        traceback.print_exc()
        leave(1)  # not through the teardown, which can turn this exit into a SIGABRT
    leave(0)
