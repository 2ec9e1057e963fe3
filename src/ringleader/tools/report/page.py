"""The report as one HTML page (pure): inline CSS, no script, images by relative file name."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from html import escape

from ringleader.core import timeline as phases
from ringleader.core.attempts import AttemptRecord
from ringleader.core.hang import rank_text
from ringleader.tools.report import jobinfo
from ringleader.tools.report.autotune import AutotuneLog
from ringleader.tools.report.charts import Chart
from ringleader.tools.report.model import (
    Report,
    first_line,
    metric_attempt_starts,
    number,
    seconds,
    timeline_line,
)
from ringleader.tools.report.timeline import TimelineSummary

TABLE_ROWS = 30

CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
  color: #1d2733; background: #f4f6f8; margin: 0; }
main { max-width: 1180px; margin: 0 auto; padding: 20px 24px 40px; }
h1 { font-size: 24px; margin: 8px 0 4px; }
h2 { font-size: 19px; margin: 0 0 10px; }
h3 { font-size: 16px; margin: 18px 0 8px; }
section { background: #fff; border: 1px solid #dde3ea; border-radius: 6px; padding: 16px 20px;
  margin: 16px 0; }
.source { color: #5b6b7c; font-family: ui-monospace, "DejaVu Sans Mono", monospace;
  font-size: 13px; word-break: break-all; }
.banner { border-radius: 6px; padding: 12px 18px; font-size: 18px; font-weight: 600;
  margin: 14px 0; }
.ok { background: #e3f4ea; color: #1e6b43; border: 1px solid #a9d9bd; }
.bad { background: #fbe6e4; color: #8e2419; border: 1px solid #eeb4ad; }
.unknown { background: #eef1f4; color: #44515f; border: 1px solid #cdd5de; }
nav a { margin-right: 14px; color: #2f5f94; }
table { border-collapse: collapse; width: 100%; font-size: 13.5px; margin: 6px 0 10px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e6eaef;
  vertical-align: top; }
th { background: #f0f3f6; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.root td { background: #fdeeed; font-weight: 600; }
tr.failed td { color: #8e2419; }
#attempts td { white-space: nowrap; }
#attempts td:last-child { white-space: normal; }
ul.attempts { margin: 6px 0 10px; padding-left: 20px; }
pre { background: #1f2630; color: #e8edf2; padding: 10px 12px; border-radius: 5px;
  overflow-x: auto; font-size: 12.5px; line-height: 1.4; white-space: pre-wrap;
  word-break: break-word; }
img { max-width: 100%; height: auto; display: block; margin: 8px 0 14px;
  border: 1px solid #e6eaef; }
.note { color: #5b6b7c; font-size: 13px; }
.warn li { color: #8a5a00; }
details { margin: 6px 0; }
summary { cursor: pointer; font-weight: 600; }
code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 13px; }
"""


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _utc(epoch: float) -> str:
    moment = datetime.fromtimestamp(epoch, timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def _table(
    headers: Sequence[str],
    rows: Iterable[Sequence[object]],
    numeric: Iterable[int] = (),
    row_classes: Sequence[str] | None = None,
) -> str:
    right = set(numeric)

    def cell(tag: str, i: int, value: object) -> str:
        css = ' class="num"' if i in right else ""
        return f"<{tag}{css}>{value}</{tag}>"

    head = "".join(cell("th", i, _e(h)) for i, h in enumerate(headers))
    body = []
    for n, row in enumerate(rows):
        css = f' class="{row_classes[n]}"' if row_classes and row_classes[n] else ""
        body.append(f"<tr{css}>" + "".join(cell("td", i, v) for i, v in enumerate(row)) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _more(total: int, shown: int, what: str) -> str:
    if total <= shown:
        return ""
    return f'<p class="note">and {total - shown} more {_e(what)} not shown</p>'


def _img(charts: Mapping[str, Chart], key: str) -> str:
    chart = charts.get(key)
    if chart is None:
        return ""
    return f'<img src="{_e(chart.file)}" alt="{_e(chart.title)}">'


def _pre(lines: Iterable[str]) -> str:
    return f"<pre>{_e(chr(10).join(lines))}</pre>"


# ---------------------------------------------------------------------------- sections
def _outcome(report: Report) -> str:
    outcome = report.outcome
    css = "unknown" if not outcome.known else ("ok" if outcome.succeeded else "bad")
    text = f"Job {outcome.headline}"
    job = report.job
    if job is not None:
        text += f": {job.world_size} rank(s) on {len(job.hosts)} host(s)"
        if job.hosts:
            text += f" ({', '.join(job.hosts)})"
    parts = [f'<div class="banner {css}">{_e(text)}</div>']
    headline = jobinfo.attempts_headline(report.attempts)
    if headline is not None:
        parts.append(
            f'<p><strong>{_e(headline)}</strong> &middot; <a href="#attempts">every attempt</a></p>'
        )
    if outcome.known and outcome.source:
        parts.append(f'<p class="note">From {_e(outcome.source)}.</p>')
    return "".join(parts)


def _offset(at: float, origin: float | None) -> str:
    return f"+{at - origin:.3f} s" if origin is not None else ""


def _attempts(report: Report) -> str:
    """Every start of the ranks (restarts in place), when there was more than one."""
    attempts = report.attempts
    headline = jobinfo.attempts_headline(attempts)
    if headline is None:
        return ""
    origin = report.start_time
    rows, classes = [], []
    for attempt in attempts:
        rows.append(
            (
                _e(attempt.attempt),
                _e(jobinfo.attempt_status(attempt)),
                _e(attempt.exit_code),
                _e(_utc(attempt.started_at)),
                _e(_offset(attempt.started_at, origin)),
                _e(_offset(attempt.ended_at, origin)),
                _e(seconds(jobinfo.attempt_duration(attempt))),
                _e(attempt.cause) if attempt.cause is not None else "",
            )
        )
        classes.append("" if attempt.cause is None else "failed")
    table = _table(
        ("attempt", "status", "exit code", "started (UTC)", "from", "to", "duration", "cause"),
        rows,
        numeric=(0, 2, 4, 5, 6),
        row_classes=classes,
    )
    return (
        f'<section id="attempts"><h2>Attempts</h2><p>{_e(headline)}: every rank was started '
        "again after a failure, without restarting the containers "
        "(<code>ringleader_max_restarts</code>). The ranks below are the last attempt's; times "
        f"count from the first attempt's start.</p>{table}</section>"
    )


def _cause(report: Report) -> str:
    failure = report.outcome.failure
    if not failure:
        return ""
    parts = ['<section id="cause"><h2>Failure cause</h2>']
    root = report.job.root_cause if report.job is not None else None
    if root is not None and first_line(failure) != root.describe():
        parts.append(f"<p><strong>{_e(root.describe())}</strong></p>")
    parts.append(_pre(failure.rstrip().splitlines()))
    if (
        root is not None
        and root.stderr_tail
        and not all(line in failure for line in root.stderr_tail)
    ):
        parts.append(f"<h3>Last stderr lines of rank {root.rank}</h3>{_pre(root.stderr_tail)}")
    parts.append("</section>")
    return "".join(parts)


def _hang(report: Report) -> str:
    if report.hang is None:
        return ""
    hang = report.hang.value
    lines = hang.summary_lines()
    ranks = "".join(
        f"<details><summary>rank {stacks.rank} on {_e(stacks.host)}: every process and thread"
        f"</summary>{_pre(rank_text(stacks).rstrip().splitlines())}</details>"
        for stacks in hang.stacks
    )
    return (
        '<section id="hang"><h2>Stacks of every rank</h2>'
        f'<p class="source">{_e(report.hang.path)}</p>'
        f"<p><strong>{_e(lines[0])}</strong></p>"
        f'<p class="note">Taken at {_e(_utc(hang.taken_at))} UTC ({_e(hang.reason)}); ranks '
        "grouped by the Python frames of their main thread, one stack shown per group, "
        f"innermost frame first.</p>{_pre(lines[1:])}{ranks}</section>"
    )


def _launcher(report: Report, charts: Mapping[str, Chart]) -> str:
    job = report.job
    if job is None or not job.timeline:
        return ""
    summary = phases.summary_line(job.timeline)
    origin = min(mark.at for mark in job.timeline)
    restarted = jobinfo.restarted(job.attempts)
    rows = [
        (
            _e(mark.host),
            _e(mark.phase),
            _e(_offset(mark.at, origin)),
            *((_e(_none_blank(jobinfo.attempt_at(job.attempts, mark.at))),) if restarted else ()),
        )
        for mark in job.timeline
    ]
    headers = ("host", "phase", "reached", *(("attempt",) if restarted else ()))
    table = _table(headers, rows, numeric=(2, 3))
    return (
        '<section id="launcher"><h2>Launcher timeline</h2>'
        + (f"<p>{_e(summary)}</p>" if summary else "")
        + (_attempt_spans(job.attempts, origin) if restarted else "")
        + _img(charts, "launcher")
        + "<p>The same phases, with every rank, are in <code>launcher_trace.json</code> "
        "beside job.json (open it in Perfetto or chrome://tracing).</p>"
        + f"<details><summary>every phase of every host</summary>{table}</details></section>"
    )


def _none_blank(value: object | None) -> str:
    return "" if value is None else str(value)


def _attempt_spans(attempts: Sequence[AttemptRecord], origin: float) -> str:
    """Each attempt as a span of the launcher timeline (the chart's dashed lines)."""
    items = []
    for attempt in attempts:
        span = (
            f"{_offset(attempt.started_at, origin)} to {_offset(attempt.ended_at, origin)} "
            f"({seconds(jobinfo.attempt_duration(attempt))}), {jobinfo.attempt_status(attempt)}, "
            f"exit code {attempt.exit_code}"
        )
        if attempt.cause is not None:
            span += f": {attempt.cause}"
        items.append(f"<li><strong>attempt {_e(attempt.attempt)}</strong>: {_e(span)}</li>")
    headline = jobinfo.attempts_headline(attempts) or ""
    return (
        f"<p>{_e(headline)}, each a span of the timeline (a dashed line on the chart where it "
        f'starts):</p><ul class="attempts">{"".join(items)}</ul>'
    )


def _ranks(report: Report, charts: Mapping[str, Chart]) -> str:
    job = report.job
    if job is None or not job.ranks:
        return ""
    logs = {(log.host, log.rank): log for log in report.logs}
    rows, classes = [], []
    for record in job.ranks:
        root = jobinfo.is_root_cause(record, job.root_cause)
        log = logs.get((record.host, record.rank))
        link = ""
        if log is not None and log.link:
            link = f'<a href="{_e(log.link)}">log</a>'
        elif log is not None:
            link = f'<a href="#log-{_e(record.host)}-{record.rank}">last lines</a>'
        rows.append(
            (
                _e(record.rank),
                _e(record.host),
                _e(jobinfo.status(record)) + (" &mdash; root cause" if root else ""),
                _e(record.exit_code),
                _e(seconds(jobinfo.duration(record))),
                _e(_utc(record.started_at)),
                _e(_utc(record.ended_at)),
                link,
            )
        )
        classes.append("root" if root else "")
    table = _table(
        ("rank", "host", "status", "exit code", "duration", "started (UTC)", "ended (UTC)", "log"),
        rows,
        numeric=(0, 3, 4),
        row_classes=classes,
    )
    note = ""
    if jobinfo.restarted(job.attempts):
        last = max(record.attempt for record in job.ranks)
        note = f'<p class="note">The ranks of the last attempt (attempt {_e(last)}).</p>'
    return f'<section id="ranks"><h2>Ranks</h2>{note}{_img(charts, "ranks")}{table}</section>'


def _progress(report: Report, charts: Mapping[str, Chart]) -> str:
    """The status lines' numbers (the job's step, each rank's speed) and every straggler."""
    job = report.job
    if job is None or not (job.progress or job.stragglers):
        return ""
    last = job.progress[-1] if job.progress else None
    said = ""
    if last is not None:
        total = f" of {last.total}" if last.total else ""
        said = f"<p>The last status: step {last.step}{total}, {len(job.progress)} status lines.</p>"
    rows = "".join(
        "<tr>"
        f"<td>{episode.rank}</td><td>{_e(episode.host)}</td>"
        f"<td>{episode.share:.0%}</td><td>{episode.median:.0%}</td>"
        f"<td>{_utc(episode.since)}</td>"
        f"<td>{'-' if episode.until is None else _utc(episode.until)}</td>"
        "</tr>"
        for episode in job.stragglers
    )
    table = (
        "<table><tr><th>straggler</th><th>host</th><th>waits</th><th>the median rank</th>"
        f"<th>named (UTC)</th><th>cleared (UTC)</th></tr>{rows}</table>"
        if rows
        else "<p>No straggler was named.</p>"
    )
    images = _img(charts, "progress") + _img(charts, "speed")
    return f'<section id="progress"><h2>Progress</h2>{said}{images}{table}</section>'


def _metrics(report: Report, charts: Mapping[str, Chart]) -> str:
    metrics = report.metrics.metrics
    if not metrics:
        return ""
    starts = metric_attempt_starts(report)
    headers = ("metric", "points", "ranks", "last", "min", "max")
    rows = [
        (
            _e(m.name),
            m.points,
            len(m.series),
            _e(number(m.last)),
            _e(number(m.minimum)),
            _e(number(m.maximum)),
            *((_e(", ".join(str(a) for a in m.attempts)),) if starts else ()),
        )
        for m in metrics
    ]
    table = _table((*headers, "attempts") if starts else headers, rows, numeric=(1, 2, 3, 4, 5))
    note = ""
    if starts:
        origin = report.start_time
        where = ", ".join(f"attempt {attempt} at {_offset(at, origin)}" for attempt, at in starts)
        note = (
            f'<p class="note">The metrics come from {len(starts)} attempts; on each chart a '
            f"rank's points of one attempt are one line, and a dashed line marks where each "
            f"attempt starts: {_e(where)}.</p>"
        )
    images = "".join(_img(charts, f"metric:{m.name}") for m in metrics)
    drawn = sum(1 for m in metrics if f"metric:{m.name}" in charts)
    return (
        f'<section id="metrics"><h2>Metrics</h2>{table}{note}{images}'
        f"{_more(len(metrics), drawn, 'metric chart(s)')}</section>"
    )


def _timeline(path: str, summary: TimelineSummary, index: int, charts: Mapping[str, Chart]) -> str:
    parts = [
        f'<section id="timeline-{index}"><h2>Horovod timeline</h2>',
        f'<p class="source">{_e(path)}</p><p>{_e(timeline_line(summary))}.</p>',
    ]
    facts = []
    if summary.start_epoch is not None:
        facts.append(f"Horovod started at {_utc(summary.start_epoch)} UTC")
    facts.append(f"{summary.negotiations} negotiation(s)")
    if summary.cycles:
        facts.append(f"{summary.cycles} cycle marker(s)")
    if summary.unclosed:
        facts.append(f"{summary.unclosed} operation(s) still open where the file ends")
    if summary.truncated:
        facts.append("the file ends early (Horovod was still writing it)")
    parts.append(f'<p class="note">{_e("; ".join(facts))}.</p>')

    parts.append("<h3>Top operations by total time</h3>")
    parts.append(_img(charts, f"timeline-ops:{index}"))
    top_level_total = sum(op.total_us for op in summary.ops if not op.activity) or 1.0
    ops = summary.ops[:TABLE_ROWS]
    parts.append(
        _table(
            ("operation", "kind", "count", "total", "mean", "share of top-level time"),
            (
                (
                    _e(op.name),
                    "activity" if op.activity else "operation",
                    op.count,
                    _e(seconds(op.total_us / 1e6)),
                    _e(seconds(op.mean_us / 1e6)),
                    "" if op.activity else f"{100 * op.total_us / top_level_total:.1f}%",
                )
                for op in ops
            ),
            numeric=(2, 3, 4, 5),
        )
    )
    parts.append(_more(len(summary.ops), len(ops), "operation(s)"))

    if summary.allreduce:
        parts.append("<h3>Allreduce time per tensor</h3>")
        parts.append(_img(charts, f"timeline-allreduce:{index}"))
        tensors = summary.allreduce[:TABLE_ROWS]
        parts.append(
            _table(
                ("tensor", "allreduces", "total", "mean", "negotiation total"),
                (
                    (
                        f"<code>{_e(t.tensor)}</code>",
                        t.count,
                        _e(seconds(t.total_us / 1e6)),
                        _e(seconds(t.total_us / t.count / 1e6)),
                        _e(seconds(t.negotiation_us / 1e6)),
                    )
                    for t in tensors
                ),
                numeric=(1, 2, 3, 4),
            )
        )
        parts.append(_more(len(summary.allreduce), len(tensors), "tensor(s)"))

    if summary.waits:
        parts.append("<h3>Negotiation wait per rank</h3>")
        parts.append(
            '<p class="note">Each rank reports to rank 0 when a tensor is ready; its wait is the '
            "time from its report to the end of the negotiation, when the last rank reported. "
            "A rank that is often last and waits little is the one the others wait for.</p>"
        )
        parts.append(_img(charts, f"timeline-waits:{index}"))
        parts.append(
            _table(
                ("rank", "negotiations", "total wait", "mean wait", "times last ready"),
                (
                    (
                        w.rank,
                        w.negotiations,
                        _e(seconds(w.wait_us / 1e6)),
                        _e(seconds(w.mean_wait_us / 1e6)),
                        w.last_count,
                    )
                    for w in summary.waits
                ),
                numeric=(0, 1, 2, 3, 4),
            )
        )
    parts.append("</section>")
    return "".join(parts)


def _autotune(path: str, log: AutotuneLog, index: int, charts: Mapping[str, Chart]) -> str:
    parts = [
        f'<section id="autotune-{index}"><h2>Horovod autotune</h2>',
        f'<p class="source">{_e(path)}</p>',
    ]
    best = log.best
    if best is None:
        parts.append(
            "<p>No scored samples yet: Horovod writes a row only after its warm-up samples "
            "(a few hundred steps).</p></section>"
        )
        return "".join(parts)
    state = (
        "Tuning finished; Horovod logged these as its best parameters."
        if log.finished
        else "Tuning had not finished when the log ended."
    )
    parts.append(
        f"<p>{len(log.samples)} sample(s). {_e(state)} Best score <strong>"
        f"{best.score:.6g}</strong> bytes/us (sample {best.index}).</p>"
    )
    parts.append(_table(("parameter", "best value"), ((_e(k), _e(v)) for k, v in best.params)))
    parts.append(_img(charts, f"autotune:{index}"))
    samples = _table(
        ("sample", *log.parameters, "score"),
        ((s.index, *(_e(v) for _, v in s.params), f"{s.score:.6g}") for s in log.samples[:200]),
        numeric=(0, len(log.parameters) + 1),
        row_classes=["root" if s is best else "" for s in log.samples[:200]],
    )
    parts.append(f"<details><summary>All samples</summary>{samples}</details></section>")
    return "".join(parts)


def _logs(report: Report) -> str:
    if not report.logs:
        return ""
    parts = ['<section id="logs"><h2>Rank logs</h2>']
    unprompted = set()  # ranks that failed by themselves: their logs open by default
    if report.job is not None:
        unprompted = {(r.host, r.rank) for r in report.job.ranks if r.failed and not r.terminated}
    for log in report.logs:
        opened = " open" if (log.host, log.rank) in unprompted else ""
        link = f' &middot; <a href="{_e(log.link)}">whole log</a>' if log.link else ""
        parts.append(
            f'<details id="log-{_e(log.host)}-{log.rank}"{opened}><summary>rank {log.rank} on '
            f"{_e(log.host)}: last {len(log.lines)} line(s)</summary>"
            f'<p class="source">{_e(log.path)}{link}</p>{_pre(log.lines)}</details>'
        )
    parts.append("</section>")
    return "".join(parts)


def _footer(report: Report) -> str:
    parts = []
    if report.warnings:
        items = "".join(f"<li>{_e(w)}</li>" for w in report.warnings)
        parts.append(f'<section id="warnings"><h2>Warnings</h2><ul class="warn">{items}</ul>')
        parts.append("</section>")
    files = "".join(f"<li><code>{_e(f)}</code></li>" for f in report.files)
    parts.append(
        f'<section id="files"><details><summary>Files read ({len(report.files)})</summary>'
        f"<ul>{files}</ul></details></section>"
    )
    return "".join(parts)


def render_page(report: Report, charts: Sequence[Chart]) -> str:
    by_key = {chart.key: chart for chart in charts}
    sections = [
        _cause(report),
        _attempts(report),
        _hang(report),
        _launcher(report, by_key),
        _ranks(report, by_key),
        _progress(report, by_key),
        _metrics(report, by_key),
        *(_timeline(t.path, t.value, i, by_key) for i, t in enumerate(report.timelines, 1)),
        *(_autotune(a.path, a.value, i, by_key) for i, a in enumerate(report.autotune, 1)),
        _logs(report),
    ]
    nav_items = [
        ("cause", "Failure cause", bool(report.outcome.failure)),
        ("attempts", "Attempts", jobinfo.restarted(report.attempts)),
        ("hang", "Stacks", report.hang is not None),
        ("launcher", "Launcher", report.job is not None and bool(report.job.timeline)),
        ("ranks", "Ranks", report.job is not None and bool(report.job.ranks)),
        ("progress", "Progress", report.job is not None and bool(report.job.progress)),
        ("metrics", "Metrics", bool(report.metrics.metrics)),
        ("timeline-1", "Timeline", bool(report.timelines)),
        ("autotune-1", "Autotune", bool(report.autotune)),
        ("logs", "Rank logs", bool(report.logs)),
        ("warnings", "Warnings", bool(report.warnings)),
    ]
    nav = " ".join(f'<a href="#{key}">{_e(label)}</a>' for key, label, shown in nav_items if shown)
    title = f"ringleader report: job {report.outcome.headline}"
    cause = first_line(report.outcome.failure or "")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head>\n<body><main>"
        f"<h1>ringleader job report</h1>"
        f'<p class="source">{_e(report.source)}</p>'
        f"{_outcome(report)}"
        + (f"<p><strong>{_e(cause)}</strong></p>" if cause else "")
        + f"<nav>{nav}</nav>"
        + "".join(sections)
        + _footer(report)
        + "</main></body></html>\n"
    )
