"""A scaling study's arithmetic (pure): which runs compare, throughput per rank against the
smallest run (scaling efficiency), the ideal line, and what each run cost.

A run compares when it succeeded, ran the same program as the others and has the throughput
metric asked for; any other run is a row of its own that says why it was left out and takes
no part in the baseline or the efficiency (a failed run's cost is still shown: it was paid).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class Throughput:
    """A run's throughput: the job's as a whole (per-rank values already added up)."""

    value: float
    per_rank: bool  # the metric counts one rank's work (added up over the ranks)
    reporting_ranks: int  # how many ranks reported it
    note: str | None = None  # how the value was made, when not plainly


@dataclass(frozen=True)
class RunFacts:
    """What one run's output says about it (compare_load.py reads it)."""

    source: str  # as given on the command line
    hosts: int
    ranks: int
    succeeded: bool
    outcome: str  # "succeeded", "failed with exit code 3", ...
    program: str | None = None  # sagemaker_program, when the run recorded it
    instance_type: str | None = None
    wall_seconds: float | None = None
    startup_seconds: float | None = None
    throughput: Throughput | None = None  # None: the metric is not there (or none was asked)
    epochs: int = 0  # epochs marked
    epoch_seconds: float | None = None
    slowest_rank: str | None = None  # the straggler named longest ("rank 5 on algo-3"), if any


@dataclass(frozen=True)
class Price:
    usd_per_hour: float
    source: str  # "--price" or the bundled table


@dataclass(frozen=True)
class Row:
    run: RunFacts
    left_out: str | None  # why the run is not compared; None when it is
    speedup: float | None = None  # throughput / the baseline's
    efficiency: float | None = None  # throughput per rank / the baseline's
    ideal: float | None = None  # the baseline's throughput per rank x ranks
    price: Price | None = None
    cost: float | None = None  # USD for the whole run (hosts x price x wall time)
    cost_per_epoch: float | None = None

    @property
    def compared(self) -> bool:
        return self.left_out is None


@dataclass(frozen=True)
class Comparison:
    rows: tuple[Row, ...]  # in the order the runs were given
    metric: str | None  # the throughput metric's name; None when none was asked
    baseline: RunFacts | None  # the compared run with the fewest ranks
    program: str | None  # the program the compared runs ran

    @property
    def compared(self) -> tuple[Row, ...]:
        return tuple(row for row in self.rows if row.compared)

    @property
    def left_out(self) -> tuple[Row, ...]:
        return tuple(row for row in self.rows if not row.compared)


# ---------------------------------------------------------------------------- arithmetic
def speedup(throughput: float, base_throughput: float) -> float:
    """How many times the baseline's throughput."""
    return throughput / base_throughput


def scaling_efficiency(
    throughput: float, ranks: int, base_throughput: float, base_ranks: int
) -> float:
    """Throughput per rank relative to the baseline's: 1.0 is perfect (linear) scaling."""
    return (throughput / ranks) / (base_throughput / base_ranks)


def ideal_throughput(base_throughput: float, base_ranks: int, ranks: int) -> float:
    """What `ranks` would do at the baseline's throughput per rank."""
    return base_throughput / base_ranks * ranks


def run_cost(usd_per_hour: float, hosts: int, seconds: float) -> float:
    """USD for `hosts` instances busy for `seconds` at the hourly price."""
    return usd_per_hour * hosts * seconds / SECONDS_PER_HOUR


# ---------------------------------------------------------------------------- the comparison
def common_program(runs: Sequence[RunFacts]) -> str | None:
    """The program most succeeded runs ran (the first given on a tie); None when none says."""
    counts = Counter(run.program for run in runs if run.succeeded and run.program is not None)
    if not counts:
        return None
    most = max(counts.values())
    return next(
        run.program
        for run in runs
        if run.succeeded and run.program is not None and counts[run.program] == most
    )


def left_out_because(run: RunFacts, program: str | None, metric: str | None) -> str | None:
    if not run.succeeded:
        return run.outcome
    if program is not None and run.program is not None and run.program != program:
        return f"a different program ({run.program}, not {program})"
    if metric is not None and run.throughput is None:
        return f"no metric {metric}"
    if run.ranks < 1:
        return "no ranks recorded"
    return None


def compare(
    runs: Sequence[RunFacts], metric: str | None, prices: Mapping[str, Price]
) -> Comparison:
    """Every run's row; efficiency against the compared run with the fewest ranks."""
    program = common_program(runs)
    reasons = [left_out_because(run, program, metric) for run in runs]
    compared = [run for run, reason in zip(runs, reasons, strict=True) if reason is None]
    baseline = min(compared, key=lambda run: run.ranks) if compared else None
    rows = []
    for run, reason in zip(runs, reasons, strict=True):
        price = prices.get(run.instance_type) if run.instance_type else None
        scaling = _scaling(run, baseline) if reason is None else {}
        rows.append(Row(run, reason, price=price, **scaling, **_costs(run, price)))
    return Comparison(tuple(rows), metric, baseline, program)


def _scaling(run: RunFacts, baseline: RunFacts | None) -> dict[str, float | None]:
    if baseline is None or baseline.throughput is None or run.throughput is None:
        return {}
    base, value = baseline.throughput.value, run.throughput.value
    return {
        "speedup": speedup(value, base),
        "efficiency": scaling_efficiency(value, run.ranks, base, baseline.ranks),
        "ideal": ideal_throughput(base, baseline.ranks, run.ranks),
    }


def _costs(run: RunFacts, price: Price | None) -> dict[str, float | None]:
    if price is None:
        return {"cost": None, "cost_per_epoch": None}
    cost = None
    if run.wall_seconds is not None:
        cost = run_cost(price.usd_per_hour, run.hosts, run.wall_seconds)
    per_epoch = None
    if run.epoch_seconds is not None:
        per_epoch = run_cost(price.usd_per_hour, run.hosts, run.epoch_seconds)
    return {"cost": cost, "cost_per_epoch": per_epoch}
