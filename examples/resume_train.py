r"""A PyTorch DDP job that resumes from its last checkpoint: what a restart in place needs.

Rank 0 saves a checkpoint (the model, the optimizer and the step) to /opt/ml/checkpoints every
--checkpoint-every steps; on start, rank 0 loads the newest one, and every rank continues from
its step (DDP hands rank 0's weights to the others as it wraps the model). With
`--max-restarts`, ringleader starts every rank again after a failure, without restarting the
containers, and /opt/ml/checkpoints is as the last attempt left it:

  .venv/bin/ringleader local --image ringleader:horovod --distribution torch_distributed \
      --hosts 3 --processes-per-host 2 --max-restarts 2 \
      --source-dir examples --entry-point resume_train.py --hyperparameter fail-once-at=12

Each rank prints its attempt (RINGLEADER_ATTEMPT, and torch's TORCHELASTIC_RESTART_COUNT)
and the step it starts from; rank 0 prints `step N loss=... samples_per_s=...` every
--log-interval steps and `checkpoint saved at step N` after each save.

--fail-once-at STEP: rank --fail-rank exits with --fail-code before STEP, once: it leaves a
marker in its host's model directory first, so the next attempt runs through.
"""

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

CHECKPOINT = "checkpoint.pt"
FAILED_ONCE = "failed-once"  # the marker --fail-once-at leaves in the model directory


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--log-interval", type=int, default=5)
    parser.add_argument("--step-sleep", type=float, default=0.05, help="seconds per step")
    parser.add_argument(
        "--checkpoint-dir", default=os.environ.get("SM_CHECKPOINT_DIR", "/opt/ml/checkpoints")
    )
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    parser.add_argument("--fail-once-at", type=int, default=None)
    parser.add_argument("--fail-rank", type=int, default=3)
    parser.add_argument("--fail-code", type=int, default=7)
    return parser.parse_args()


def leave(code: int) -> None:
    """Exit without the interpreter's teardown, which can abort with Gloo threads alive."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    leave(143)


def load(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """The step the checkpoint was saved at (0 without one); rank 0 only."""
    if not path.is_file():
        return 0
    state = torch.load(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["step"])


def save(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    """Atomically: a rank killed while saving leaves the previous checkpoint whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
    torch.save(state, partial)
    os.replace(partial, path)


def main() -> None:
    args = parse_args()
    signal.signal(signal.SIGTERM, on_sigterm)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234)  # the same teacher on every rank
    teacher = torch.randn(args.features, args.classes)
    model = nn.Linear(args.features, args.classes)
    # Plain SGD keeps no state, so every rank's optimizer matches rank 0's resumed one.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    checkpoint = Path(args.checkpoint_dir) / CHECKPOINT
    start = torch.tensor([load(checkpoint, model, optimizer) if rank == 0 else 0])
    dist.broadcast(start, 0)
    first_step = int(start.item()) + 1
    ddp = DistributedDataParallel(model)  # rank 0's weights, resumed or not, to every rank
    print(
        f"rank {rank} attempt {os.environ.get('RINGLEADER_ATTEMPT')} "
        f"restart_count {os.environ.get('TORCHELASTIC_RESTART_COUNT')} "
        f"starts at step {first_step}",
        flush=True,
    )
    loss_fn = nn.CrossEntropyLoss()
    marker = Path(args.model_dir) / FAILED_ONCE
    interval_start = time.perf_counter()
    for step in range(first_step, args.steps + 1):
        if step == args.fail_once_at and rank == args.fail_rank and not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(f"rank {rank} failed before step {step}\n")
            print(f"rank {rank} failing on purpose before step {step}", file=sys.stderr)
            leave(args.fail_code)
        data = torch.Generator().manual_seed(step * 1000 + rank)
        x = torch.randn(args.batch_size, args.features, generator=data)
        y = (x @ teacher).argmax(dim=1)
        optimizer.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        optimizer.step()
        time.sleep(args.step_sleep)
        if rank == 0 and step % args.log_interval == 0:
            now = time.perf_counter()
            rate = args.log_interval * args.batch_size * world / (now - interval_start)
            print(f"step {step} loss={loss.item():.4f} samples_per_s={rate:.1f}", flush=True)
            interval_start = now
        if rank == 0 and (step % args.checkpoint_every == 0 or step == args.steps):
            save(checkpoint, model, optimizer, step)
            print(f"checkpoint saved at step {step}", flush=True)
    if rank == 0:
        Path(args.model_dir).mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), Path(args.model_dir) / "model.pt")
        print(f"done at step {args.steps}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    leave(0)
