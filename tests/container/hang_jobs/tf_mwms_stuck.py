"""A hung TensorFlow MultiWorkerMirroredStrategy job: one worker stuck in its own code while
the others wait in a collective all-reduce.

One worker per host; a worker's rank is its TF_CONFIG task index. Every worker all-reduces its
rank number across the workers (a tf.function running the replica context's all_reduce) and
prints `step N rank R allreduce=S` for --steps steps. Then worker --rank-to-hang calls
read_shard_forever(), an input reader that never returns and never prints, while every other
worker blocks in the next all-reduce.
"""

import argparse
import json
import os
import time

import tensorflow as tf


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="steps before the hang")
    parser.add_argument("--rank-to-hang", type=int, default=2)
    return parser.parse_args()


def read_shard_forever() -> None:
    """An input reader waiting for a shard that never comes: quiet, never in TensorFlow."""
    while True:
        time.sleep(0.1)


def main() -> None:
    args = parse_args()
    rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    @tf.function
    def all_reduce() -> tf.Tensor:
        def replica_fn() -> tf.Tensor:
            context = tf.distribute.get_replica_context()
            return context.all_reduce(tf.distribute.ReduceOp.SUM, tf.constant(float(rank)))

        return strategy.run(replica_fn)

    def train_step(step: int) -> None:
        total = all_reduce()
        print(f"step {step} rank {rank} allreduce={float(total):g}", flush=True)

    for step in range(1, args.steps + 1):
        train_step(step)
    if rank == args.rank_to_hang:
        read_shard_forever()
    train_step(args.steps + 1)
    print(f"done rank {rank}", flush=True)


if __name__ == "__main__":
    main()
