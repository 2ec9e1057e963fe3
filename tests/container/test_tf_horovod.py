"""TensorFlow + Horovod (the seed posts' `horovod.tensorflow.keras` jobs) on 3 fake hosts x 2
processes, image ringleader:tf-horovod.

examples/tf_horovod_train.py trains a small Keras MLP with hvd.DistributedOptimizer and
BroadcastGlobalVariablesCallback(0) over MPI. Horovod's timeline is switched on through an
mpirun -x option, as a user would with sagemaker_mpi_custom_mpi_options; rank 0 runs on the
leader algo-1 and writes it into its /opt/ml/output/data, what SageMaker uploads. Autotune's
log, written by the same Horovod core, is test_horovod.py's (Horovod for PyTorch: the same fact
at a fraction of TensorFlow's CPU); a SIGTERM to one host of an mpirun job is
test_lifecycle.py's.
`--mca mpi_yield_when_idle 1`: the fake hosts share this machine's cores (see test_horovod.py).

These tests need `make image-tf-horovod`; without the image they fail (never skip).
"""

import re
from collections.abc import Callable

import pytest

from tests.container.conftest import JobRun
from tests.container.test_horovod import (
    load_chrome_trace,
    rank_lines,
    tensor_names,
)

pytestmark = pytest.mark.container

HOSTS = ["algo-1", "algo-2", "algo-3"]
DATA = "/opt/ml/output/data"
YIELD = "--mca mpi_yield_when_idle 1"
MPI_OPTIONS = f"-x HOROVOD_TIMELINE={DATA}/timeline.json {YIELD}"
EPOCHS, STEPS_PER_EPOCH, LOG_INTERVAL = 3, 20, 10
STEPS = EPOCHS * STEPS_PER_EPOCH
METRIC = re.compile(r"\[algo-1 rank 0\] step (\d+) loss=([0-9.]+) throughput=([0-9.]+) samples/s")
EPOCH = re.compile(r"\[algo-1 rank 0\] epoch (\d+) loss=([0-9.]+) accuracy=([0-9.]+)")
SETTINGS = {"startup_timeout": "60"}
# DistributedOptimizer's allreduce of gradient N inside Keras' train function, e.g.
# PartitionedCall/DistributedSGD_Allreduce/cond_1/then/_27/.../HorovodAllreduce_grads_1_0
GRADIENT = re.compile(r"DistributedSGD_Allreduce/.*/HorovodAllreduce_grads(_\d+)?_0$")


