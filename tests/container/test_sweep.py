"""`ringleader local --sweep hosts=1,2`: the demo job on one and two fake hosts, then the
comparison page and CSV, read back and checked against the runs' own output."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import docker
import pytest

from ringleader.tools.report.prices import bundled_table
from tests.container.conftest import EXAMPLES, IMAGE
from tests.report.compare_runs import ringleader

pytestmark = pytest.mark.container

ROUNDS = 6
DEFINITIONS = json.dumps(
    [
        {"Name": "samples_per_sec_per_rank", "Regex": "samples_per_sec_per_rank=([0-9.]+)"},
        {"Name": "epoch", "Regex": "round ([0-9]+):"},
    ]
)


def test_a_sweep_over_one_and_two_hosts_writes_the_comparison(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    code, output, err = ringleader(
        "local",
        "--sweep",
        "hosts=1,2",
        "--processes-per-host",
        "1",
        "--image",
        IMAGE,
        "--source-dir",
        str(EXAMPLES),
        "--entry-point",
        "mpi_allreduce.py",
        "--metric-definitions",
        DEFINITIONS,
        "--setting",
        "metric_ranks=all",
        "--throughput",
        "samples_per_sec_per_rank",
        "--instance-type",
        "c5.18xlarge",
        "--output",
        str(tmp_path),
        "--",
        "--rounds",
        str(ROUNDS),
        "--batch-size",
        "20000",
    )
    assert (code, err) == (0, ""), output[-4000:]
    assert "==> sweep: run 1 of 2: 1 host(s)" in output
    assert "==> sweep: run 2 of 2: 2 host(s)" in output
    sweeps = list(tmp_path.glob("sweep-*"))
    assert len(sweeps) == 1, sorted(p.name for p in tmp_path.iterdir())
    with (sweeps[0] / "compare.csv").open(newline="") as file:
        rows = list(csv.DictReader(file))
    print("\n" + (sweeps[0] / "compare.csv").read_text())  # the measured table, with -s

    assert [(r["hosts"], r["ranks"]) for r in rows] == [("1", "1"), ("2", "2")]
    assert {r["status"] for r in rows} == {"compared"}
    assert {r["instance type"] for r in rows} == {"c5.18xlarge"}
    assert {r["epochs"] for r in rows} == {str(ROUNDS)}
    for row, run in zip(rows, (Path(r["run"]) for r in rows), strict=True):
        info = json.loads((run / "run.json").read_text())
        assert info["program"] == "mpi_allreduce.py" and info["instance_type"] == "local"
        assert float(row["wall time (s)"]) > float(row["startup (s)"]) > 0
        assert 0 < float(row["time per epoch (s)"]) < float(row["wall time (s)"])
        # every rank's own rate, as the ranks printed it: the throughput is their sum
        rates = [
            json.loads(line)
            for line in (run / "algo-1" / "output" / "data" / "metrics.jsonl").open()
        ]
        ranks = {p["rank"] for p in rates if p["name"] == "samples_per_sec_per_rank"}
        assert ranks == set(range(int(row["ranks"])))
        assert row["note"].startswith("price from bundled table")
        price = bundled_table().usd_per_hour["c5.18xlarge"]
        cost = price * int(row["hosts"]) * float(row["wall time (s)"]) / 3600
        assert float(row["cost (USD)"]) == pytest.approx(cost, abs=1e-4)

    one, two = (float(r["samples_per_sec_per_rank"]) for r in rows)
    assert one > 0 and two > 0
    assert rows[0]["scaling efficiency"] == "1.000"
    assert float(rows[1]["scaling efficiency"]) == pytest.approx((two / 2) / one, abs=1e-3)
    assert float(rows[1]["ideal samples_per_sec_per_rank"]) == pytest.approx(2 * one, abs=0.2)
    page = (sweeps[0] / "index.html").read_text()
    assert 'src="scaling.png"' in page and (sweeps[0] / "scaling.png").is_file()
    assert "counted per rank and added up over the ranks" in page
