"""The comparison as one HTML page (pure), in the style of the job report: inline CSS, no
script, the chart and the CSV by relative file name."""

from __future__ import annotations

from collections.abc import Sequence

from ringleader.tools.report.charts import Chart
from ringleader.tools.report.compare_model import Comparison
from ringleader.tools.report.compare_table import CSV_FILE, columns, table
from ringleader.tools.report.page import CSS, _e, _table
from ringleader.tools.report.prices import PriceTable

# 18 columns: the table scrolls sideways rather than wrapping every cell into a tall row.
COMPARE_CSS = """
#compare-table { overflow-x: auto; }
#compare-table td, #compare-table th { white-space: nowrap; }
#compare-table td:first-child { white-space: normal; word-break: break-all; min-width: 14em; }
"""


def _summary(comparison: Comparison, per_rank_rule: str) -> str:
    compared, left_out = comparison.compared, comparison.left_out
    parts = [f"{len(comparison.rows)} runs, {len(compared)} compared"]
    if left_out:
        parts.append(f"{len(left_out)} left out (below, with why)")
    text = ", ".join(parts) + "."
    if comparison.program:
        text += f" Program: <code>{_e(comparison.program)}</code>."
    baseline = comparison.baseline
    if baseline is not None:
        text += (
            f" Baseline: <code>{_e(baseline.source)}</code> ({baseline.ranks} rank(s) on "
            f"{baseline.hosts} host(s)), the compared run with the fewest ranks."
        )
    metric = (
        f"<p>Throughput: metric <code>{_e(comparison.metric)}</code>, {_e(per_rank_rule)}. "
        "Scaling efficiency is throughput per rank divided by the baseline's; the ideal is "
        "the baseline's throughput per rank times the ranks.</p>"
        if comparison.metric
        else "<p>No throughput metric was named (<code>--throughput</code>): runs compare "
        "by time only.</p>"
    )
    return f"<p>{text}</p>{metric}"


def _left_out(comparison: Comparison) -> str:
    if not comparison.left_out:
        return ""
    items = "".join(
        f"<li><code>{_e(row.run.source)}</code>: {_e(row.left_out)}</li>"
        for row in comparison.left_out
    )
    return (
        '<section id="left-out"><h2>Runs left out</h2><p>Not in the baseline, the efficiency '
        f"or the chart; their own figures stay in the table.</p><ul>{items}</ul></section>"
    )


def _prices(comparison: Comparison, prices: PriceTable) -> str:
    used = sorted(
        {
            f"{kind}: ${row.price.usd_per_hour:g}/h from {row.price.source}"
            for row in comparison.rows
            if row.price and (kind := row.run.instance_type)
        }
    )
    unpriced = sorted(
        {
            row.run.instance_type
            for row in comparison.rows
            if row.price is None and row.run.instance_type
        }
    )
    items = "".join(f"<li>{_e(text)}</li>" for text in used)
    missing = (
        f"<p>No price for {_e(', '.join(unpriced))}: give "
        "<code>--price INSTANCE_TYPE=USD_PER_HOUR</code>.</p>"
        if unpriced
        else ""
    )
    return (
        f'<section id="prices"><h2>Prices</h2><p>Cost = hosts x price per hour x wall time; '
        f"cost per epoch = hosts x price per hour x time per epoch. The bundled table is as "
        f"of <strong>{_e(prices.as_of)}</strong>: {_e(prices.what)}</p>"
        f"<ul>{items}</ul>{missing}</section>"
    )


def render_compare_page(
    comparison: Comparison,
    chart: Chart | None,
    prices: PriceTable,
    per_rank_rule: str,
    warnings: Sequence[str],
) -> str:
    header, rows = table(comparison)
    numeric = [i for i, column in enumerate(columns(comparison)) if column.numeric]
    classes = ["" if row.compared else "failed" for row in comparison.rows]
    body = _table(header, ([_e(cell) for cell in row] for row in rows), numeric, classes)
    figure = (
        f'<img id="scaling-chart" src="{_e(chart.file)}" alt="{_e(chart.title)}">'
        if chart is not None
        else '<p class="note">No chart: no run compared on a throughput metric.</p>'
    )
    warned = "".join(f"<li>{_e(w)}</li>" for w in warnings)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>ringleader scaling study</title><style>{CSS}{COMPARE_CSS}</style></head>\n"
        "<body><main>"
        "<h1>ringleader scaling study</h1>"
        f'<section id="summary">{_summary(comparison, per_rank_rule)}{figure}</section>'
        f'<section id="runs"><h2>Runs</h2><div id="compare-table">{body}</div>'
        f'<p class="note">The same table as CSV: <a href="{CSV_FILE}">{CSV_FILE}</a>.</p>'
        "</section>"
        + _left_out(comparison)
        + _prices(comparison, prices)
        + (
            f'<section id="warnings"><h2>Warnings</h2><ul class="warn">{warned}</ul></section>'
            if warnings
            else ""
        )
        + "</main></body></html>\n"
    )