def test_tf_horovod_training_with_a_timeline(
    run_job: Callable[..., JobRun], tf_horovod_image: str
) -> None:
    """Slow: 6 ranks import TensorFlow and build the model on 2 cores, beside other jobs,
    before 60 steps of training."""
    run = run_job(
        image=tf_horovod_image,
        entry_point="tf_horovod_train.py",
        hyperparameters={
            "steps-per-epoch": str(STEPS_PER_EPOCH),
            "log-interval": str(LOG_INTERVAL),
        },
        mpi_options=MPI_OPTIONS,
        settings=SETTINGS,
    )
    print(f"job took {run.seconds:.1f} s")
    assert run.codes() == dict.fromkeys(HOSTS, 0)

    # Keras 2 under Horovod; metrics in SageMaker-regex form, from rank 0 only; the model learns
    assert "tf.keras is tf_keras;" in run.output
    metrics = [(int(s), float(loss), float(rate)) for s, loss, rate in METRIC.findall(run.output)]
    assert [step for step, _, _ in metrics] == list(range(LOG_INTERVAL, STEPS + 1, LOG_INTERVAL))
    assert all(rate > 0 for _, _, rate in metrics)
    epochs = [(int(e), float(loss), float(acc)) for e, loss, acc in EPOCH.findall(run.output)]
    assert [epoch for epoch, _, _ in epochs] == list(range(1, EPOCHS + 1)), epochs
    assert epochs[-1][1] < 0.7 * epochs[0][1], f"loss did not go down: {epochs}"
    assert f"done: {STEPS} steps on 6 ranks" in run.output

    # rank 0 alone wrote the checkpoints and the model, on the leader
    model_dirs = {host: run.job.output_dir / host / "model" for host in HOSTS}
    checkpoints = sorted(p.name for p in (model_dirs["algo-1"] / "checkpoints").iterdir())
    assert checkpoints == [f"checkpoint-{epoch:02d}.h5" for epoch in range(1, EPOCHS + 1)]
    assert (model_dirs["algo-1"] / "1" / "saved_model.pb").stat().st_size > 0
    for host in HOSTS[1:]:
        assert not model_dirs[host].exists() or not any(model_dirs[host].iterdir()), host

    # timeline: a Chrome trace in which each of the 6 gradients (3 layers' kernel and bias) is
    # allreduced over MPI once per step, negotiated by all 6 ranks; every variable was broadcast
    # from rank 0 once (BroadcastGlobalVariablesCallback); the epoch metrics were averaged
    # (MetricAverageCallback: loss and accuracy, once per epoch)
    leader_data = run.job.output_dir / "algo-1" / "output" / "data"
    timeline_file = leader_data / "timeline.json"
    assert timeline_file.is_file(), f"no timeline in {timeline_file.parent}"
    events = load_chrome_trace(timeline_file.read_text())
    names = tensor_names(events)

    def begun(pid: int) -> list[str]:
        return [e["name"] for e in events if e["pid"] == pid and e["ph"] == "B"]

    def ready(pid: int) -> set[str]:
        return {e["name"] for e in events if e["pid"] == pid and e["ph"] == "X"}

    all_ranks = {str(rank) for rank in range(6)}
    gradients = {pid: n for pid, n in names.items() if GRADIENT.search(n)}
    assert len(gradients) == 6, f"not 6 gradients among the timeline's tensors {names}"
    for pid, tensor in gradients.items():
        phases = begun(pid)
        for phase in ("NEGOTIATE_ALLREDUCE", "ALLREDUCE", "MPI_ALLREDUCE"):
            assert phases.count(phase) == STEPS, (tensor, phase, phases.count(phase))
        assert ready(pid) == all_ranks, f"ranks ready for {tensor}: {ready(pid)}"
    broadcast = {n: pid for pid, n in names.items() if n.startswith("HorovodBroadcast_")}
    for layer in ("fc1", "fc2", "fc3"):
        for kind in ("kernel", "bias"):
            pid = broadcast[f"HorovodBroadcast_{layer}_{kind}_0"]
            assert begun(pid).count("MPI_BCAST") == 1 and ready(pid) == all_ranks
    averaged = next(pid for pid, n in names.items() if n == "HorovodAllreduce")
    assert begun(averaged).count("MPI_ALLREDUCE") == 2 * EPOCHS


def test_failing_tf_horovod_rank_is_named_with_its_code_on_every_host(
    run_job: Callable[..., JobRun], tf_horovod_image: str
) -> None:
    """A worker's rank 3 (on algo-2) exits 7 at step 20, while the others are in an allreduce:
    every host exits 7 and names rank 3 as the cause.

    Slow: 6 ranks import TensorFlow and build the model on 2 cores before step 20.
    """
    run = run_job(
        image=tf_horovod_image,
        entry_point="tf_horovod_train.py",
        hyperparameters={"fail-rank": "3", "fail-code": "7", "fail-step": "20"},
        mpi_options=YIELD,
        settings=SETTINGS,
    )
    assert rank_lines(run.output, "failing on purpose with code 7 at step 20") == {3}
    assert run.codes() == dict.fromkeys(HOSTS, 7), run.codes()
    for host in HOSTS:
        failure = run.failure(host)
        assert failure.startswith("Rank 3 on host algo-2 exited with code 7."), (host, failure)
        assert "failing on purpose with code 7 at step 20" in failure, (host, failure)
        assert not run.has_success_file(host)
