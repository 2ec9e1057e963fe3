r"""ringleader's TensorFlow + Horovod demo: a small Keras MLP trained data-parallel (CPU).

The shape of the seed posts' `horovod.tensorflow.keras` scripts: hvd.init(), the learning rate
scaled by hvd.size(), the optimizer wrapped in hvd.DistributedOptimizer (gradients averaged by
allreduce), hvd.callbacks.BroadcastGlobalVariablesCallback(0) (rank 0's initial weights on every
rank) and MetricAverageCallback, checkpoints and the model written by rank 0 only. Every rank
draws its own batches from a fixed synthetic task (a random "teacher" matrix labels Gaussian
inputs; the same teacher on every rank, from --seed). Rank 0 prints, every --log-interval
steps and after every epoch, lines that SageMaker metric regexes such as `loss=([0-9.]+)` match:

  step 100 loss=0.4321 throughput=2345.6 samples/s
  epoch 1 loss=0.4321 accuracy=0.8765

Rank 0 saves a weights checkpoint per epoch to $SM_MODEL_DIR/checkpoints/ and the trained model
(SavedModel, TensorFlow Serving's numbered layout) to $SM_MODEL_DIR/1 (default /opt/ml/model).

Needs the image ringleader:tf-horovod (`make image-tf-horovod`, or
`FRAMEWORK=tensorflow scripts/build-horovod.sh`): TensorFlow 2.21.0 (CPU), tf-keras 2.21.0 and
Horovod 0.28.1 built for TensorFlow. Horovod's Keras layer predates Keras 3 (TensorFlow >= 2.16's
default), so `tf.keras` must be Keras 2: TF_USE_LEGACY_KERAS=1, which the image sets by default
and this script sets too (before importing TensorFlow) unless the environment says otherwise.
Horovod 0.28.1 needed one change to build against TensorFlow 2.21 (its GPU-only XLA ops are left
out; see Dockerfile.tf-horovod). On 3 fake hosts x 2 processes:

  .venv/bin/ringleader local --image ringleader:tf-horovod --hosts 3 --processes-per-host 2 \
      --source-dir examples --entry-point tf_horovod_train.py --mpi-options \
      '-x HOROVOD_TIMELINE=/opt/ml/output/data/timeline.json -x HOROVOD_AUTOTUNE=1
       -x HOROVOD_AUTOTUNE_LOG=/opt/ml/output/data/autotune_log.csv --mca mpi_yield_when_idle 1'

Fake hosts share the machine's cores without OpenMPI knowing, so waiting ranks must yield
(`mpi_yield_when_idle`). Horovod writes its timeline and autotune log on rank 0 (the leader
host), into /opt/ml/output/data: what SageMaker uploads. Autotune logs its first data row only
after about 200 steps, hence 3 epochs of 100 steps by default.

Verified by tests/container/test_tf_horovod.py: training with timeline and autotune on 3 hosts x
2 processes, a failing rank named with its exit code on every host, `docker stop` of one host
ending every host with 143.

Options make a chosen rank fail, for trying out how failures are reported:
  --fail-rank 3 --fail-code 7 --fail-step 50   rank 3 exits with code 7 before its step 50
"""

import time

_STARTED = time.perf_counter()

import os  # noqa: E402

# Keras 2 (tf-keras) for Horovod's Keras layer; must be set before TensorFlow is imported. And
# fewer INFO lines from TensorFlow's C++ runtime on stderr, whose last lines (the failure file)
# should show a failing rank's cause (a few, logged before absl is set up, remain).
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import horovod.tensorflow.keras as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

_IMPORTED = time.perf_counter()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps-per-epoch", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="before scaling by world size")
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--log-interval", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow threads per rank")
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    parser.add_argument("--fail-rank", type=int, default=None)
    parser.add_argument("--fail-code", type=int, default=1)
    parser.add_argument("--fail-step", type=int, default=1)
    return parser.parse_args()


def synthetic_data(args: argparse.Namespace, rank: int) -> tf.data.Dataset:
    """Gaussian inputs labelled by a fixed random teacher: learnable, deterministic per seed."""
    teacher = np.random.default_rng(args.seed).standard_normal((args.features, args.classes))
    rng = np.random.default_rng(args.seed * 1000 + rank + 1)  # each rank its own data
    samples = args.steps_per_epoch * args.batch_size
    x = rng.standard_normal((samples, args.features)).astype(np.float32)
    y = (x @ teacher).argmax(axis=1).astype(np.int64)
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(args.batch_size)


