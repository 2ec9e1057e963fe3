"""metrics.jsonl: points grouped per metric and rank, duplicates once, bad lines counted."""

from __future__ import annotations

import json
import math

import pytest

from ringleader.tools.report.metrics import parse_line, parse_metrics


def line(t: float, name: str, value: float, rank: int, host: str = "algo-1") -> str:
    return json.dumps({"timestamp": t, "name": name, "value": value, "rank": rank, "host": host})


def test_points_are_grouped_by_metric_then_rank_in_time_order() -> None:
    metrics = parse_metrics(
        [
            line(3.0, "loss", 0.5, 1, "algo-2"),
            line(1.0, "loss", 0.9, 0),
            line(2.0, "loss", 0.7, 0),
            line(1.5, "acc", 0.1, 0),
            line(1.0, "loss", 0.8, 1, "algo-2"),
        ]
    )
    assert [m.name for m in metrics.metrics] == ["acc", "loss"]
    loss = metrics.metrics[1]
    assert [(s.rank, s.host, s.times, s.values) for s in loss.series] == [
        (0, "algo-1", (1.0, 2.0), (0.9, 0.7)),
        (1, "algo-2", (1.0, 3.0), (0.8, 0.5)),
    ]
    assert loss.points == 4
    assert (loss.minimum, loss.maximum, loss.last) == (0.5, 0.9, 0.5)
    assert metrics.first_timestamp == 1.0 and metrics.skipped_lines == 0


def test_the_same_point_from_two_files_counts_once() -> None:
    text = line(1.0, "loss", 0.9, 0)
    assert parse_metrics([text, text]).metrics[0].points == 1


def test_the_last_value_on_a_tie_is_the_lowest_ranks() -> None:
    metrics = parse_metrics([line(5.0, "m", 2.0, 1), line(5.0, "m", 1.0, 0)])
    assert metrics.metrics[0].last == 1.0


def test_non_finite_values_are_kept_but_not_in_min_and_max() -> None:
    metrics = parse_metrics([line(1.0, "loss", math.nan, 0), line(2.0, "loss", 3.0, 0)])
    loss = metrics.metrics[0]
    assert loss.points == 2 and loss.minimum == loss.maximum == 3.0


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1, 2]",
        '{"timestamp": 1, "name": "x", "value": 1}',  # no rank
        '{"timestamp": 1, "name": "", "value": 1, "rank": 0}',
        '{"timestamp": "1", "name": "x", "value": 1, "rank": 0}',
        '{"timestamp": 1, "name": "x", "value": true, "rank": 0}',
        '{"timestamp": 1, "name": "x", "value": 1, "rank": 0.5}',
        '{"timestamp": NaN, "name": "x", "value": 1, "rank": 0}',
        '{"timestamp": 1, "name": "x", "value": 1, "rank": 0, "host": 3}',
        '{"timestamp": 1, "name": "x", "value": 1, "rank": 0, "host": "algo-1"',  # cut off
    ],
)
def test_malformed_lines_are_skipped(text: str) -> None:
    assert parse_line(text) is None
    metrics = parse_metrics([text, line(1.0, "ok", 1.0, 0), ""])
    assert metrics.skipped_lines == 1 and [m.name for m in metrics.metrics] == ["ok"]


def test_no_lines_no_metrics() -> None:
    metrics = parse_metrics([])
    assert metrics.metrics == () and metrics.first_timestamp is None
