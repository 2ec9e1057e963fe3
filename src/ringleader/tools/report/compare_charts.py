"""The comparison's chart: throughput against ranks with the ideal (linear) line, and scaling
efficiency against ranks; only the compared runs are drawn."""

from __future__ import annotations

from pathlib import Path

from matplotlib.ticker import MaxNLocator, PercentFormatter

from ringleader.tools.report.charts import ACCENT, BAR, Chart, _figure, _save
from ringleader.tools.report.compare_model import Comparison

SCALING_CHART = "scaling.png"
IDEAL = "#8a96a3"


def render_scaling(comparison: Comparison, out_dir: Path) -> Chart | None:
    """None when there is nothing to draw: no throughput, or no run compared."""
    points = sorted(
        (row.run.ranks, row.run.throughput.value, row.ideal, row.efficiency)
        for row in comparison.compared
        if row.run.throughput is not None and row.ideal is not None and row.efficiency is not None
    )
    if not points or comparison.metric is None:
        return None
    ranks = [p[0] for p in points]
    figure = _figure(4.2)
    left, right = figure.subplots(1, 2)
    left.plot(ranks, [p[2] for p in points], "--", color=IDEAL, label="ideal (linear)")
    left.plot(ranks, [p[1] for p in points], "o-", color=BAR, label=comparison.metric)
    left.set_title(f"{comparison.metric} against ranks")
    left.set_xlabel("ranks")
    left.set_ylabel(comparison.metric)
    left.set_ylim(bottom=0)
    left.legend(loc="upper left")
    right.axhline(1.0, linestyle="--", color=IDEAL, label="ideal (100 %)")
    right.plot(ranks, [p[3] for p in points], "o-", color=ACCENT, label="scaling efficiency")
    right.set_title("scaling efficiency against ranks")
    right.set_xlabel("ranks")
    right.yaxis.set_major_formatter(PercentFormatter(1.0))
    right.set_ylim(0, max(1.1, max(p[3] for p in points) * 1.1))
    right.legend(loc="lower left")
    for axes in (left, right):
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.grid(alpha=0.3)
    title = f"{comparison.metric} and scaling efficiency against ranks"
    return _save(figure, out_dir, Chart("scaling", SCALING_CHART, title))
