"""MXNet (Gluon) + Horovod, the seed documents' skeleton on synthetic data: hvd.init(), the
context from the local rank, broadcast_parameters, DistributedTrainer. Run it in ringleader:mxnet:

    ringleader local --image ringleader:mxnet --source-dir examples \\
        --entry-point mxnet_horovod_train.py --processes-per-host 2 \\
        --horovod-timeline --horovod-autotune -- --epochs 3

Each rank trains a small MLP on its own slice of a synthetic classification task and rank 0
prints the loss and accuracy per epoch (averaged over the ranks with hvd.allreduce) and the
job's samples_per_sec (every rank's samples of the epoch over its time).
"""

import argparse
import os
import sys
import time
from pathlib import Path

import horovod.mxnet as hvd
import mxnet as mx
from mxnet import autograd, gluon


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batches", type=int, default=40, help="batches per epoch and rank")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05, help="before scaling by world size")
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--fail-rank", type=int, default=None)
    parser.add_argument("--fail-code", type=int, default=1)
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    # The seeds' choice of context: a GPU per local rank when there are GPUs, else the CPU.
    ctx = mx.gpu(hvd.local_rank()) if mx.context.num_gpus() > 0 else mx.cpu(hvd.local_rank())

    mx.random.seed(args.seed)  # the same teacher on every rank
    teacher = mx.nd.random.normal(shape=(args.features, args.classes), ctx=ctx)
    mx.random.seed(args.seed * 1000 + rank + 1)  # each rank its own data

    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(args.classes))
    net.initialize(mx.init.Xavier(), ctx=ctx)
    net.hybridize()
    net(mx.nd.zeros((1, args.features), ctx=ctx))  # materialise the parameters
    params = net.collect_params()
    hvd.broadcast_parameters(params, root_rank=0)
    trainer = hvd.DistributedTrainer(params, "sgd", {"learning_rate": args.lr * size})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    if rank == 0:
        print(f"training on {size} ranks, context {ctx}", flush=True)

    started = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        epoch_start = time.perf_counter()
        total_loss = mx.nd.zeros((1,), ctx=ctx)
        correct = mx.nd.zeros((1,), ctx=ctx)
        for batch in range(args.batches):
            if rank == args.fail_rank and epoch == 2 and batch == 0:
                print(f"rank {rank} failing on purpose with code {args.fail_code}", file=sys.stderr)
                sys.exit(args.fail_code)
            x = mx.nd.random.normal(shape=(args.batch_size, args.features), ctx=ctx)
            y = mx.nd.argmax(mx.nd.dot(x, teacher), axis=1)
            with autograd.record():
                output = net(x)
                loss = loss_fn(output, y)
            loss.backward()
            trainer.step(args.batch_size)
            total_loss += loss.mean()
            correct += (mx.nd.argmax(output, axis=1) == y).mean()
        mean_loss = hvd.allreduce(total_loss / args.batches, average=True, name="loss")
        accuracy = hvd.allreduce(correct / args.batches, average=True, name="accuracy")
        mean_loss_value, accuracy_value = mean_loss.asscalar(), accuracy.asscalar()  # waits
        # every rank's samples of the epoch over its time: the job's throughput
        rate = args.batches * args.batch_size * size / (time.perf_counter() - epoch_start)
        if rank == 0:
            print(
                f"epoch {epoch} loss={mean_loss_value:.4f} accuracy={accuracy_value:.3f} "
                f"samples_per_sec={rate:.1f}",
                flush=True,
            )
    # MXNet runs operations asynchronously: finish this rank's, then wait for every rank's,
    # before any of them exits (an exiting rank shuts Horovod down under the others' feet, and
    # MXNet's exit hook then fails with "Horovod has been shut down").
    mx.nd.waitall()
    hvd.allreduce(mx.nd.zeros((1,), ctx=ctx), name="done").wait_to_read()
    if rank == 0:
        model_dir = Path(args.model_dir)
        model_dir.mkdir(parents=True, exist_ok=True)
        net.export(str(model_dir / "mlp"))
        print(
            f"done: {args.epochs} epochs on {size} ranks in {time.perf_counter() - started:.1f} s"
        )
    # Horovod (0.28.1) drops the timeline's events still queued when it shuts down, and on a
    # busy host its writer lags: stopping the timeline first writes every one of them.
    hvd.stop_timeline()


if __name__ == "__main__":
    main()
