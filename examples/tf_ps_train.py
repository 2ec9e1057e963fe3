r"""ringleader's TensorFlow parameter-server demo: linear regression on synthetic data (CPU).

Runs in the roles ringleader (like SageMaker's TensorFlow container) gives it in TF_CONFIG:
  - SageMaker's layout (`ringleader_tf_roles` master, the default): the script runs as `master`
    and as every `worker`, in TF1 style (between-graph replication, variables placed on the
    parameter servers, MonitoredTrainingSession; the master is the chief);
  - `ringleader_tf_roles` chief: the script runs only as `chief` and drives the workers through
    TF2's ParameterServerStrategy and a ClusterCoordinator.
Parameter servers (and, with chief roles, the workers) are servers ringleader starts itself.
On one host SageMaker (and ringleader) sets no TF_CONFIG and starts no parameter server: the
script then trains on its own.
Every few steps it prints `step N loss=L`, which a metric definition such as
`loss=([0-9.]+)` picks up. Image ringleader:tensorflow (`make image-tensorflow`):

  .venv/bin/ringleader local --image ringleader:tensorflow --distribution parameter_server \
      --source-dir examples --entry-point tf_ps_train.py --setting tf_roles=chief

`--fail-task worker:0 --fail-code 3` makes that task exit 3 at step --fail-step (0: at once).
"""

import argparse
import json
import os
import sys
import time

import tensorflow as tf

FEATURES = 8


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--log-interval", type=int, default=50)
    parser.add_argument("--model_dir", default=None, help="sent by the SDK's TensorFlow estimator")
    parser.add_argument("--fail-task", default=None, help="e.g. worker:0")
    parser.add_argument("--fail-code", type=int, default=1)
    parser.add_argument("--fail-step", type=int, default=20, help="0: before training")
    return parser.parse_args()


def synthetic_batch(batch_size: int) -> tuple[tf.Tensor, tf.Tensor]:
    true_weights = tf.range(1.0, FEATURES + 1.0)[:, None] / FEATURES
    x = tf.random.normal([batch_size, FEATURES])
    return x, tf.matmul(x, true_weights) + 0.5


def maybe_fail(args: argparse.Namespace, role: str, step: int) -> None:
    if role == args.fail_task and step == args.fail_step:
        print(f"{role} failing on purpose with code {args.fail_code}", file=sys.stderr, flush=True)
        sys.exit(args.fail_code)


def train_with_coordinator(args: argparse.Namespace) -> None:
    """TF2: the chief schedules steps on the workers; variables live on the parameter servers."""
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        weights = tf.Variable(tf.zeros([FEATURES, 1]), name="weights")
        bias = tf.Variable(0.0, name="bias")

    def dataset_fn(_context: tf.distribute.InputContext) -> tf.data.Dataset:
        return (
            tf.data.Dataset.from_tensors(0).repeat().map(lambda _: synthetic_batch(args.batch_size))
        )

    @tf.function
    def per_worker_dataset_fn() -> tf.distribute.DistributedDataset:
        return strategy.distribute_datasets_from_function(dataset_fn)

    iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))

    @tf.function
    def step_fn(batches: tf.distribute.DistributedIterator) -> tf.Tensor:
        def replica_fn(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, weights) + bias - y))
            grad_w, grad_b = tape.gradient(loss, [weights, bias])
            weights.assign_sub(args.lr * grad_w)
            bias.assign_sub(args.lr * grad_b)
            return loss

        x, y = next(batches)
        losses = strategy.run(replica_fn, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)

    started = interval_start = time.perf_counter()
    interval_steps = 0
    for step in range(1, args.steps + 1):
        maybe_fail(args, "chief:0", step)
        result = coordinator.schedule(step_fn, args=(iterator,))
        interval_steps += 1
        if step % args.log_interval == 0 or step == args.steps:
            coordinator.join()
            # every scheduled step is one batch on some worker: the job's throughput
            now = time.perf_counter()
            rate = interval_steps * args.batch_size / (now - interval_start)
            print(
                f"step {step} loss={float(result.fetch()):.4f} samples_per_sec={rate:.1f}",
                flush=True,
            )
            interval_start, interval_steps = now, 0
    coordinator.join()
    rate = args.steps / (time.perf_counter() - started)
    print(f"done: {args.steps} steps ({rate:.1f} steps/s)", flush=True)


