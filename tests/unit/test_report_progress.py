"""The report's Progress section: the job's step over time, each rank's speed (a heatmap) and
every straggler the watch named, from job.json."""

from __future__ import annotations

from pathlib import Path

from ringleader.core.jobfile import JobSummary, job_file_text
from ringleader.core.progress import StatusSample
from ringleader.core.records import RankRecord
from ringleader.core.straggler import Straggler
from ringleader.tools.report.charts import render_all
from ringleader.tools.report.compare_model import RunFacts, compare
from ringleader.tools.report.compare_table import table
from ringleader.tools.report.model import Inputs, TextFile, build_report
from ringleader.tools.report.page import render_page
from ringleader.tools.report.runfacts import slowest_rank

T0 = 1_700_000_000.0
HOSTS = ("algo-1", "algo-2")


def rank(number: int) -> RankRecord:
    return RankRecord(
        rank=number,
        host=HOSTS[number // 2],
        exit_code=0,
        signal=None,
        started_at=T0,
        ended_at=T0 + 40.0,
        terminated=False,
        stderr_tail=(),
    )


def report_of(progress: tuple[StatusSample, ...], stragglers: tuple[Straggler, ...] = ()):  # type: ignore[no-untyped-def]
    summary = JobSummary(
        0,
        None,
        HOSTS,
        4,
        None,
        tuple(rank(n) for n in range(4)),
        progress=progress,
        stragglers=stragglers,
    )
    inputs = Inputs(source="job", jobs=(TextFile("data/job.json", job_file_text(summary)),))
    return build_report(inputs)


SAMPLES = tuple(
    StatusSample(
        T0 + 10.0 * tick,
        30 * tick,
        120,
        3.0 if tick else None,
        None,
        {
            0: 30 * tick,
            1: 30 * tick + 1,
            2: 30 * tick,
            3: 21 * tick,
        },
    )
    for tick in range(4)
)
EPISODE = Straggler(3, "algo-2", 0.02, 0.3, T0 + 20.0, T0 + 30.0)


def test_the_progress_section_draws_the_step_and_each_ranks_speed(tmp_path: Path) -> None:
    report = report_of(SAMPLES, (EPISODE,))
    charts = render_all(report, tmp_path)
    keys = {chart.key for chart in charts}
    assert {"progress", "speed"} <= keys
    assert (tmp_path / "progress.png").stat().st_size > 0
    assert (tmp_path / "speed.png").stat().st_size > 0
    html = render_page(report, charts)
    assert '<a href="#progress">Progress</a>' in html
    assert "The last status: step 90 of 120, 4 status lines." in html
    assert "<td>3</td><td>algo-2</td><td>2%</td><td>30%</td>" in html
    assert '<img src="speed.png"' in html


def test_one_status_has_no_speeds_and_no_straggler_says_so(tmp_path: Path) -> None:
    report = report_of(SAMPLES[:1])
    keys = {chart.key for chart in render_all(report, tmp_path)}
    assert "progress" in keys and "speed" not in keys
    assert "No straggler was named." in render_page(report, [])


def test_a_job_without_status_lines_has_no_progress_section(tmp_path: Path) -> None:
    report = report_of(())
    assert "progress" not in {chart.key for chart in render_all(report, tmp_path)}
    assert 'id="progress"' not in render_page(report, [])


def test_compare_names_the_rank_named_straggler_longest() -> None:
    episodes = (
        Straggler(3, "algo-2", 0.02, 0.3, T0, T0 + 5.0),
        Straggler(1, "algo-1", 0.05, 0.3, T0 + 10.0, T0 + 40.0),
        Straggler(3, "algo-2", 0.02, 0.3, T0 + 50.0, T0 + 60.0),
    )
    assert slowest_rank(episodes) == "rank 1 on algo-1 (30 s)"
    assert slowest_rank(()) is None
    run = RunFacts("run-a", 2, 4, True, "succeeded", slowest_rank=slowest_rank(episodes))
    comparison = compare([run], metric=None, prices={})
    header, rows = table(comparison)
    assert rows[0][header.index("slowest rank")] == "rank 1 on algo-1 (30 s)"
