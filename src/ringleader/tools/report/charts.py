"""The report's PNG charts, drawn with matplotlib's Agg renderer (no display, no pyplot state)."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib import rcParams
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ringleader.core import timeline as phases
from ringleader.core.attempts import AttemptRecord
from ringleader.tools.report import jobinfo
from ringleader.tools.report.autotune import AutotuneLog
from ringleader.tools.report.metrics import Metric
from ringleader.tools.report.model import Report, metric_attempt_starts
from ringleader.tools.report.timeline import TimelineSummary

DPI = 100
WIDTH = 11.0  # inches: 1100 px, the page's content width
MAX_METRIC_CHARTS = 24
MAX_LEGEND_RANKS = 12
TOP_OPS = 12
TOP_TENSORS = 20

OK, FAILED, ROOT_CAUSE, STOPPED = "#2e8b57", "#e8833a", "#c0392b", "#9aa5b1"
BAR, ACTIVITY, ACCENT = "#3b6ea8", "#8fb3d9", "#c0392b"
ATTEMPT_LINE = "#5b6b7c"  # where an attempt starts (restarts in place)
PHASE_COLORS = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
    "#86bcb6",
    "#d37295",
    "#fabfd2",
    "#8cd17d",
    "#499894",
    "#f1ce63",
    "#79706e",
)


@dataclass(frozen=True)
class Chart:
    key: str  # what the page asks for: "ranks", "metric:<name>", "timeline-ops:<i>", ...
    file: str  # PNG file name in the report folder
    title: str


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:60] or "metric"


def _figure(height: float) -> Figure:
    return Figure(figsize=(WIDTH, height), dpi=DPI, layout="constrained")


def _save(figure: Figure, out_dir: Path, chart: Chart) -> Chart:
    figure.savefig(out_dir / chart.file, dpi=DPI, facecolor="white")
    return chart


def _label_height(rows: int, per_row: float = 0.32, minimum: float = 2.4) -> float:
    return min(24.0, max(minimum, 1.2 + per_row * rows))


def render_all(report: Report, out_dir: Path) -> list[Chart]:
    charts: list[Chart] = []
    start = report.start_time
    job = report.job
    if job is not None and job.timeline:
        charts.append(_launcher(job.timeline, out_dir, job.attempts))
    if job is not None and job.ranks:
        charts.append(_ranks(report, out_dir))
    if job is not None and job.progress:
        charts.extend(_progress(report, out_dir))
    used: set[str] = set()
    attempt_starts = metric_attempt_starts(report)
    for metric in report.metrics.metrics[:MAX_METRIC_CHARTS]:
        slug = _slug(metric.name)
        while slug in used:
            slug += "-"
        used.add(slug)
        figure = metric_figure(metric, start, report.time_axis, attempt_starts)
        chart = Chart(f"metric:{metric.name}", f"metric-{slug}.png", metric.name)
        charts.append(_save(figure, out_dir, chart))
    for i, timeline in enumerate(report.timelines, 1):
        suffix = "" if len(report.timelines) == 1 else f"-{i}"
        charts.extend(_timeline(timeline.value, i, suffix, out_dir))
    for i, log in enumerate(report.autotune, 1):
        suffix = "" if len(report.autotune) == 1 else f"-{i}"
        if log.value.samples:
            charts.append(_autotune(log.value, i, f"autotune{suffix}.png", out_dir))
    return charts


def _launcher(
    marks: Sequence[phases.Mark], out_dir: Path, attempts: Sequence[AttemptRecord] = ()
) -> Chart:
    """A Gantt chart of the launcher: a row per host, a bar per phase (the time it took to
    reach it), colored by phase. A job that restarted its ranks gets a row of its attempts on
    top, a bar per attempt (its number and exit code), and a dashed line where each starts."""
    spans = phases.spans(marks)
    hosts = list(dict.fromkeys(mark.host for mark in marks))
    origin = min(mark.at for mark in marks)
    colors = {phase: PHASE_COLORS[i % len(PHASE_COLORS)] for i, phase in enumerate(phases.PHASES)}
    shown = list(attempts) if jobinfo.restarted(attempts) else []
    labels = [*hosts, "attempts"] if shown else hosts
    figure = _figure(_label_height(len(labels), per_row=0.45))
    axes = figure.add_subplot()
    rows = {host: len(hosts) - 1 - index for index, host in enumerate(hosts)}  # leader on top
    for span in spans:
        axes.barh(
            rows[span.host],
            max(span.seconds, 0.002),
            left=span.start - origin,
            color=colors.get(span.phase, BAR),
            height=0.6,
        )
    for attempt in shown:
        begin = attempt.started_at - origin
        axes.axvline(begin, color=ATTEMPT_LINE, linestyle="--", linewidth=1)
        axes.barh(
            len(hosts),
            max(jobinfo.attempt_duration(attempt), 0.002),
            left=begin,
            color=OK if attempt.cause is None else FAILED,
            edgecolor="white",
            height=0.6,
        )
        axes.text(
            begin,
            len(hosts),
            f" {attempt.attempt}: exit {attempt.exit_code}",
            va="center",
            fontsize=8,
            clip_on=True,
        )
    ticks = [rows[host] for host in hosts] + ([len(hosts)] if shown else [])  # attempts on top
    axes.set_yticks(ticks, labels)
    axes.set_xlabel("seconds since the first host's entry point started")
    axes.set_title(
        "Launcher: how long each host took to reach each phase"
        + (f"; {jobinfo.attempts_headline(shown)}" if shown else "")
    )
    used = [phase for phase in phases.PHASES if any(span.phase == phase for span in spans)]
    handles = [Patch(color=colors[phase], label=phase) for phase in used]
    if shown:
        handles.append(Patch(color=OK, label="attempt succeeded"))
        handles.append(Patch(color=FAILED, label="attempt failed"))
    figure.legend(
        handles=handles,
        loc="outside lower center",
        ncols=4,
        fontsize=8,
        frameon=False,
    )
    return _save(figure, out_dir, Chart("launcher", "launcher.png", "Launcher timeline"))


def _ranks(report: Report, out_dir: Path) -> Chart:
    assert report.job is not None
    job = report.job
    start = report.start_time or 0.0
    records = list(reversed(job.ranks))  # rank 0 on top
    figure = _figure(_label_height(len(records)))
    axes = figure.add_subplot()
    for row, record in enumerate(records):
        if jobinfo.is_root_cause(record, job.root_cause):
            color = ROOT_CAUSE
        elif record.terminated:
            color = STOPPED
        elif record.failed:
            color = FAILED
        else:
            color = OK
        begin = record.started_at - start
        axes.barh(row, jobinfo.duration(record), left=begin, color=color, height=0.6)
        axes.text(
            begin + jobinfo.duration(record),
            row,
            f"  {jobinfo.short_status(record)}",
            va="center",
            fontsize=9,
        )
    axes.set_yticks(range(len(records)), [f"rank {r.rank} ({r.host})" for r in records])
    axes.set_xlabel(report.time_axis)
    axes.set_title(
        "Ranks: when each ran and how it ended"
        + (
            f" (attempt {max(r.attempt for r in records)})"
            if jobinfo.restarted(job.attempts)
            else ""
        )
    )
    axes.margins(x=0.3)
    figure.legend(
        handles=[
            Patch(color=OK, label="exit 0"),
            Patch(color=FAILED, label="failed"),
            Patch(color=STOPPED, label="told to stop"),
            Patch(color=ROOT_CAUSE, label="root cause"),
        ],
        loc="outside lower center",
        ncols=4,
        fontsize=8,
        frameon=False,
    )
    return _save(figure, out_dir, Chart("ranks", "ranks.png", "Ranks"))


def _progress(report: Report, out_dir: Path) -> list[Chart]:
    """The job's step over time (a shaded span where a straggler was named), and each rank's
    speed between two status lines (a heatmap: rank x time)."""
    assert report.job is not None
    samples, episodes = report.job.progress, report.job.stragglers
    start = report.start_time or samples[0].at
    figure = _figure(3.2)
    axes = figure.add_subplot()
    axes.plot([s.at - start for s in samples], [s.step for s in samples], marker=".", color=OK)
    total = samples[-1].total
    if total:
        axes.axhline(total, linestyle="--", color="#888888", linewidth=1)
    for episode in episodes:
        end = episode.until if episode.until is not None else samples[-1].at
        axes.axvspan(episode.since - start, end - start, color=FAILED, alpha=0.15)
    axes.set_xlabel(report.time_axis)
    axes.set_ylabel("step")
    axes.set_title("Progress: the job's step (its lowest rank's)")
    charts = [_save(figure, out_dir, Chart("progress", "progress.png", "Progress"))]
    ranks = sorted({rank for sample in samples for rank in sample.steps})
    pairs = list(itertools.pairwise(samples))
    if not ranks or not pairs:
        return charts
    speeds = [
        [
            (later.steps[rank] - earlier.steps[rank]) / (later.at - earlier.at)
            if rank in later.steps and rank in earlier.steps and later.at > earlier.at
            else float("nan")
            for earlier, later in pairs
        ]
        for rank in ranks
    ]
    figure = _figure(_label_height(len(ranks), 0.25, 2.6))
    axes = figure.add_subplot()
    shown = axes.imshow(
        speeds,
        aspect="auto",
        interpolation="nearest",
        cmap="viridis",
        extent=(pairs[0][0].at - start, pairs[-1][1].at - start, len(ranks) - 0.5, -0.5),
    )
    axes.set_yticks(range(len(ranks)), [f"rank {rank}" for rank in ranks])
    axes.set_xlabel(report.time_axis)
    axes.set_title("Each rank's speed between two status lines")
    figure.colorbar(shown, ax=axes, label="steps/s")
    charts.append(_save(figure, out_dir, Chart("speed", "speed.png", "Each rank's speed")))
    return charts


def metric_figure(
    metric: Metric,
    start: float | None,
    axis_label: str,
    attempt_starts: Sequence[tuple[int, float]] = (),
) -> Figure:
    """A line per rank; with attempt_starts (metrics of more than one attempt), a rank's
    points of each attempt are a line of their own, in the rank's color, and a dashed line
    marks where each attempt starts."""
    zero = start if start is not None else 0.0
    figure = _figure(3.4)
    axes = figure.add_subplot()
    palette = rcParams["axes.prop_cycle"].by_key()["color"]
    drawn = 0
    for series in metric.series:
        runs = []
        for _attempt, times, values in series.by_attempt():
            pairs = zip(times, values, strict=True)
            points = [(t - zero, v) for t, v in pairs if math.isfinite(v)]
            if points:
                runs.append(points)
        if not runs:
            continue
        style = "o-" if sum(len(points) for points in runs) <= 40 else "-"
        label: str | None = f"rank {series.rank} ({series.host})"
        color = palette[drawn % len(palette)]
        drawn += 1
        for points in runs:
            xs, ys = zip(*points, strict=True)
            axes.plot(xs, ys, style, color=color, markersize=3, linewidth=1.4, label=label)
            label = None  # one legend entry per rank
    for attempt, at in attempt_starts:
        axes.axvline(at - zero, color=ATTEMPT_LINE, linestyle="--", linewidth=1)
        axes.text(
            at - zero,
            0.98,
            f" attempt {attempt}",
            transform=axes.get_xaxis_transform(),
            va="top",
            fontsize=8,
            color=ATTEMPT_LINE,
        )
    axes.set_title(metric.name)
    axes.set_xlabel(axis_label)
    axes.grid(True, alpha=0.3)
    if 1 < len(metric.series) <= MAX_LEGEND_RANKS:
        figure.legend(loc="outside right upper", fontsize=8, frameon=False)
    return figure


def _barh(
    axes: Axes, labels: Sequence[str], values: Sequence[float], colors: Sequence[str]
) -> None:
    rows = list(range(len(labels)))[::-1]
    axes.barh(rows, values, color=colors, height=0.65)
    axes.set_yticks(rows, labels)
    axes.grid(True, axis="x", alpha=0.3)


def _timeline(summary: TimelineSummary, index: int, suffix: str, out_dir: Path) -> list[Chart]:
    charts = []
    ops = summary.ops[:TOP_OPS]
    if ops:
        figure = _figure(_label_height(len(ops)))
        axes = figure.add_subplot()
        _barh(
            axes,
            [op.name + ("  (activity)" if op.activity else "") for op in ops],
            [op.total_us / 1e6 for op in ops],
            [ACTIVITY if op.activity else BAR for op in ops],
        )
        axes.set_xlabel("total seconds, summed over tensors")
        axes.set_title("Horovod timeline: top operations and activities by total time")
        charts.append(
            _save(
                figure,
                out_dir,
                Chart(f"timeline-ops:{index}", f"timeline-ops{suffix}.png", "Top operations"),
            )
        )
    tensors = summary.allreduce[:TOP_TENSORS]
    if tensors:
        figure = _figure(_label_height(len(tensors)))
        axes = figure.add_subplot()
        _barh(
            axes,
            [_short(t.tensor) for t in tensors],
            [t.total_us / 1e3 for t in tensors],
            [BAR] * len(tensors),
        )
        axes.set_xlabel("total allreduce milliseconds")
        axes.set_title("Allreduce time per tensor")
        charts.append(
            _save(
                figure,
                out_dir,
                Chart(
                    f"timeline-allreduce:{index}",
                    f"timeline-allreduce{suffix}.png",
                    "Allreduce time per tensor",
                ),
            )
        )
    if summary.waits:
        waits = summary.waits
        figure = _figure(_label_height(len(waits), minimum=2.8))
        axes = figure.add_subplot()
        most_last = max(w.last_count for w in waits)
        _barh(
            axes,
            [f"rank {w.rank}" for w in waits],
            [w.wait_us / 1e3 for w in waits],
            [ACCENT if most_last and w.last_count == most_last else BAR for w in waits],
        )
        for row, wait in zip(range(len(waits) - 1, -1, -1), waits, strict=True):
            axes.text(
                wait.wait_us / 1e3,
                row,
                f"  last ready {wait.last_count}x",
                va="center",
                fontsize=8,
            )
        axes.margins(x=0.2)
        axes.set_xlabel("milliseconds waited for the other ranks during negotiation")
        axes.set_title("Negotiation wait per rank (red: most often the last rank to be ready)")
        charts.append(
            _save(
                figure,
                out_dir,
                Chart(f"timeline-waits:{index}", f"timeline-waits{suffix}.png", "Negotiation wait"),
            )
        )
    return charts


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else "..." + text[-(limit - 3) :]


def _autotune(log: AutotuneLog, index: int, file: str, out_dir: Path) -> Chart:
    figure = _figure(3.6)
    axes = figure.add_subplot()
    xs = [s.index for s in log.samples]
    ys = [s.score for s in log.samples]
    axes.plot(xs, ys, "o-", color=BAR, markersize=4, linewidth=1.2)
    best = log.best
    if best is not None:
        axes.plot([best.index], [best.score], "*", color=ACCENT, markersize=16, label="best")
        axes.annotate(
            f"best {best.score:.4g}",
            (best.index, best.score),
            textcoords="offset points",
            xytext=(8, -14),
            color=ACCENT,
            fontsize=9,
        )
    axes.set_xlabel("sample")
    axes.set_ylabel("score (bytes/us)")
    axes.set_title("Horovod autotune: score per sample")
    axes.grid(True, alpha=0.3)
    return _save(figure, out_dir, Chart(f"autotune:{index}", file, "Autotune score"))
