"""The comparison as one table of text cells (pure): the CSV is this table, and the page shows
the same cells, so the two always agree."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass

from ringleader.tools.report.compare_model import Comparison, Row

MISSING = ""
CSV_FILE = "compare.csv"


@dataclass(frozen=True)
class Column:
    name: str
    cell: Callable[[Row], str]
    numeric: bool = True


def _fixed(digits: int) -> Callable[[float | None], str]:
    def show(value: float | None) -> str:
        return MISSING if value is None else f"{value:.{digits}f}"

    return show


seconds, throughput, ratio, usd = _fixed(2), _fixed(1), _fixed(3), _fixed(4)


def _per_rank(row: Row) -> float | None:
    measured = row.run.throughput
    return None if measured is None or row.run.ranks < 1 else measured.value / row.run.ranks


def _status(row: Row) -> str:
    return "compared" if row.compared else f"left out: {row.left_out}"


def _note(row: Row) -> str:
    notes = []
    if row.run.throughput is not None and row.run.throughput.note:
        notes.append(row.run.throughput.note)
    if row.price is None and row.run.instance_type:
        notes.append(f"no price for {row.run.instance_type}")
    if row.price is not None:
        notes.append(f"price from {row.price.source}")
    return "; ".join(notes)


def columns(comparison: Comparison) -> tuple[Column, ...]:
    metric = comparison.metric or "throughput"
    return (
        Column("run", lambda row: row.run.source, numeric=False),
        Column("hosts", lambda row: str(row.run.hosts)),
        Column("ranks", lambda row: str(row.run.ranks)),
        Column(
            metric,
            lambda row: throughput(row.run.throughput.value if row.run.throughput else None),
        ),
        Column(f"{metric} per rank", lambda row: throughput(_per_rank(row))),
        Column("speedup", lambda row: ratio(row.speedup)),
        Column("scaling efficiency", lambda row: ratio(row.efficiency)),
        Column(f"ideal {metric}", lambda row: throughput(row.ideal)),
        Column("wall time (s)", lambda row: seconds(row.run.wall_seconds)),
        Column("startup (s)", lambda row: seconds(row.run.startup_seconds)),
        Column("epochs", lambda row: str(row.run.epochs) if row.run.epochs else MISSING),
        Column("time per epoch (s)", lambda row: seconds(row.run.epoch_seconds)),
        Column("instance type", lambda row: row.run.instance_type or MISSING, numeric=False),
        Column("USD per hour", lambda row: usd(row.price.usd_per_hour if row.price else None)),
        Column("cost (USD)", lambda row: usd(row.cost)),
        Column("cost per epoch (USD)", lambda row: usd(row.cost_per_epoch)),
        Column("slowest rank", lambda row: row.run.slowest_rank or MISSING, numeric=False),
        Column("status", _status, numeric=False),
        Column("note", _note, numeric=False),
    )


def table(comparison: Comparison) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """(header, one row of cells per run, in the order given)."""
    cols = columns(comparison)
    header = tuple(column.name for column in cols)
    return header, [tuple(column.cell(row) for column in cols) for row in comparison.rows]


def csv_text(comparison: Comparison) -> str:
    header, rows = table(comparison)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()
