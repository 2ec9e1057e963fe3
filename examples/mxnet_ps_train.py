"""MXNet (Gluon) with parameter servers: the baseline the MXNet posts compare Horovod against.
`kvstore='dist_sync'`: every host's worker pushes its gradients to the servers and pulls the
averaged weights; SageMaker's MXNet estimator with
`distribution={'parameter_server': {'enabled': True}}` starts the scheduler and servers, and so
does ringleader (in an image with MXNet, e.g. ringleader:mxnet):

    ringleader local --image ringleader:mxnet --distribution parameter_server \\
        --source-dir examples --entry-point mxnet_ps_train.py -- --epochs 3

Each worker trains a small MLP on its own slice of a synthetic classification task. ps-lite
numbers the workers in the order they register, not by host, so the first host's worker (as in
SageMaker's MXNet examples) prints the loss per epoch and saves the model.
`--fail-rank R --fail-code C` makes worker R (the kvstore's rank) exit with C in the second
epoch.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import mxnet as mx
from mxnet import autograd, gluon


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batches", type=int, default=20, help="batches per epoch and worker")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--fail-rank", type=int, default=None)
    parser.add_argument("--fail-code", type=int, default=1)
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    kv = mx.kv.create("dist_sync")
    rank, workers = kv.rank, kv.num_workers
    hosts = json.loads(os.environ.get("SM_HOSTS", "[]"))
    first_host = not hosts or os.environ.get("SM_CURRENT_HOST") == hosts[0]
    ctx = mx.cpu()
    mx.random.seed(args.seed)  # the same teacher on every worker
    teacher = mx.nd.random.normal(shape=(args.features, args.classes), ctx=ctx)
    mx.random.seed(args.seed * 1000 + rank + 1)  # each worker its own data

    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(args.classes))
    net.initialize(mx.init.Xavier(), ctx=ctx)
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": args.lr}, kvstore=kv)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    if first_host:
        print(f"training on {workers} workers with {kv.type}", flush=True)

    started = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        epoch_start = time.perf_counter()
        total = 0.0
        for batch in range(args.batches):
            if rank == args.fail_rank and epoch == 2 and batch == 0:
                print(
                    f"worker {rank} failing on purpose with code {args.fail_code}", file=sys.stderr
                )
                sys.exit(args.fail_code)
            x = mx.nd.random.normal(shape=(args.batch_size, args.features), ctx=ctx)
            y = mx.nd.argmax(mx.nd.dot(x, teacher), axis=1)
            with autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            trainer.step(args.batch_size * workers)
            total += loss.mean().asscalar()
        # dist_sync: every worker's step waits for all, so this is the job's throughput
        rate = args.batches * args.batch_size * workers / (time.perf_counter() - epoch_start)
        if first_host:
            print(
                f"epoch {epoch} loss={total / args.batches:.4f} samples_per_sec={rate:.1f}",
                flush=True,
            )
    mx.nd.waitall()
    if first_host:
        model_dir = Path(args.model_dir)
        model_dir.mkdir(parents=True, exist_ok=True)
        net.export(str(model_dir / "mlp"))
        seconds = time.perf_counter() - started
        print(f"done: {args.epochs} epochs on {workers} workers in {seconds:.1f} s")


if __name__ == "__main__":
    main()
