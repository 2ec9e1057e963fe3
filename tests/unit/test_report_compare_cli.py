"""`ringleader report --compare`: runs in folders, archives and on S3 (moto), the CSV against
hand-computed figures, runs left out, and every bad input as a message and an exit code."""

from __future__ import annotations

import csv
import tarfile
from pathlib import Path
from typing import Any

import pytest

from ringleader.tools.report.prices import bundled_table
from tests.report.compare_runs import FakeRun, ringleader, write_run, write_study
from tests.unit.test_artifacts_s3 import BUCKET, s3  # noqa: F401 (moto's S3, AWS_* isolated)


def rows(out_dir: Path) -> list[dict[str, str]]:
    with (out_dir / "compare.csv").open(newline="") as file:
        return list(csv.DictReader(file))


def study(tmp_path: Path, **extra: FakeRun) -> list[str]:
    runs = {
        "one": FakeRun(1, 2, 100.0),
        "two": FakeRun(2, 2, 95.0),
        "four": FakeRun(4, 2, 80.0),
        **extra,
    }
    return [str(path) for path in write_study(tmp_path / "runs", runs)]


def test_three_sizes_compare_with_efficiency_and_cost_by_hand(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    code, stdout, stderr = ringleader(
        "report",
        "--compare",
        *study(tmp_path),
        "--throughput",
        "images_per_sec",
        "--instance-type",
        "p3.16xlarge",
        "--price",
        "p3.16xlarge=36",
        "--out",
        str(out),
    )
    assert (code, stderr) == (0, "")
    table = rows(out)
    assert [r["hosts"] for r in table] == ["1", "2", "4"]
    assert [r["ranks"] for r in table] == ["2", "4", "8"]
    # rank 0 prints the job's total: 2 x 100, 4 x 95, 8 x 80
    assert [r["images_per_sec"] for r in table] == ["200.0", "380.0", "640.0"]
    assert [r["images_per_sec per rank"] for r in table] == ["100.0", "95.0", "80.0"]
    assert [r["scaling efficiency"] for r in table] == ["1.000", "0.950", "0.800"]
    assert [r["speedup"] for r in table] == ["1.000", "1.900", "3.200"]
    assert [r["ideal images_per_sec"] for r in table] == ["200.0", "400.0", "800.0"]
    # entry at T0 to the last exit at T0 + 2 + 3 x 10 + 1 + 0.5 = 33.5 s
    assert {r["wall time (s)"] for r in table} == {"33.50"}
    # the last host's first rank at T0 + 2 s, the first entry at T0
    assert {r["startup (s)"] for r in table} == {"2.00"}
    assert {r["epochs"] for r in table} == {"3"}
    assert {r["time per epoch (s)"] for r in table} == {"10.00"}
    # $36/h: 1 host x 33.5 s = $0.335; per epoch 1 host x 10 s = $0.1
    assert [r["cost (USD)"] for r in table] == ["0.3350", "0.6700", "1.3400"]
    assert [r["cost per epoch (USD)"] for r in table] == ["0.1000", "0.2000", "0.4000"]
    assert {r["status"] for r in table} == {"compared"}
    assert "Comparison:" in stdout and (out / "index.html").is_file()
    assert (out / "scaling.png").stat().st_size > 10_000
    page = (out / "index.html").read_text()
    assert f"as of <strong>{bundled_table().as_of}</strong>" in page
    assert 'src="scaling.png"' in page


def test_a_per_rank_metric_is_summed_over_the_ranks(tmp_path: Path) -> None:
    runs = {
        "one": FakeRun(1, 1, 50.0, metric="img_per_rank", metric_on_every_rank=True),
        "two": FakeRun(2, 1, 45.0, metric="img_per_rank", metric_on_every_rank=True),
    }
    paths = [str(p) for p in write_study(tmp_path, runs)]
    out = tmp_path / "cmp"
    code, _, stderr = ringleader(
        "report", "--compare", *paths, "--throughput", "img_per_rank", "--out", str(out)
    )
    assert (code, stderr) == (0, "")
    assert [r["img_per_rank"] for r in rows(out)] == ["50.0", "90.0"]
    assert [r["scaling efficiency"] for r in rows(out)] == ["1.000", "0.900"]
    assert "counted per rank and added up" in (out / "index.html").read_text()


def test_failed_runs_and_other_programs_are_left_out_and_named(tmp_path: Path) -> None:
    paths = study(
        tmp_path,
        broken=FakeRun(8, 2, 70.0, exit_code=3),
        other=FakeRun(3, 2, 99.0, program="other.py"),
    )
    out = tmp_path / "cmp"
    code, _, stderr = ringleader(
        "report", "--compare", *paths, "--throughput", "images_per_sec", "--out", str(out)
    )
    assert code == 3
    assert f"left out {paths[3]}: failed with exit code 3" in stderr
    assert f"left out {paths[4]}: a different program (other.py, not train.py)" in stderr
    table = rows(out)
    assert table[3]["status"] == "left out: failed with exit code 3"
    assert table[3]["scaling efficiency"] == ""  # not averaged in
    assert [r["scaling efficiency"] for r in table[:3]] == ["1.000", "0.950", "0.800"]
    assert "Traceback" not in stderr


def test_a_metric_one_run_lacks_leaves_that_run_out(tmp_path: Path) -> None:
    paths = study(tmp_path, lacking=FakeRun(8, 1, 10.0, metric="loss"))
    code, _, stderr = ringleader(
        "report", "--compare", *paths, "--throughput", "images_per_sec", "--out", str(tmp_path)
    )
    assert code == 3
    assert f"left out {paths[3]}: no metric images_per_sec" in stderr


def test_a_metric_no_run_has_is_an_error_that_lists_theirs(tmp_path: Path) -> None:
    code, _, stderr = ringleader(
        "report", "--compare", *study(tmp_path), "--throughput", "img/s", "--out", str(tmp_path)
    )
    assert code == 2
    assert stderr == (
        "ringleader report: error: --throughput img/s: no run has this metric; expected one "
        "of the metrics the runs recorded: epoch, images_per_sec\n"
    )


def test_a_run_without_job_json(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    (empty / "algo-1" / "output" / "data").mkdir(parents=True)
    (empty / "algo-1" / "output" / "data" / "metrics.jsonl").write_text("")
    code, stdout, stderr = ringleader("report", "--compare", *study(tmp_path), str(empty))
    assert code == 2 and stdout == ""
    assert stderr.startswith(f"ringleader report: error: --compare {empty}: found no job.json")
    assert "Traceback" not in stderr


def test_a_run_that_does_not_exist(tmp_path: Path) -> None:
    code, _, stderr = ringleader("report", "--compare", *study(tmp_path), "/nonexistent/run")
    assert code == 2
    assert stderr == (
        "ringleader report: error: --compare /nonexistent/run: /nonexistent/run does not exist\n"
    )


def test_a_price_for_an_instance_type_no_run_ran_on(tmp_path: Path) -> None:
    code, _, stderr = ringleader(
        "report", "--compare", *study(tmp_path), "--price", "p3.16xlarg=24.48"
    )
    assert code == 2
    assert stderr == (
        "ringleader report: error: --price p3.16xlarg=24.48: no run ran on p3.16xlarg; "
        "expected one of the runs' instance types: local\n"
    )


def test_a_malformed_price(tmp_path: Path) -> None:
    code, _, stderr = ringleader("report", "--compare", *study(tmp_path), "--price", "local")
    assert code == 2 and "--price local: expected INSTANCE_TYPE=USD_PER_HOUR" in stderr


@pytest.mark.parametrize("count", [0, 1])
def test_fewer_than_two_runs(tmp_path: Path, count: int) -> None:
    argv = ["report", "--compare", *study(tmp_path)[:count]] if count else ["report", "--compare"]
    if count == 0:
        with pytest.raises(SystemExit) as stop:  # argparse: --compare needs a value
            ringleader(*argv)
        assert stop.value.code == 2
        return
    code, _, stderr = ringleader(*argv)
    assert code == 2
    assert stderr == (
        "ringleader report: error: --compare: expected at least two runs (output folders, "
        "output.tar.gz or s3:// URIs), got 1\n"
    )


def test_path_and_compare_together(tmp_path: Path) -> None:
    code, _, stderr = ringleader("report", str(tmp_path), "--compare", *study(tmp_path))
    assert code == 2 and "not both" in stderr


def test_local_runs_are_unpriced_until_an_instance_type_is_given(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    code, _, _ = ringleader("report", "--compare", *study(tmp_path), "--out", str(out))
    assert code == 0
    assert {r["cost (USD)"] for r in rows(out)} == {""}
    assert {r["note"] for r in rows(out)} == {"no price for local"}
    code, _, _ = ringleader(
        "report", "--compare", *study(tmp_path), "--instance-type", "p3.16xlarge", "--out", str(out)
    )
    price = bundled_table().usd_per_hour["p3.16xlarge"]
    assert [r["USD per hour"] for r in rows(out)] == [f"{price:.4f}"] * 3
    assert rows(out)[0]["cost (USD)"] == f"{price * 33.5 / 3600:.4f}"


def archive(folder: Path, target: Path) -> Path:
    """SageMaker's output.tar.gz: the leader's /opt/ml/output/data (and run.json beside it)."""
    with tarfile.open(target, "w:gz") as tar:
        tar.add(folder / "algo-1" / "output" / "data", arcname="data")
        tar.add(folder / "run.json", arcname="run.json")
    return target


def test_archives_and_s3_runs(tmp_path: Path, s3: Any) -> None:  # noqa: F811
    client = s3
    one = archive(write_run(tmp_path / "one", FakeRun(1, 1, 100.0)), tmp_path / "one.tar.gz")
    two = archive(write_run(tmp_path / "two", FakeRun(2, 1, 90.0)), tmp_path / "two.tar.gz")
    four = write_run(tmp_path / "four", FakeRun(4, 1, 85.0))
    out = tmp_path / "cmp"
    client.upload_file(str(two), BUCKET, "jobs/two/output/output.tar.gz")
    for path in four.rglob("*"):
        if path.is_file():
            client.upload_file(str(path), BUCKET, f"jobs/four/{path.relative_to(four)}")
    code, _, stderr = ringleader(
        "report",
        "--compare",
        str(one),
        f"s3://{BUCKET}/jobs/two/output/output.tar.gz",
        f"s3://{BUCKET}/jobs/four/",
        "--throughput",
        "images_per_sec",
        "--out",
        str(out),
    )
    assert (code, stderr) == (0, "")
    assert [r["scaling efficiency"] for r in rows(out)] == ["1.000", "0.900", "0.850"]
    code, _, stderr = ringleader(
        "report", "--compare", str(one), f"s3://{BUCKET}/jobs/none/", "--out", str(out)
    )
    assert code == 2
    assert stderr == (
        f"ringleader report: error: --compare s3://{BUCKET}/jobs/none/: "
        f"s3://{BUCKET}/jobs/none/: no objects under this prefix\n"
    )


def test_the_cli_loads_without_matplotlib() -> None:
    """Images without matplotlib run `ringleader image setup`: the chart loads only to draw."""
    import subprocess
    import sys

    probe = "import sys, ringleader.tools.cli; print('matplotlib' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "False"
