"""`ringleader report PATH`: the page and charts written from real files, and bad input (exit 2)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from ringleader.tools import cli as ringleader_cli
from ringleader.tools.report import cli

FIXTURE = Path(__file__).parents[1] / "report" / "fixtures" / "local-job"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="ringleader")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["report", *argv])
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


@dataclass(frozen=True)
class Rendered:
    code: int
    out: str
    err: str
    folder: Path
    html: str


@pytest.fixture(scope="module")
def failed_job(tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    job = tmp_path_factory.mktemp("job") / "local-job"
    shutil.copytree(FIXTURE, job)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = ringleader_cli.main(["report", str(job)])
    folder = job / "report"
    return Rendered(
        code, out.getvalue(), err.getvalue(), folder, (folder / "index.html").read_text()
    )


def test_the_command_is_wired_with_a_function() -> None:
    parser = argparse.ArgumentParser(prog="ringleader")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["report", "somewhere", "--out", "x"])
    assert args.func is cli.cmd_report and args.path == Path("somewhere") and args.out == Path("x")


def test_a_failed_job_report_and_its_summary(failed_job: Rendered) -> None:
    assert failed_job.code == 0, failed_job.err
    out = failed_job.out
    assert "Job: failed with exit code 3; 6 rank(s) on 3 host(s)" in out
    assert "Cause: Rank 4 on host algo-3 exited with code 3" in out
    assert "Ranks: 0 exited 0, 1 failed, 5 were told to stop" in out
    assert "Metric loss: 96 point(s) from 6 rank(s)" in out
    assert "last to be ready most often rank 4 (36 of 36)" in out
    assert "best score 301.062 (sample 5)" in out and "cycle_time_ms=3.51882" in out
    assert f"Report: {failed_job.folder / 'index.html'}" in out


def test_the_page_shows_every_part(failed_job: Rendered) -> None:
    html = failed_job.html
    for text in (
        "Job failed with exit code 3",
        "ValueError: loss diverged: nan",
        "exit 3 &mdash; root cause",
        "killed by SIGTERM (was told to stop)",
        "samples_per_sec",
        "Top operations by total time",
        "MPI_ALLREDUCE",
        "allreduce.fc1.weight",
        "Negotiation wait per rank",
        "tensor_fusion_threshold",
        "12.4417",
        "rank 4 on algo-3: last",
        "the timeline ends early",
    ):
        assert text in html, text


def test_the_page_is_self_contained_with_its_charts_beside_it(failed_job: Rendered) -> None:
    html = failed_job.html
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    assert "<script" not in html and "<link" not in html
    images = re.findall(r'<img src="([^"]+)"', html)
    assert set(images) == {
        "ranks.png",
        "metric-loss.png",
        "metric-samples_per_sec.png",
        "timeline-ops.png",
        "timeline-allreduce.png",
        "timeline-waits.png",
        "autotune.png",
    }
    for image in images:
        data = (failed_job.folder / image).read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 5000, image
    # log links are relative to the report folder and point at the real files
    links = re.findall(r'<a href="([^"#]+\.log)"', html)
    assert links and all((failed_job.folder / link).is_file() for link in links)


def test_a_tarball_of_one_hosts_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    archive = tmp_path / "output.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(FIXTURE / "algo-1" / "output", arcname=".")
    code, out, err = run(capsys, str(archive))
    assert code == 0, err
    index = tmp_path / "output-report" / "index.html"
    assert f"Report: {index}" in out and index.is_file()
    html = index.read_text()
    assert "Job failed with exit code 3" in html
    assert ".log" not in "".join(re.findall(r'<a href="([^"]+)"', html))  # no dangling links
    assert "last lines" in html


def test_a_successful_job_from_its_success_file_and_metrics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "success").write_text("")
    lines = [
        {"timestamp": 10.0 + i, "name": "<b>acc</b>", "value": i / 10, "rank": 0, "host": "h"}
        for i in range(5)
    ]
    (data / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\nbroken\n")
    out_dir = tmp_path / "elsewhere"
    code, out, err = run(capsys, str(tmp_path), "--out", str(out_dir))
    assert code == 0, err
    assert out.startswith("Job: succeeded\n")
    assert "Warnings: 1" in out
    html = (out_dir / "index.html").read_text()
    assert "&lt;b&gt;acc&lt;/b&gt;" in html and "<b>acc</b>" not in html
    assert "skipped 1 malformed line" in html
    assert (out_dir / "metric-b-acc-b.png").is_file()


def test_broken_inputs_are_warnings_not_failures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "job.json").write_text("{not json")
    (data / "timeline.json").write_text("")
    (data / "autotune_log.csv").write_text("a,b\n")
    code, out, err = run(capsys, str(tmp_path))
    assert code == 0, err
    assert "Job: outcome unknown" in out and "Warnings: 3" in out


def test_a_folder_with_no_job_output_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    code, out, err = run(capsys, str(tmp_path))
    assert code == 2 and out == ""
    assert f"{tmp_path} holds no job output" in err and "job.json" in err
    assert not (tmp_path / "report").exists()


def test_a_missing_path_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, str(tmp_path / "nope"))
    assert code == 2 and "does not exist" in err


def test_a_file_that_is_not_an_archive_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bogus = tmp_path / "output.tar.gz"
    bogus.write_text("not a tarball")
    code, _, err = run(capsys, str(bogus))
    assert code == 2 and "neither a folder nor a tar archive" in err


def test_an_archive_with_no_job_output_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "readme.md").write_text("x")
    archive = tmp_path / "output.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "readme.md", arcname="readme.md")
    code, _, err = run(capsys, str(archive))
    assert code == 2 and "holds no job output" in err


# Faking a Python without extraction filters on one that has them: it warns of 3.14's default.
WITHOUT_FILTERS_WARNS = pytest.mark.filterwarnings("ignore:Python 3.14 will:DeprecationWarning")


@WITHOUT_FILTERS_WARNS
@pytest.mark.parametrize("filters", [True, False], ids=["with-filters", "python-without-filters"])
def test_an_archive_member_that_would_land_outside_is_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    filters: bool,
) -> None:
    """Extraction filters came in Python 3.10.12 and 3.11.4; without them the members are
    checked as a job's source tarball is."""
    if not filters:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    payload = tmp_path / "payload"
    payload.write_text("x")
    archive = tmp_path / "output.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(payload, arcname="success")
        tar.add(payload, arcname="../escaped")
    code, _, err = run(capsys, str(archive))
    assert code == 2 and "cannot unpack" in err and "escaped" in err
    assert not list(Path(tempfile.gettempdir()).glob("escaped"))


@WITHOUT_FILTERS_WARNS
def test_an_archive_of_job_output_is_read_without_extraction_filters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    (tmp_path / "success").write_text("")
    archive = tmp_path / "output.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "success", arcname="success")
    code, _, err = run(capsys, str(archive), "--out", str(tmp_path / "report"))
    assert code == 0, err


def test_an_unwritable_output_folder_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "success").write_text("")
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = run(capsys, str(tmp_path), "--out", str(blocker / "report"))
    assert code == 1 and "cannot write the report" in err
