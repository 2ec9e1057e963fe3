"""A scaling study's arithmetic against tables worked out by hand, the AWS posts' own figures
among them; which runs compare; throughput, epochs and times from a run's metrics; prices."""

from __future__ import annotations

import pytest

from ringleader.core.jobfile import JobSummary
from ringleader.core.records import RankRecord
from ringleader.core.timeline import ENTRY, EXITED, FIRST_RANK, Mark, startup_seconds
from ringleader.tools.report.compare_model import (
    Price,
    RunFacts,
    Throughput,
    compare,
    ideal_throughput,
    run_cost,
    scaling_efficiency,
    speedup,
)
from ringleader.tools.report.metrics import Metric, Series
from ringleader.tools.report.prices import (
    PriceError,
    PriceTable,
    bundled_table,
    parse_price,
    resolve_prices,
)
from ringleader.tools.report.runfacts import (
    epoch_marks,
    epoch_seconds,
    is_per_rank,
    job_throughput,
    typical,
    wall_seconds,
)


def run(
    ranks: int,
    value: float | None,
    *,
    hosts: int | None = None,
    ok: bool = True,
    program: str = "train.py",
    instance: str | None = "p3.16xlarge",
    wall: float | None = 3600.0,
    epoch: float | None = None,
) -> RunFacts:
    return RunFacts(
        source=f"run-{ranks}",
        hosts=hosts if hosts is not None else max(1, ranks // 8),
        ranks=ranks,
        succeeded=ok,
        outcome="succeeded" if ok else "failed with exit code 3",
        program=program,
        instance_type=instance,
        wall_seconds=wall,
        throughput=None if value is None else Throughput(value, False, 1),
        epoch_seconds=epoch,
    )


# ---------------------------------------------------------------------------- the posts
def test_45000_images_per_second_on_64_gpus_is_90_percent_of_781_25_on_one() -> None:
    # 45,000 / 64 = 703.125 img/s per GPU; at 90 % a single GPU did 703.125 / 0.9 = 781.25.
    assert scaling_efficiency(45_000, 64, 781.25, 1) == pytest.approx(0.90)
    assert speedup(45_000, 781.25) == pytest.approx(57.6)
    assert ideal_throughput(781.25, 1, 64) == pytest.approx(50_000)
    # the same 45,000 against a single GPU at exactly 703.125 would be perfect scaling
    assert scaling_efficiency(45_000, 64, 703.125, 1) == pytest.approx(1.0)


def test_5874_against_3012_on_twice_the_gpus_is_a_little_less_than_double() -> None:
    # one p3.16xlarge (8 GPUs) 3,012 img/s; two (16 GPUs) 5,874 img/s
    table = compare([run(8, 3_012, hosts=1), run(16, 5_874, hosts=2)], "images_per_sec", {})
    one, two = table.rows
    assert one.speedup == pytest.approx(1.0) and one.efficiency == pytest.approx(1.0)
    assert two.speedup == pytest.approx(5_874 / 3_012)  # 1.9502: a little less than double
    assert 1.9 < two.speedup < 2.0
    # (5,874 / 16) / (3,012 / 8) = 367.125 / 376.5
    assert two.efficiency == pytest.approx(0.975100, abs=1e-6)
    assert two.ideal == pytest.approx(6_024)


def test_38_percent_at_64_gpus_with_parameter_servers() -> None:
    base = 200.0  # img/s on 8 GPUs (one host): 25 per GPU
    at_64 = 0.38 * 64 * 25  # 608 img/s
    table = compare([run(8, base), run(64, at_64)], "img/s", {})
    assert table.rows[1].efficiency == pytest.approx(0.38)


# ---------------------------------------------------------------------------- a whole table
def test_a_four_run_table_by_hand_with_cost_per_run_and_per_epoch() -> None:
    price = {"p3.16xlarge": Price(24.48, "--price")}
    runs = [
        run(8, 1_000, hosts=1, wall=3_600, epoch=900),
        run(16, 1_900, hosts=2, wall=1_800, epoch=450),
        run(32, 3_200, hosts=4, wall=1_200, epoch=300),
        run(64, 5_760, hosts=8, wall=900, epoch=225),
    ]
    table = compare(runs, "images_per_sec", price)
    assert table.baseline is runs[0]
    assert [row.efficiency for row in table.rows] == pytest.approx([1.0, 0.95, 0.8, 0.72])
    assert [row.speedup for row in table.rows] == pytest.approx([1.0, 1.9, 3.2, 5.76])
    assert [row.ideal for row in table.rows] == pytest.approx([1_000, 2_000, 4_000, 8_000])
    # hosts x $24.48 x hours: 1 x 1 h, 2 x 0.5 h, 4 x 1/3 h, 8 x 0.25 h
    assert [row.cost for row in table.rows] == pytest.approx([24.48, 24.48, 32.64, 48.96])
    assert [row.cost_per_epoch for row in table.rows] == pytest.approx([6.12, 6.12, 8.16, 12.24])
    assert run_cost(24.48, 2, 1_800) == pytest.approx(24.48)


def test_the_baseline_is_the_compared_run_with_fewest_ranks_whatever_the_order() -> None:
    table = compare([run(16, 1_800), run(4, 500), run(8, 950)], "x", {})
    assert table.baseline is not None and table.baseline.ranks == 4
    assert [row.efficiency for row in table.rows] == pytest.approx([0.9, 1.0, 0.95])


# ---------------------------------------------------------------------------- left out
def test_failed_runs_other_programs_and_missing_metrics_are_left_out_not_averaged_in() -> None:
    runs = [
        run(2, 400, ok=False),  # the smallest, but failed: not the baseline
        run(4, 400),
        run(8, 720),
        run(16, 2_000, program="other.py"),
        run(32, None),
    ]
    table = compare(runs, "images_per_sec", {"p3.16xlarge": Price(10.0, "--price")})
    reasons = [row.left_out for row in table.rows]
    assert reasons == [
        "failed with exit code 3",
        None,
        None,
        "a different program (other.py, not train.py)",
        "no metric images_per_sec",
    ]
    assert table.baseline is runs[1]
    assert [row.efficiency for row in table.compared] == pytest.approx([1.0, 0.9])
    assert all(row.efficiency is None and row.speedup is None for row in table.left_out)
    assert table.rows[0].cost is not None  # a failed run was still paid for


def test_the_common_program_is_the_one_most_succeeded_runs_ran() -> None:
    runs = [run(1, 10, program="a.py"), run(2, 20, program="b.py"), run(4, 40, program="b.py")]
    table = compare(runs, "x", {})
    assert table.program == "b.py"
    assert table.rows[0].left_out == "a different program (a.py, not b.py)"


def test_without_a_throughput_metric_runs_compare_on_times_only() -> None:
    table = compare([run(1, None), run(2, None)], None, {})
    assert all(row.compared for row in table.rows)
    assert all(row.efficiency is None for row in table.rows)


def test_no_price_no_cost() -> None:
    table = compare([run(1, 10, instance="local"), run(2, 20, instance=None)], "x", {})
    assert [row.cost for row in table.rows] == [None, None]


# ---------------------------------------------------------------------------- a run's figures
def metric(name: str, *series: tuple[int, list[float], list[float]]) -> Metric:
    return Metric(
        name,
        tuple(
            Series(rank, "algo-1", tuple(times), tuple(values)) for rank, times, values in series
        ),
    )


@pytest.mark.parametrize(
    ("name", "per_rank"),
    [
        ("images_per_sec", False),
        ("throughput", False),
        ("samples_per_sec_per_rank", True),
        ("img/s per GPU", True),
        ("tokens-per-worker", True),
        ("per_device_samples", True),
        ("superank", False),
    ],
)
def test_per_rank_by_name(name: str, per_rank: bool) -> None:
    assert is_per_rank(name) is per_rank


def test_a_ranks_typical_value_leaves_the_warm_up_point_out() -> None:
    assert typical([10, 100, 110, 90]) == 100  # median of 100, 110, 90
    assert typical([10, 100]) == 55  # too few points to leave one out


def test_a_per_rank_metric_is_added_up_and_a_total_is_not() -> None:
    points = metric("m", (0, [1, 2, 3], [5, 100, 100]), (1, [1, 2, 3], [5, 120, 120]))
    summed = job_throughput(points, 2, per_rank=True)
    assert summed is not None and summed.value == 220 and summed.note is None
    total = job_throughput(points, 2, per_rank=False)
    assert total is not None and total.value == 110  # the median of 100 and 120


def test_a_per_rank_metric_from_some_ranks_is_their_mean_times_the_ranks() -> None:
    points = metric("m", (0, [1, 2, 3], [1, 100, 100]))
    found = job_throughput(points, 4, per_rank=True)
    assert found is not None and found.value == 400
    assert found.note == "1 of 4 ranks reported it: their mean x 4"


def test_epochs_from_the_lowest_ranks_marks() -> None:
    marks = epoch_marks(metric("epoch", (0, [10, 20, 20.5, 31, 40], [1, 2, 2, 3, 4])))
    assert marks == [10, 20, 31, 40]
    assert epoch_seconds(marks, start=0.0) == pytest.approx(10.0)
    assert epoch_seconds([12.0], start=2.0) == 10.0
    assert epoch_seconds([], start=2.0) is None


def test_wall_and_startup_time_from_job_json() -> None:
    record = RankRecord(0, "algo-1", 0, None, 103.0, 150.0, False, ())
    job = JobSummary(
        0,
        None,
        ("algo-1", "algo-2"),
        2,
        None,
        (record,),
        timeline=(
            Mark("algo-1", ENTRY, 100.0),
            Mark("algo-2", ENTRY, 100.5),
            Mark("algo-1", FIRST_RANK, 103.0),
            Mark("algo-2", FIRST_RANK, 104.0),
            Mark("algo-1", EXITED, 151.0),
        ),
    )
    assert wall_seconds(job) == 51.0
    assert startup_seconds(job.timeline) == 4.0


# ---------------------------------------------------------------------------- prices
TABLE = PriceTable("2024-06", "test", {"p3.16xlarge": 24.48, "c5.18xlarge": 3.06})


def test_the_bundled_table_has_the_posts_instance_types_and_a_date() -> None:
    table = bundled_table()
    assert table.as_of
    for kind in ("p3.16xlarge", "p3dn.24xlarge", "c5.18xlarge", "ml.p3.16xlarge"):
        assert table.usd_per_hour[kind] > 0


def test_a_given_price_wins_over_the_table() -> None:
    prices = resolve_prices(["p3.16xlarge=20"], ["p3.16xlarge", "c5.18xlarge", None], TABLE)
    assert prices == {
        "p3.16xlarge": Price(20.0, "--price"),
        "c5.18xlarge": Price(3.06, "bundled table (2024-06)"),
    }


def test_a_price_for_a_type_no_run_ran_on_is_an_error_that_names_the_runs_types() -> None:
    with pytest.raises(PriceError) as error:
        resolve_prices(["p3.16xlarg=24.48"], ["p3.16xlarge", "local"], TABLE)
    assert str(error.value) == (
        "--price p3.16xlarg=24.48: no run ran on p3.16xlarg; expected one of the runs' "
        "instance types: local, p3.16xlarge"
    )


@pytest.mark.parametrize("item", ["p3", "p3=", "=3", "p3=cheap", "p3=-1", "p3=nan"])
def test_a_malformed_price(item: str) -> None:
    with pytest.raises(PriceError, match="expected INSTANCE_TYPE=USD_PER_HOUR"):
        parse_price(item)