def train_between_graph(args: argparse.Namespace, config: dict, role: str) -> None:
    """TF1 style, SageMaker's layout: master and workers each run this graph; the master is
    the chief; the variables live on the parameter servers."""
    tf.compat.v1.disable_eager_execution()
    task = config["task"]
    cluster = tf.train.ClusterSpec(config["cluster"])
    server = tf.distribute.Server(cluster, job_name=task["type"], task_index=task["index"])
    device = f"/job:{task['type']}/task:{task['index']}"
    setter = tf.compat.v1.train.replica_device_setter(worker_device=device, cluster=cluster)
    with tf.compat.v1.device(setter):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        x, y = synthetic_batch(args.batch_size)
        weights = tf.compat.v1.get_variable("weights", [FEATURES, 1])
        bias = tf.compat.v1.get_variable("bias", [], initializer=tf.compat.v1.zeros_initializer())
        loss = tf.reduce_mean(tf.square(tf.matmul(x, weights) + bias - y))
        train = tf.compat.v1.train.GradientDescentOptimizer(args.lr).minimize(
            loss, global_step=global_step
        )
    # Only the parameter servers and this task: a worker must not wait for the others.
    session_config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", device])
    hooks = [tf.compat.v1.train.StopAtStepHook(last_step=args.steps)]
    with tf.compat.v1.train.MonitoredTrainingSession(
        master=server.target,
        is_chief=task["type"] == "master",
        hooks=hooks,
        config=session_config,
    ) as session:
        done = 0
        started = interval_start = time.perf_counter()
        while not session.should_stop():
            _, value, step = session.run([train, loss, global_step])
            done += 1
            maybe_fail(args, role, done)
            if done % args.log_interval == 0:
                # each task trains on its own: its own share of the job's throughput
                now = time.perf_counter()
                rate = args.log_interval * args.batch_size / (now - interval_start)
                print(
                    f"step {step} loss={value:.4f} samples_per_sec_per_worker={rate:.1f}",
                    flush=True,
                )
                interval_start = now
    rate = done / (time.perf_counter() - started)
    print(f"done: {role} ran {done} steps ({rate:.1f} steps/s)", flush=True)


def train_alone(args: argparse.Namespace) -> None:
    """One host: no cluster, the same model trained eagerly in this process."""
    weights = tf.Variable(tf.zeros([FEATURES, 1]))
    bias = tf.Variable(0.0)
    optimizer = tf.keras.optimizers.SGD(args.lr)
    started = interval_start = time.perf_counter()
    for step in range(1, args.steps + 1):
        maybe_fail(args, "master:0", step)
        x, y = synthetic_batch(args.batch_size)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, weights) + bias - y))
        variables = [weights, bias]
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        if step % args.log_interval == 0:
            now = time.perf_counter()
            rate = args.log_interval * args.batch_size / (now - interval_start)
            print(f"step {step} loss={float(loss):.4f} samples_per_sec={rate:.1f}", flush=True)
            interval_start = now
    rate = args.steps / (time.perf_counter() - started)
    print(f"done: alone ran {args.steps} steps ({rate:.1f} steps/s)", flush=True)


def main() -> None:
    args = parse_args()
    if "TF_CONFIG" not in os.environ:
        print("no TF_CONFIG: training alone", flush=True)
        train_alone(args)
        return
    config = json.loads(os.environ["TF_CONFIG"])
    task = config["task"]
    role = f"{task['type']}:{task['index']}"
    print(f"TF_CONFIG {role} {json.dumps(config, sort_keys=True)}", flush=True)
    maybe_fail(args, role, 0)
    if task["type"] == "chief":
        train_with_coordinator(args)
    else:
        train_between_graph(args, config, role)


if __name__ == "__main__":
    main()
