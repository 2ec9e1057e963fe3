"""The seeds' MXNet (Gluon) + Horovod job on 3 x 2 fake hosts in ringleader:mxnet: it trains,
Horovod's timeline and autotune log are kept in output/data, and a failing rank is named."""

import csv
import re

import pytest

from tests.container.test_horovod import load_chrome_trace

pytestmark = pytest.mark.container

HOSTS = ["algo-1", "algo-2", "algo-3"]
EPOCH = re.compile(r"\[algo-1 rank 0\] epoch (\d+) loss=([0-9.]+) accuracy=([0-9.]+)")


def test_gluon_job_trains_with_timeline_and_autotune(run_job, mxnet_image):
    run = run_job(
        image=mxnet_image,
        entry_point="mxnet_horovod_train.py",
        hyperparameters={"epochs": "5", "batches": "60"},
        settings={
            "startup_timeout": "60",
            "horovod_timeline": "true",
            "horovod_autotune": "true",
        },
    )
    assert run.codes() == dict.fromkeys(HOSTS, 0), run.output
    epochs = [(int(e), float(loss), float(acc)) for e, loss, acc in EPOCH.findall(run.output)]
    assert [epoch for epoch, _, _ in epochs] == [1, 2, 3, 4, 5], epochs
    assert epochs[-1][1] < epochs[0][1], f"loss did not go down: {epochs}"
    assert "training on 6 ranks" in run.output
    leader = run.job.output_dir / "algo-1"
    assert (leader / "model" / "mlp-symbol.json").is_file()
    data = leader / "output" / "data"
    events = load_chrome_trace((data / "horovod_timeline.json").read_text())
    assert any(event.get("name") == "ALLREDUCE" for event in events)
    rows = [
        row
        for row in csv.reader((data / "horovod_autotune_log.csv").read_text().splitlines())
        if row
    ]
    assert rows and "cycle_time_ms" in rows[0], rows[:1]


def test_failing_gluon_rank_is_named_with_its_code(run_job, mxnet_image):
    run = run_job(
        image=mxnet_image,
        entry_point="mxnet_horovod_train.py",
        hyperparameters={"epochs": "3", "batches": "10", "fail-rank": "3", "fail-code": "7"},
        settings={"startup_timeout": "60"},
    )
    assert run.codes() == dict.fromkeys(HOSTS, 7), run.output
    for host in HOSTS:
        assert run.failure(host).startswith("Rank 3 on host algo-2 exited with code 7")
