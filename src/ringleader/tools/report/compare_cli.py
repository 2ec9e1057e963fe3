"""`ringleader report --compare RUN RUN [RUN ...]`: a scaling study of several runs of one job.

Exit codes: 0 the page and CSV were written and every run compared; 1 they could not be
written; 2 bad input, nothing written (fewer than two runs, a run without job.json or that
cannot be read, a throughput metric no run has, a malformed --price or one for an instance
type no run ran on); 3 written, but some runs were left out (failed, another program, the
metric missing): stderr names each and why.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from ringleader.tools.report.compare_load import CompareInputError, Wanted, load_run
from ringleader.tools.report.compare_model import Comparison, compare
from ringleader.tools.report.compare_table import CSV_FILE, csv_text, table
from ringleader.tools.report.prices import PriceError, bundled_table, resolve_prices
from ringleader.tools.report.runfacts import EPOCH_METRIC, is_per_rank

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_LEFT_OUT = 0, 1, 2, 3
PROG = "ringleader report"
INDEX = "index.html"
DEFAULT_OUT = Path("ringleader-compare")


@dataclass(frozen=True)
class CompareRequest:
    runs: tuple[str, ...]
    out_dir: Path = DEFAULT_OUT
    wanted: Wanted = field(default_factory=Wanted)
    prices: tuple[str, ...] = ()  # --price TYPE=USD_PER_HOUR


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    """The options a comparison takes; `ringleader local --sweep` takes them too."""
    group = parser.add_argument_group("comparing runs (--compare, --sweep)")
    group.add_argument(
        "--throughput",
        metavar="METRIC",
        help="the metric that measures throughput (a metric definition's name, e.g. "
        "images_per_sec): summed over the ranks when its name says per_rank/per_worker/"
        "per_gpu/per_device (or with --per-rank), else taken as the job's total",
    )
    group.add_argument(
        "--per-rank",
        action="store_true",
        help="the throughput metric counts one rank's work: add it up over the ranks",
    )
    group.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="INSTANCE_TYPE=USD_PER_HOUR",
        help="an instance type's hourly price (repeatable; wins over the bundled table)",
    )
    group.add_argument(
        "--instance-type",
        metavar="TYPE",
        help="price runs that do not record their instance type (or ran on fake hosts, "
        "'local') as this type, e.g. p3.16xlarge",
    )
    group.add_argument(
        "--epoch-metric",
        default=EPOCH_METRIC,
        metavar="METRIC",
        help=f"the metric whose new values mark epochs (default {EPOCH_METRIC})",
    )


def request_from(args: argparse.Namespace, runs: Sequence[str], out_dir: Path) -> CompareRequest:
    wanted = Wanted(args.throughput, args.per_rank, args.epoch_metric, args.instance_type)
    return CompareRequest(tuple(runs), out_dir, wanted, tuple(args.price))


def run_compare(request: CompareRequest, out: TextIO, err: TextIO) -> int:
    def fail(message: str) -> int:
        print(f"{PROG}: error: {message}", file=err)
        return EXIT_INVALID

    if len(request.runs) < 2:
        return fail(
            f"--compare: expected at least two runs (output folders, output.tar.gz or s3:// "
            f"URIs), got {len(request.runs)}"
        )
    try:
        loaded = [load_run(run, request.wanted, request.out_dir) for run in request.runs]
    except CompareInputError as error:
        return fail(str(error))
    metric = request.wanted.throughput
    if metric is not None and not any(run.facts.throughput for run in loaded):
        found = sorted({name for run in loaded for name in run.metrics})
        return fail(
            f"--throughput {metric}: no run has this metric; expected one of the metrics "
            f"the runs recorded: {', '.join(found) or 'none (give --metric-definitions)'}"
        )
    table_of_prices = bundled_table()
    try:
        prices = resolve_prices(
            request.prices, (run.facts.instance_type for run in loaded), table_of_prices
        )
    except PriceError as error:
        return fail(str(error))
    comparison = compare([run.facts for run in loaded], metric, prices)
    warnings = [warning for run in loaded for warning in run.warnings]
    try:
        written = _write(comparison, request, warnings)
    except OSError as error:
        print(f"{PROG}: cannot write the comparison to {request.out_dir}: {error}", file=err)
        return EXIT_FAILED
    for line in summary_lines(comparison):
        print(line, file=out)
    print(f"Comparison: {written} and {request.out_dir / CSV_FILE}", file=out)
    for row in comparison.left_out:
        print(f"{PROG}: left out {row.run.source}: {row.left_out}", file=err)
    return EXIT_LEFT_OUT if comparison.left_out else EXIT_OK


def _rule(request: CompareRequest) -> str:
    metric = request.wanted.throughput or ""
    if request.wanted.per_rank or is_per_rank(metric):
        return "counted per rank and added up over the ranks"
    return "taken as the job's total (not added up over the ranks)"


def _write(comparison: Comparison, request: CompareRequest, warnings: list[str]) -> Path:
    # matplotlib loads only when there is a comparison to draw (images without it run the CLI)
    from ringleader.tools.report.compare_charts import render_scaling
    from ringleader.tools.report.compare_page import render_compare_page

    out_dir = request.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / CSV_FILE).write_text(csv_text(comparison), encoding="utf-8")
    chart = render_scaling(comparison, out_dir)
    page = render_compare_page(comparison, chart, bundled_table(), _rule(request), warnings)
    index = out_dir / INDEX
    index.write_text(page, encoding="utf-8")
    return index


def summary_lines(comparison: Comparison) -> list[str]:
    """The table as aligned text, for the terminal."""
    header, rows = table(comparison)
    wanted = {"run", "hosts", "ranks", comparison.metric, "scaling efficiency", "wall time (s)"}
    keep = [i for i, name in enumerate(header) if name in (*wanted, "cost (USD)", "status")]
    shown = [[header[i] for i in keep], *([row[i] or "-" for i in keep] for row in rows)]
    widths = [max(len(line[i]) for line in shown) for i in range(len(keep))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in shown
    ]
