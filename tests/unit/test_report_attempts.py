"""Restarts in place in `ringleader report`: every attempt on the page (its span on the launcher
timeline, the attempts table, the text summary) and where each attempt starts on the metric
charts; a job that started its ranks once looks as before."""

from __future__ import annotations

import contextlib
import io
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from matplotlib.lines import Line2D

from ringleader.core import timeline as phases
from ringleader.core.attempts import AttemptRecord
from ringleader.core.jobfile import JobSummary, job_file_text
from ringleader.core.records import RankRecord
from ringleader.tools import cli as ringleader_cli
from ringleader.tools.report import jobinfo
from ringleader.tools.report.metrics import parse_line, parse_metrics
from ringleader.tools.report.model import (
    Inputs,
    TextFile,
    build_report,
    metric_attempt_starts,
    summary_lines,
)
from ringleader.tools.report.page import render_page

HOSTS = ("algo-1", "algo-2")
T0 = 1_700_000_000.0  # the leader's entry point
ATTEMPT_STARTS = (T0 + 2.0, T0 + 22.0, T0 + 42.0)
CAUSES = (
    "Rank 1 on host algo-2 exited with code 3",
    "Rank 0 on host algo-1 was killed by SIGKILL <oom-killer> & friends",
    None,
)
EXIT_CODES = (3, 137, 0)


def attempts(count: int = 3) -> tuple[AttemptRecord, ...]:
    return tuple(
        AttemptRecord(
            attempt=n,
            started_at=ATTEMPT_STARTS[n],
            ended_at=ATTEMPT_STARTS[n] + 10.0,
            exit_code=EXIT_CODES[n] if count > 1 else 0,
            cause=CAUSES[n] if count > 1 else None,
            hosts=HOSTS,
            progressed=n != 1,
        )
        for n in range(count)
    )


def marks(count: int = 3) -> tuple[phases.Mark, ...]:
    found = [
        phases.Mark(host, phase, T0 + offset)
        for host in HOSTS
        for phase, offset in ((phases.ENTRY, 0.0), (phases.CONFIG, 0.3), (phases.SSHD, 0.6))
    ]
    found.append(phases.Mark("algo-1", phases.WORKERS_UP, T0 + 1.0))
    for start in ATTEMPT_STARTS[:count]:
        found.append(phases.Mark("algo-1", phases.LAUNCHED, start + 0.1))
        for host in HOSTS:
            found.append(phases.Mark(host, phases.FIRST_RANK, start + 1.0))
            found.append(phases.Mark(host, phases.LAST_RANK_ENDED, start + 9.0))
    return tuple(sorted(found, key=lambda mark: mark.at))


def ranks(attempt: int) -> tuple[RankRecord, ...]:
    start = ATTEMPT_STARTS[attempt]
    return tuple(
        RankRecord(n, host, 0, None, start + 1.0, start + 9.0, False, (), attempt=attempt)
        for n, host in enumerate(HOSTS)
    )


def job_json(count: int = 3, with_attempts: bool = True) -> str:
    last = count - 1
    summary = JobSummary(
        exit_code=0,
        failure=None,
        hosts=HOSTS,
        world_size=2,
        root_cause=None,
        ranks=ranks(last),
        timeline=marks(count),
        attempts=attempts(count) if with_attempts else (),
    )
    return job_file_text(summary)


def metric_line(t: float, value: float, rank: int, attempt: int | None) -> str:
    data: dict[str, object] = {
        "timestamp": t,
        "name": "loss",
        "value": value,
        "rank": rank,
        "host": HOSTS[rank],
    }
    if attempt is not None:
        data["attempt"] = attempt
    return json.dumps(data)


def metrics_text(count: int = 3) -> str:
    """A loss curve per rank that resumes from a checkpoint in each attempt."""
    lines = []
    for attempt in range(count):
        for step in range(5):
            for rank in range(2):
                at = ATTEMPT_STARTS[attempt] + 2.0 + step
                lines.append(metric_line(at, 1.0 / (1 + attempt * 4 + step), rank, attempt))
    return "\n".join(lines) + "\n"


def page(job: str, metrics: str = "") -> tuple[str, list[str]]:
    inputs = Inputs(
        source="job-output",
        jobs=(TextFile("data/job.json", job),),
        metrics=(TextFile("data/metrics.jsonl", metrics),) if metrics else (),
    )
    report = build_report(inputs)
    return render_page(report, []), summary_lines(report)


def section(html: str, key: str) -> str:
    found = re.search(rf'<section id="{key}">(.*?)</section>', html, re.S)
    assert found is not None, f"no section {key}"
    return found.group(1)


def table_rows(html: str) -> list[list[str]]:
    body = html.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr.*?</tr>", body)]


