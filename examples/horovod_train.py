r"""ringleader's Horovod demo: a small PyTorch MLP trained data-parallel on synthetic data (CPU).

Every rank draws its own batches from a fixed synthetic task (a random "teacher" network labels
Gaussian inputs; the same teacher on every rank, from --seed), Horovod averages the gradients
(DistributedOptimizer), and rank 0 prints, every --log-interval steps, a line that SageMaker
metric regexes such as `loss=([0-9.]+)` and `throughput=([0-9.]+)` match:

  step 100 loss=0.4321 throughput=2345.6 samples/s

Rank 0 saves the trained weights to $SM_MODEL_DIR/model.pt (default /opt/ml/model).
Needs the image ringleader:horovod (`make image-horovod`). On 3 fake hosts x 2 processes:

  .venv/bin/ringleader local --image ringleader:horovod --hosts 3 --processes-per-host 2 \
      --source-dir examples --entry-point horovod_train.py --mpi-options \
      '-x HOROVOD_TIMELINE=/opt/ml/output/data/timeline.json -x HOROVOD_AUTOTUNE=1
       -x HOROVOD_AUTOTUNE_LOG=/opt/ml/output/data/autotune_log.csv --mca mpi_yield_when_idle 1'

(or --horovod-timeline --horovod-autotune). Fake hosts share the machine's cores without OpenMPI
knowing, so waiting ranks must yield (`mpi_yield_when_idle`); without it each rank busy-polls
and the same 300 steps take about ten times longer. Autotune logs its first data row only after
200 steps (3 warm-up samples, then one row per 5 samples of 10 steps), hence 300 steps.

Options make a chosen rank fail, for trying out how failures are reported:
  --fail-rank 3 --fail-code 7 --fail-step 50   rank 3 exits with code 7 before its step 50
"""

import time

_STARTED = time.perf_counter()

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import horovod.torch as hvd  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

_IMPORTED = time.perf_counter()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="before scaling by world size")
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--log-interval", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    parser.add_argument("--fail-rank", type=int, default=None)
    parser.add_argument("--fail-code", type=int, default=1)
    parser.add_argument("--fail-step", type=int, default=1)
    parser.add_argument("--flood", type=int, default=0, help="extra output lines per step")
    return parser.parse_args()


class Net(nn.Module):
    """Three linear layers; their parameters are the tensors Horovod allreduces."""

    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


class SyntheticTask:
    """Gaussian inputs labelled by a fixed random teacher: learnable, deterministic per seed."""

    def __init__(self, features: int, classes: int, seed: int, rank: int) -> None:
        teacher_rng = torch.Generator().manual_seed(seed)  # the same teacher on every rank
        self.teacher = torch.randn(features, classes, generator=teacher_rng)
        self.rng = torch.Generator().manual_seed(seed * 1000 + rank + 1)  # each rank its own data
        self.features = features

    def batch(self, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(size, self.features, generator=self.rng)
        y = (x @ self.teacher).argmax(dim=1)
        return x, y


def main() -> None:
    args = parse_args()
    hvd.init()
    initialised = time.perf_counter()
    rank, size = hvd.rank(), hvd.size()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed + rank)  # differing initial weights: the broadcast must fix them

    model = Net(args.features, args.hidden, args.classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    broadcast = time.perf_counter()

    task = SyntheticTask(args.features, args.classes, args.seed, rank)
    loss_fn = nn.CrossEntropyLoss()
    if rank == 0:
        parameters = sum(p.numel() for p in model.parameters())
        print(
            f"training {parameters} parameters on {size} ranks for {args.steps} steps, "
            f"batch {args.batch_size} per rank; ready after {broadcast - _STARTED:.1f} s "
            f"(imports {_IMPORTED - _STARTED:.1f} s, hvd.init {initialised - _IMPORTED:.1f} s, "
            f"broadcast {broadcast - initialised:.1f} s)",
            flush=True,
        )

    started = interval_start = time.perf_counter()
    interval_steps = 0
    for step in range(1, args.steps + 1):
        if rank == args.fail_rank and step == args.fail_step:
            print(
                f"rank {rank} failing on purpose with code {args.fail_code} at step {step}",
                file=sys.stderr,
                flush=True,
            )
            sys.exit(args.fail_code)
        if args.flood:
            sys.stdout.write(
                "".join(f"rank {rank} step {step} noise {i}\n" for i in range(args.flood))
            )
            sys.stdout.flush()
        x, y = task.batch(args.batch_size)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        interval_steps += 1
        if step % args.log_interval == 0 or step == args.steps:
            mean_loss = hvd.allreduce(loss.detach(), name="loss", op=hvd.Average).item()
            now = time.perf_counter()
            throughput = interval_steps * args.batch_size * size / (now - interval_start)
            if rank == 0:
                print(
                    f"step {step} loss={mean_loss:.4f} throughput={throughput:.1f} samples/s",
                    flush=True,
                )
            interval_start, interval_steps = now, 0

    elapsed = time.perf_counter() - started
    if rank == 0:
        model_dir = Path(args.model_dir)
        model_dir.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), model_dir / "model.pt")
        print(
            f"done: {args.steps} steps on {size} ranks in {elapsed:.1f} s "
            f"({args.steps * args.batch_size * size / elapsed:.1f} samples/s), "
            f"model saved to {model_dir / 'model.pt'}",
            flush=True,
        )
    # Horovod (0.28.1) drops the timeline's events still queued when it shuts down, and on a
    # busy host its writer lags: stopping the timeline first writes every one of them.
    hvd.stop_timeline()
    hvd.shutdown()


if __name__ == "__main__":
    main()