def build_model(args: argparse.Namespace) -> tf.keras.Model:
    """Three dense layers; their gradients are the tensors Horovod allreduces."""
    return tf.keras.Sequential(
        [
            tf.keras.Input(shape=(args.features,)),
            tf.keras.layers.Dense(args.hidden, activation="relu", name="fc1"),
            tf.keras.layers.Dense(args.hidden, activation="relu", name="fc2"),
            tf.keras.layers.Dense(args.classes, name="fc3"),
        ]
    )


class Progress(tf.keras.callbacks.Callback):
    """Counts global steps on every rank: makes --fail-rank fail, and rank 0 print metrics."""

    def __init__(self, args: argparse.Namespace, rank: int, size: int) -> None:
        super().__init__()
        self.args, self.rank, self.size = args, rank, size
        self.step = 0
        self.interval_start = time.perf_counter()
        self.interval_steps = 0

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        step = self.step + 1
        if self.rank == self.args.fail_rank and step == self.args.fail_step:
            print(
                f"rank {self.rank} failing on purpose with code {self.args.fail_code} "
                f"at step {step}",
                file=sys.stderr,
                flush=True,
            )
            sys.exit(self.args.fail_code)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.step += 1
        self.interval_steps += 1
        if self.step % self.args.log_interval == 0 and self.rank == 0:
            now = time.perf_counter()
            samples = self.interval_steps * self.args.batch_size * self.size
            loss = float((logs or {}).get("loss", float("nan")))
            print(
                f"step {self.step} loss={loss:.4f} "
                f"throughput={samples / (now - self.interval_start):.1f} samples/s",
                flush=True,
            )
            self.interval_start, self.interval_steps = now, 0

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        # MetricAverageCallback (listed before this one) has averaged the logs over all ranks.
        if self.rank == 0:
            logs = logs or {}
            print(
                f"epoch {epoch + 1} loss={float(logs['loss']):.4f} "
                f"accuracy={float(logs['accuracy']):.4f}",
                flush=True,
            )


def main() -> None:
    args = parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    hvd.init()
    initialised = time.perf_counter()
    rank, size = hvd.rank(), hvd.size()
    tf.random.set_seed(args.seed + rank)  # differing initial weights: the broadcast fixes them

    model = build_model(args)
    optimizer = tf.keras.optimizers.SGD(learning_rate=args.lr * size, momentum=0.9)
    model.compile(
        optimizer=hvd.DistributedOptimizer(optimizer),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model_dir = Path(args.model_dir)
    callbacks: list[tf.keras.callbacks.Callback] = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        Progress(args, rank, size),
    ]
    if rank == 0:  # only rank 0 writes checkpoints, so ranks never overwrite each other's
        callbacks.append(
            tf.keras.callbacks.ModelCheckpoint(
                str(model_dir / "checkpoints" / "checkpoint-{epoch:02d}.h5"),
                save_weights_only=True,
            )
        )
        keras_package = tf.keras.Model.__module__.split(".")[0]  # tf_keras: Keras 2
        print(
            f"training {model.count_params()} parameters on {size} ranks for {args.epochs} "
            f"epochs x {args.steps_per_epoch} steps, batch {args.batch_size} per rank; "
            f"tf.keras is {keras_package}; ready after {initialised - _STARTED:.1f} s "
            f"(imports {_IMPORTED - _STARTED:.1f} s, hvd.init {initialised - _IMPORTED:.1f} s)",
            flush=True,
        )

    started = time.perf_counter()
    model.fit(
        synthetic_data(args, rank),
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        callbacks=callbacks,
        verbose=0,
    )
    elapsed = time.perf_counter() - started
    if rank == 0:
        saved = model_dir / "1"
        model.save(str(saved), include_optimizer=False)
        steps = args.epochs * args.steps_per_epoch
        print(
            f"done: {steps} steps on {size} ranks in {elapsed:.1f} s "
            f"({steps * args.batch_size * size / elapsed:.1f} samples/s), "
            f"model saved to {saved}",
            flush=True,
        )
    # Horovod (0.28.1) drops the timeline's events still queued when it shuts down, and on a
    # busy host its writer lags: stopping the timeline first writes every one of them.
    hvd.stop_timeline()


if __name__ == "__main__":
    main()