# ---------------------------------------------------------------------------- the page
def test_three_attempts_each_with_number_exit_code_and_cause_on_the_page() -> None:
    html, _ = page(job_json(3))
    table = section(html, "attempts")
    assert "3 attempts (restarted 2 times)" in table
    rows = table_rows(table)
    assert [row[0] for row in rows] == ["0", "1", "2"]
    assert [row[1] for row in rows] == ["failed", "failed before any progress", "succeeded"]
    assert [row[2] for row in rows] == ["3", "137", "0"]
    assert rows[0][-1] == "Rank 1 on host algo-2 exited with code 3"
    assert rows[1][-1] == (
        "Rank 0 on host algo-1 was killed by SIGKILL &lt;oom-killer&gt; &amp; friends"
    )
    assert rows[2][-1] == ""  # it succeeded
    # spans from the first attempt's start: 20 s apart, 10 s long
    assert [(row[4], row[5]) for row in rows] == [
        ("+0.000 s", "+10.000 s"),
        ("+20.000 s", "+30.000 s"),
        ("+40.000 s", "+50.000 s"),
    ]
    assert "<oom-killer>" not in html  # escaped everywhere
    assert '<a href="#attempts">' in html  # the nav and the line under the banner


def test_each_attempt_is_a_span_of_the_launcher_timeline() -> None:
    html, _ = page(job_json(3))
    launcher = section(html, "launcher")
    spans = re.findall(r"<li><strong>attempt (\d)</strong>: (.*?)</li>", launcher)
    assert [n for n, _ in spans] == ["0", "1", "2"]
    # the timeline starts at the first entry point, 2 s before attempt 0
    assert spans[0][1].startswith("+2.000 s to +12.000 s (10.00 s), failed, exit code 3: Rank 1")
    assert spans[1][1].startswith("+22.000 s to +32.000 s")
    assert (
        "exit code 137: Rank 0 on host algo-1 was killed by SIGKILL &lt;oom-killer&gt;"
        in (spans[1][1])
    )
    assert spans[2][1].endswith("succeeded, exit code 0")
    # every launcher phase is put in its attempt; the ones before any attempt in none
    rows = table_rows(launcher.split("<details>", 1)[1])
    launched = [row[3] for row in rows if row[1] == phases.LAUNCHED]
    assert launched == ["0", "1", "2"]
    assert all(row[3] == "" for row in rows if row[1] == phases.ENTRY)


def test_the_ranks_are_said_to_be_the_last_attempts() -> None:
    html, lines = page(job_json(3))
    assert "The ranks of the last attempt (attempt 2)." in section(html, "ranks")
    assert "Attempts: 3 attempts (restarted 2 times)" in lines
    assert "  attempt 1: exit code 137 (before any progress): Rank 0 on host algo-1" in "\n".join(
        lines
    )
    assert any(line.startswith("Ranks (attempt 2): 2 exited 0") for line in lines)


@pytest.mark.parametrize("with_attempts", [True, False], ids=["one-attempt", "no-attempts-field"])
def test_a_single_attempt_shows_no_attempts(with_attempts: bool) -> None:
    html, lines = page(job_json(1, with_attempts), metrics_text(1))
    assert 'id="attempts"' not in html and 'href="#attempts"' not in html
    assert "restarted" not in html and "attempt" not in section(html, "launcher")
    assert "attempt" not in section(html, "metrics") and "attempt" not in section(html, "ranks")
    assert not any("ttempt" in line for line in lines)


def test_a_single_attempt_looks_as_before() -> None:
    """job.json from before restarts (no attempts, no rank attempt) renders the same page."""
    before = json.loads(job_json(1, with_attempts=False))
    del before["attempts"]
    for record in before["ranks"]:
        del record["attempt"]
    metrics_before = "\n".join(
        json.dumps({k: v for k, v in json.loads(line).items() if k != "attempt"})
        for line in metrics_text(1).splitlines()
    )
    assert page(json.dumps(before), metrics_before) == page(job_json(1), metrics_text(1))


# ---------------------------------------------------------------------------- metrics
def test_the_attempt_of_a_metric_record_is_read_and_an_old_record_is_attempt_0() -> None:
    assert parse_line(metric_line(1.0, 0.5, 0, 2)) == parse_line(metric_line(1.0, 0.5, 0, 2))
    point = parse_line(metric_line(1.0, 0.5, 0, 2))
    assert point is not None and point.attempt == 2
    old = parse_line(metric_line(1.0, 0.5, 0, None))
    assert old is not None and old.attempt == 0
    for bad in ("1", True, -1, 1.5):
        assert (
            parse_line(metric_line(1.0, 0.5, 0, None)[:-1] + f', "attempt": {json.dumps(bad)}}}')
            is None
        )


