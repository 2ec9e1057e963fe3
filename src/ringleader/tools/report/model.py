"""Everything read from a job's output, parsed into one Report, and its text summary (pure)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from ringleader.core.attempts import AttemptRecord
from ringleader.core.hang import HangReport
from ringleader.core.jobfile import JobFileError, JobSummary, parse_job_file
from ringleader.core.jsontext import parse_json
from ringleader.tools.report import jobinfo
from ringleader.tools.report.autotune import AutotuneError, AutotuneLog, parse_autotune
from ringleader.tools.report.jobinfo import Outcome
from ringleader.tools.report.metrics import Metrics, parse_metrics
from ringleader.tools.report.timeline import TimelineError, TimelineSummary, summarise_text

T = TypeVar("T")


@dataclass(frozen=True)
class TextFile:
    path: str  # relative to PATH
    text: str


@dataclass(frozen=True)
class LogTail:
    host: str
    rank: int
    path: str  # relative to PATH
    lines: tuple[str, ...]
    link: str | None = None  # relative to the report's folder, when the log stays on disk


@dataclass(frozen=True)
class Inputs:
    """The job's files as read from disk; load.py makes it."""

    source: str
    jobs: tuple[TextFile, ...] = ()
    failures: tuple[TextFile, ...] = ()
    successes: tuple[str, ...] = ()
    metrics: tuple[TextFile, ...] = ()
    timelines: tuple[TextFile, ...] = ()
    autotune: tuple[TextFile, ...] = ()
    logs: tuple[LogTail, ...] = ()
    hangs: tuple[TextFile, ...] = ()  # hang/stacks.json, the leader's first
    problems: tuple[str, ...] = ()  # files that could not be read


@dataclass(frozen=True)
class Sourced(Generic[T]):
    path: str
    value: T


@dataclass(frozen=True)
class Report:
    source: str
    outcome: Outcome
    job: JobSummary | None
    metrics: Metrics
    timelines: tuple[Sourced[TimelineSummary], ...]
    autotune: tuple[Sourced[AutotuneLog], ...]
    logs: tuple[LogTail, ...]
    files: tuple[str, ...]  # every file the report read
    warnings: tuple[str, ...]
    hang: Sourced[HangReport] | None = None  # every rank's stacks, after a hang or on demand

    @property
    def attempts(self) -> tuple[AttemptRecord, ...]:
        """Every start of the job's ranks (job.json), in order; () without job.json."""
        return self.job.attempts if self.job is not None else ()

    @property
    def start_time(self) -> float | None:
        """The zero of every time axis: the first attempt's start when the job restarted its
        ranks (job.json's ranks are the last attempt's), else the first rank's start, else
        the first metric."""
        times: list[float] = []
        if self.job is not None:
            if jobinfo.restarted(self.job.attempts):
                times.extend(attempt.started_at for attempt in self.job.attempts)
            times.extend(record.started_at for record in self.job.ranks)
        if times:
            return min(times)
        return self.metrics.first_timestamp

    @property
    def time_axis(self) -> str:
        """What the charts' time axes count from (start_time)."""
        if jobinfo.restarted(self.attempts):
            return f"seconds since attempt {self.attempts[0].attempt} started"
        return "seconds since the first rank started" if self.start_time is not None else "seconds"


def metric_attempt_starts(report: Report) -> tuple[tuple[int, float], ...]:
    """(attempt, epoch seconds) where each attempt starts on the metric charts, when the
    metrics come from more than one attempt (else ()): the leader's start of the attempt
    (job.json), else the attempt's first metric point."""
    firsts = report.metrics.attempt_starts
    if len(firsts) < 2:
        return ()
    recorded = {attempt.attempt: attempt.started_at for attempt in report.attempts}
    return tuple((attempt, recorded.get(attempt, first)) for attempt, first in firsts.items())


def _parse_each(
    files: Sequence[TextFile],
    parse: Callable[[str], T],
    errors: tuple[type[Exception], ...],
    warnings: list[str],
) -> list[Sourced[T]]:
    parsed = []
    for file in files:
        try:
            parsed.append(Sourced(file.path, parse(file.text)))
        except errors as error:
            warnings.append(f"{file.path}: skipped: {error}")
    return parsed


def _parse_hang(text: str) -> HangReport:
    return HangReport.from_json(parse_json(text))


def _first(parsed: list[Sourced[T]], name: str, warnings: list[str]) -> Sourced[T] | None:
    """The first of the files (the leader's), with a warning naming the others."""
    if len(parsed) > 1:
        others = ", ".join(p.path for p in parsed[1:])
        warnings.append(
            f"{len(parsed)} {name} files; the report uses {parsed[0].path}, not {others}"
        )
    return parsed[0] if parsed else None


