r"""ringleader's TensorFlow MultiWorkerMirroredStrategy demo: linear regression, synthetic data.

Every host is a `worker` in TF_CONFIG (port 8890, index in host order, as SageMaker lays it
out); gradients are averaged across the workers by collective all-reduce. Rank 0 (worker 0)
prints `step N loss=L`. Image ringleader:tensorflow:

  .venv/bin/ringleader local --image ringleader:tensorflow \
      --distribution multi_worker_mirrored_strategy --source-dir examples \
      --entry-point tf_mwms_train.py

`--fail-worker 1 --fail-code 3` makes worker 1 exit 3 at step --fail-step.
"""

import argparse
import json
import os
import sys
import time

import tensorflow as tf

FEATURES = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--log-interval", type=int, default=25)
    parser.add_argument("--fail-worker", type=int, default=None)
    parser.add_argument("--fail-code", type=int, default=1)
    parser.add_argument("--fail-step", type=int, default=10)
    args = parser.parse_args()

    config = json.loads(os.environ["TF_CONFIG"])
    index = config["task"]["index"]
    print(f"TF_CONFIG worker:{index} {json.dumps(config, sort_keys=True)}", flush=True)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        mean = tf.VariableAggregation.MEAN  # replica updates are averaged across workers
        weights = tf.Variable(tf.zeros([FEATURES, 1]), aggregation=mean)
        bias = tf.Variable(0.0, aggregation=mean)
    true_weights = tf.range(1.0, FEATURES + 1.0)[:, None] / FEATURES

    @tf.function
    def train_step() -> tf.Tensor:
        def replica_fn() -> tf.Tensor:
            x = tf.random.normal([args.batch_size, FEATURES])
            y = tf.matmul(x, true_weights) + 0.5
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, weights) + bias - y))
            grad_w, grad_b = tape.gradient(loss, [weights, bias])
            weights.assign_sub(args.lr * grad_w)
            bias.assign_sub(args.lr * grad_b)
            return loss

        losses = strategy.run(replica_fn)
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)

    started = interval_start = time.perf_counter()
    interval_steps = 0
    for step in range(1, args.steps + 1):
        if index == args.fail_worker and step == args.fail_step:
            print(f"worker {index} failing on purpose", file=sys.stderr, flush=True)
            sys.exit(args.fail_code)
        loss = train_step()
        interval_steps += 1
        if index == 0 and (step % args.log_interval == 0 or step == args.steps):
            value = float(loss)  # waits for the step: every worker's batch, in sync
            now = time.perf_counter()
            samples = interval_steps * args.batch_size * strategy.num_replicas_in_sync
            rate = samples / (now - interval_start)
            print(f"step {step} loss={value:.4f} samples_per_sec={rate:.1f}", flush=True)
            interval_start, interval_steps = now, 0
    if index == 0:
        rate = args.steps / (time.perf_counter() - started)
        print(
            f"done: {args.steps} steps on {strategy.num_replicas_in_sync} workers "
            f"({rate:.1f} steps/s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