def test_metrics_with_attempts_0_and_1_mark_the_boundary() -> None:
    metrics = parse_metrics(metrics_text(2).splitlines())
    loss = metrics.metrics[0]
    assert loss.attempts == (0, 1)
    assert metrics.attempt_starts == {0: ATTEMPT_STARTS[0] + 2.0, 1: ATTEMPT_STARTS[1] + 2.0}
    series = loss.series[0]
    assert [attempt for attempt, _, _ in series.by_attempt()] == [0, 1]
    # without job.json: each attempt's first point; with it: the leader's start of the attempt
    alone = build_report(Inputs("x", metrics=(TextFile("m.jsonl", metrics_text(2)),)))
    assert metric_attempt_starts(alone) == ((0, T0 + 4.0), (1, T0 + 24.0))
    html, _ = page(job_json(2), metrics_text(2))
    report = build_report(
        Inputs(
            "x",
            jobs=(TextFile("job.json", job_json(2)),),
            metrics=(TextFile("m.jsonl", metrics_text(2)),),
        )
    )
    assert metric_attempt_starts(report) == ((0, ATTEMPT_STARTS[0]), (1, ATTEMPT_STARTS[1]))
    note = section(html, "metrics")
    assert "attempt 0 at +0.000 s, attempt 1 at +20.000 s" in note
    assert table_rows(note)[0][-1] == "0, 1"


def test_one_attempt_of_metrics_marks_nothing() -> None:
    report = build_report(Inputs("x", metrics=(TextFile("m.jsonl", metrics_text(1)),)))
    assert metric_attempt_starts(report) == ()
    shifted = "\n".join(
        line.replace('"attempt": 0', '"attempt": 1') for line in metrics_text(1).splitlines()
    )
    report = build_report(Inputs("x", metrics=(TextFile("m.jsonl", shifted),)))
    assert metric_attempt_starts(report) == ()  # one attempt, whichever it is


def xs_of(line: Line2D) -> list[float]:
    return [float(x) for x in np.asarray(line.get_xdata(), dtype=float)]


def test_the_metric_chart_draws_a_line_at_each_attempts_start() -> None:
    from ringleader.tools.report.charts import metric_figure

    report = build_report(
        Inputs(
            "x",
            jobs=(TextFile("job.json", job_json(2)),),
            metrics=(TextFile("m.jsonl", metrics_text(2)),),
        )
    )
    assert report.start_time == ATTEMPT_STARTS[0]
    assert report.time_axis == "seconds since attempt 0 started"
    loss = report.metrics.metrics[0]
    figure = metric_figure(loss, report.start_time, report.time_axis, metric_attempt_starts(report))
    axes = figure.axes[0]
    dashed = [line for line in axes.lines if line.get_linestyle() == "--"]
    assert sorted(xs_of(line)[0] for line in dashed) == [0.0, 20.0]
    assert all(len(set(xs_of(line))) == 1 for line in dashed)  # vertical
    assert [t.get_text().strip() for t in axes.texts] == ["attempt 0", "attempt 1"]
    # a line per rank and attempt, never one joining the end of attempt 0 to attempt 1
    curves = [line for line in axes.lines if line.get_linestyle() != "--"]
    assert len(curves) == 4
    for curve in curves:
        xs = xs_of(curve)
        assert max(xs) < 20.0 or min(xs) > 20.0
    # the two runs of a rank share its colour and its one legend entry
    assert curves[0].get_color() == curves[1].get_color() != curves[2].get_color()
    assert [str(c.get_label()) for c in curves if not str(c.get_label()).startswith("_")] == [
        "rank 0 (algo-1)",
        "rank 1 (algo-2)",
    ]
    single = build_report(Inputs("x", metrics=(TextFile("m.jsonl", metrics_text(1)),)))
    plain = metric_figure(single.metrics.metrics[0], single.start_time, single.time_axis, ())
    assert not plain.axes[0].texts and all(
        line.get_linestyle() != "--" for line in plain.axes[0].lines
    )


def test_the_report_of_a_restarted_job_is_written_with_its_charts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "job.json").write_text(job_json(3))
    (data / "metrics.jsonl").write_text(metrics_text(3))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert ringleader_cli.main(["report", str(tmp_path)]) == 0
    assert "Attempts: 3 attempts (restarted 2 times)" in out.getvalue()
    folder = tmp_path / "report"
    html = (folder / "index.html").read_text()
    for image in ("launcher.png", "ranks.png", "metric-loss.png"):
        assert f'<img src="{image}"' in html and (folder / image).stat().st_size > 5000


# ---------------------------------------------------------------------------- wording
def test_attempt_wording() -> None:
    assert jobinfo.attempts_headline(attempts(1)) is None
    assert jobinfo.attempts_headline(attempts(2)) == "2 attempts (restarted 1 time)"
    assert jobinfo.attempts_headline(attempts(3)) == "3 attempts (restarted 2 times)"
    records = attempts(3)
    assert jobinfo.attempt_at(records, ATTEMPT_STARTS[1] + 5) == 1
    assert jobinfo.attempt_at(records, ATTEMPT_STARTS[1] - 5) is None  # the backoff between
    assert jobinfo.attempt_status(replace(records[0], progressed=False)) == (
        "failed before any progress"
    )