def build_report(inputs: Inputs) -> Report:
    warnings = list(inputs.problems)
    jobs = _parse_each(inputs.jobs, parse_job_file, (JobFileError,), warnings)
    first_job = _first(jobs, "job.json", warnings)
    job = first_job.value if first_job else None
    if jobs:
        warnings.extend(f"{jobs[0].path}: {problem}" for problem in jobs[0].value.problems)
    outcome = jobinfo.decide_outcome(job, [f.text for f in inputs.failures], len(inputs.successes))

    metrics = parse_metrics(line for f in inputs.metrics for line in f.text.splitlines())
    if metrics.skipped_lines:
        warnings.append(f"metrics.jsonl: skipped {metrics.skipped_lines} malformed line(s)")

    timelines = _parse_each(inputs.timelines, summarise_text, (TimelineError,), warnings)
    for timeline in timelines:
        if timeline.value.truncated:
            warnings.append(
                f"{timeline.path}: the timeline ends early (Horovod was still writing it); "
                "every complete event was read"
            )
    autotune = _parse_each(inputs.autotune, parse_autotune, (AutotuneError,), warnings)
    for log in autotune:
        if log.value.skipped_rows:
            warnings.append(f"{log.path}: skipped {log.value.skipped_rows} malformed row(s)")
    hangs = _parse_each(inputs.hangs, _parse_hang, (ValueError,), warnings)
    hang = _first(hangs, "hang/stacks.json", warnings)

    files = [
        *(f.path for f in inputs.jobs),
        *(f.path for f in inputs.failures),
        *inputs.successes,
        *(f.path for f in inputs.metrics),
        *(f.path for f in inputs.timelines),
        *(f.path for f in inputs.autotune),
        *(log.path for log in inputs.logs),
        *(f.path for f in inputs.hangs),
    ]
    return Report(
        source=inputs.source,
        outcome=outcome,
        job=job,
        metrics=metrics,
        timelines=tuple(timelines),
        autotune=tuple(autotune),
        logs=inputs.logs,
        files=tuple(files),
        warnings=tuple(warnings),
        hang=hang,
    )


# ---------------------------------------------------------------------------- text summary
def seconds(value: float) -> str:
    """A duration for people: 850 us, 12.3 ms, 4.56 s, 3 min 20 s."""
    if value < 0.001:
        return f"{value * 1e6:.0f} us"
    if value < 1:
        return f"{value * 1e3:.1f} ms"
    if value < 120:
        return f"{value:.2f} s"
    minutes, rest = divmod(value, 60)
    return f"{minutes:.0f} min {rest:.0f} s"


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def first_line(text: str, limit: int = 200) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def summary_lines(report: Report) -> list[str]:
    lines = [f"Job: {report.outcome.headline}"]
    job = report.job
    if job is not None:
        lines[0] += f"; {job.world_size} rank(s) on {len(job.hosts)} host(s)"
    if report.outcome.failure:
        lines.append(f"Cause: {first_line(report.outcome.failure)}")
    headline = jobinfo.attempts_headline(report.attempts)
    if headline is not None:
        lines.append(f"Attempts: {headline}")
        lines.extend(f"  {attempt.describe()}" for attempt in report.attempts)
    if job is not None and job.ranks:
        stopped = sum(1 for r in job.ranks if r.failed and r.terminated)
        failed = sum(1 for r in job.ranks if r.failed and not r.terminated)
        longest = max(job.ranks, key=jobinfo.duration)
        which = f" (attempt {max(r.attempt for r in job.ranks)})" if headline else ""
        lines.append(
            f"Ranks{which}: {len(job.ranks) - failed - stopped} exited 0, {failed} failed, "
            f"{stopped} were told to stop; longest rank {longest.rank} ({longest.host}) ran "
            f"{seconds(jobinfo.duration(longest))}"
        )
    if report.hang is not None:
        lines.extend(_hang_lines(report.hang))
    for metric in report.metrics.metrics:
        lines.append(
            f"Metric {metric.name}: {metric.points} point(s) from {len(metric.series)} rank(s), "
            f"last {number(metric.last)}, min {number(metric.minimum)}, "
            f"max {number(metric.maximum)}"
        )
    for timeline in report.timelines:
        lines.append(f"Timeline {timeline.path}: {timeline_line(timeline.value)}")
    for log in report.autotune:
        lines.append(f"Autotune {log.path}: {autotune_line(log.value)}")
    if report.warnings:
        lines.append(f"Warnings: {len(report.warnings)} (see the report)")
    return lines


def _hang_lines(hang: Sourced[HangReport]) -> list[str]:
    """Every rank's stacks, grouped by stack as the leader logged them."""
    header = f"Stacks of every rank ({hang.value.reason}, {hang.path}):"
    return [header, *(f"  {line}" for line in hang.value.summary_lines())]


def timeline_line(summary: TimelineSummary) -> str:
    span = seconds(summary.span_us / 1e6)
    parts = [f"{summary.events} events, {summary.tensors} tensor(s) over {span}"]
    top = [op for op in summary.ops if not op.activity]
    if top:
        parts.append(f"most time in {top[0].name} ({seconds(top[0].total_us / 1e6)})")
    if summary.waits:
        waiter = max(summary.waits, key=lambda w: (w.wait_us, -w.rank))
        parts.append(
            f"longest negotiation wait rank {waiter.rank} ({seconds(waiter.wait_us / 1e6)})"
        )
        straggler = max(summary.waits, key=lambda w: (w.last_count, -w.rank))
        if straggler.last_count:
            parts.append(
                f"last to be ready most often rank {straggler.rank} "
                f"({straggler.last_count} of {summary.negotiations})"
            )
    return "; ".join(parts)


def autotune_line(log: AutotuneLog) -> str:
    best = log.best
    if best is None:
        return "no scored samples yet (Horovod scores after a few hundred steps)"
    params = ", ".join(f"{name}={value}" for name, value in best.params)
    state = "finished" if log.finished else "still tuning when the log ended"
    return (
        f"{len(log.samples)} sample(s), {state}; best score {best.score:.6g} "
        f"(sample {best.index}): {params}"
    )
