"""One run of a scaling study as compare_model needs it, from its Report (pure).

The rules (docs/report.md, "Comparing runs"):
- throughput: each rank's typical value of the metric is the median of its points, the first
  left out when there are three or more (the first interval holds the warm-up). A metric
  whose name says it counts one rank (`per_rank`, `per_worker`, `per_gpu`, `per_device`, or
  `--per-rank`) is added up over the ranks: the mean of the ranks that reported it times the
  job's ranks, which is their sum when every rank reported. Any other metric is the job's
  total already: the median of the ranks that reported it (they report the same figure).
- epochs: the points of the epoch metric (default `epoch`) of its lowest reporting rank; a new
  value marks an epoch's end. Time per epoch = (last mark - first mark) / (marks - 1); with
  one mark, the time from the ranks' start to it.
- wall time: from the job's first record (a host's entry point, a rank's start) to its last
  (a host's exit, a rank's end), from job.json; startup: core.timeline.startup_seconds.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

from ringleader.core import timeline as phases
from ringleader.core.jobfile import JobSummary
from ringleader.core.runfile import RunInfo
from ringleader.core.straggler import Straggler
from ringleader.tools.report.compare_model import RunFacts, Throughput
from ringleader.tools.report.metrics import Metric, Metrics
from ringleader.tools.report.model import Report

EPOCH_METRIC = "epoch"
WARM_UP_POINTS = 1  # left out of a rank's values when it has at least MIN_POINTS
MIN_POINTS = 3
_PER_RANK = re.compile(r"per[ _-]?(rank|worker|gpu|device)", re.IGNORECASE)


def is_per_rank(name: str) -> bool:
    """The metric's name says it counts one rank's work."""
    return _PER_RANK.search(name) is not None


def typical(values: Sequence[float]) -> float:
    """A rank's throughput: the median of its values, without the warm-up point."""
    kept = values[WARM_UP_POINTS:] if len(values) >= MIN_POINTS else values
    return statistics.median(kept)


def job_throughput(metric: Metric, ranks: int, per_rank: bool) -> Throughput | None:
    per_rank_values = [typical(series.values) for series in metric.series if series.values]
    if not per_rank_values:
        return None
    reporting = len(per_rank_values)
    if not per_rank:
        return Throughput(statistics.median(per_rank_values), False, reporting)
    total = statistics.fmean(per_rank_values) * max(ranks, reporting)
    note = None
    if reporting < ranks:
        note = f"{reporting} of {ranks} ranks reported it: their mean x {ranks}"
    return Throughput(total, True, reporting, note)


def epoch_marks(metric: Metric) -> list[float]:
    """When each epoch ended: the times a new value appears in the lowest rank's series."""
    series = next((s for s in metric.series if s.values), None)
    if series is None:
        return []
    marks, seen = [], set()
    for at, value in zip(series.times, series.values, strict=True):
        if value not in seen:
            seen.add(value)
            marks.append(at)
    return marks


def epoch_seconds(marks: Sequence[float], start: float | None) -> float | None:
    if len(marks) >= 2:
        return (marks[-1] - marks[0]) / (len(marks) - 1)
    if len(marks) == 1 and start is not None:
        return marks[0] - start
    return None


def wall_seconds(job: JobSummary) -> float | None:
    starts = [mark.at for mark in job.timeline]
    starts += [record.started_at for record in job.ranks]
    starts += [attempt.started_at for attempt in job.attempts]
    ends = [mark.at for mark in job.timeline]
    ends += [record.ended_at for record in job.ranks]
    ends += [attempt.ended_at for attempt in job.attempts]
    if not starts or not ends:
        return None
    return max(ends) - min(starts)


def find_metric(metrics: Metrics, name: str) -> Metric | None:
    return next((metric for metric in metrics.metrics if metric.name == name), None)


def run_facts(
    source: str,
    report: Report,
    info: RunInfo | None,
    throughput: str | None,
    per_rank: bool = False,
    epoch_metric: str = EPOCH_METRIC,
) -> RunFacts:
    """The run's row before the comparison: hosts and ranks from job.json (run.json when the
    job ended before it wrote one), throughput, epochs, times."""
    job = report.job
    hosts = len(job.hosts) if job is not None else (info.hosts if info else None) or 0
    ranks = job.world_size if job is not None else 0
    measured = None
    if throughput is not None and (metric := find_metric(report.metrics, throughput)):
        measured = job_throughput(metric, ranks, per_rank or is_per_rank(throughput))
    epochs = find_metric(report.metrics, epoch_metric)
    marks = epoch_marks(epochs) if epochs is not None else []
    return RunFacts(
        source=source,
        hosts=hosts,
        ranks=ranks,
        succeeded=report.outcome.succeeded,
        outcome=report.outcome.headline,
        program=info.program if info else None,
        instance_type=info.instance_type if info else None,
        wall_seconds=wall_seconds(job) if job is not None else None,
        startup_seconds=phases.startup_seconds(job.timeline) if job is not None else None,
        throughput=measured,
        epochs=len(marks),
        epoch_seconds=epoch_seconds(marks, report.start_time),
        slowest_rank=slowest_rank(job.stragglers) if job is not None else None,
    )


def slowest_rank(episodes: Sequence[Straggler]) -> str | None:
    """The rank the straggler watch named for the longest time in all, with its host."""
    named: dict[tuple[int, str], float] = {}
    for episode in episodes:
        end = episode.until if episode.until is not None else episode.since
        key = (episode.rank, episode.host)
        named[key] = named.get(key, 0.0) + max(end - episode.since, 0.0)
    if not named:
        return None
    (rank, host), seconds = max(named.items(), key=lambda item: (item[1], -item[0][0]))
    return f"rank {rank} on {host} ({seconds:.0f} s)"
