"""Horovod's autotune log: columns from the header, score per sample, the best parameters."""

from __future__ import annotations

import pytest

from ringleader.tools.report.autotune import AutotuneError, parse_autotune

# Horovod 0.28.1 writes this header, and a stray space after the third comma of every row
HEADER_028 = (
    "hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,"
    "cycle_time_ms,tensor_fusion_threshold,score\n"
)


def test_horovod_028_rows_and_the_best_sample() -> None:
    log = parse_autotune(
        HEADER_028 + "0,0,0, 1,5,4,212.5\n0,0,0, 1,50,32,171.2\n0,0,0, 1,3.51882,12.4417,301\n"
    )
    assert log.parameters == (
        "hierarchical_allreduce",
        "hierarchical_allgather",
        "torus_allreduce",
        "cache_enabled",
        "cycle_time_ms",
        "tensor_fusion_threshold",
    )
    assert [s.score for s in log.samples] == [212.5, 171.2, 301.0]
    best = log.best
    assert best is not None and best.index == 3
    assert dict(best.params) == {
        "hierarchical_allreduce": "0",
        "hierarchical_allgather": "0",
        "torus_allreduce": "0",
        "cache_enabled": "1",
        "cycle_time_ms": "3.51882",
        "tensor_fusion_threshold": "12.4417",
    }
    assert not log.finished and log.skipped_rows == 0


def test_the_final_best_parameters_row_is_not_a_sample() -> None:
    rows = "0,0,0, 0,5,4,100\n0,0,0, 0,25,16,180.5\n1,0,0, 0,25,16,150\n0,0,0, 0,25,16,180.5\n"
    log = parse_autotune(HEADER_028 + rows)
    assert log.finished
    assert [s.index for s in log.samples] == [1, 2, 3]
    assert log.best is not None and log.best.index == 2


def test_a_repeated_last_row_that_is_not_the_best_is_a_sample() -> None:
    log = parse_autotune(HEADER_028 + "0,0,0, 0,5,4,300\n0,0,0, 0,8,2,100\n0,0,0, 0,8,2,100\n")
    assert not log.finished and len(log.samples) == 3


def test_an_older_header_with_fewer_parameters() -> None:
    log = parse_autotune(
        "hierarchical_allreduce,hierarchical_allgather,cycle_time_ms,"
        "tensor_fusion_threshold,score\n0,0,5,4,10.5\n1,0,5,4,12\n"
    )
    assert log.parameters == (
        "hierarchical_allreduce",
        "hierarchical_allgather",
        "cycle_time_ms",
        "tensor_fusion_threshold",
    )
    assert log.best is not None and dict(log.best.params)["hierarchical_allreduce"] == "1"


def test_a_header_only_log_has_no_best_yet() -> None:
    log = parse_autotune(HEADER_028)
    assert log.samples == () and log.best is None


def test_rows_that_do_not_fit_are_skipped_and_counted() -> None:
    log = parse_autotune(
        HEADER_028 + "0,0,0, 0,5,4,nan\n0,0,0,5\n0,0,0, 0,5,4,abc\n0,0,0, 0,5,4,7\n"
    )
    assert log.skipped_rows == 3 and [s.score for s in log.samples] == [7.0]


def test_ties_go_to_the_earlier_sample() -> None:
    log = parse_autotune("a,score\n1,5\n2,5\n")
    assert log.best is not None and log.best.index == 1


@pytest.mark.parametrize("text", ["", "\n\n", "a,b,c\n1,2,3\n"])
def test_not_an_autotune_log(text: str) -> None:
    with pytest.raises(AutotuneError):
        parse_autotune(text)
