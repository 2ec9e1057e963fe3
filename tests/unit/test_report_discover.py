"""Finding a job's files below PATH, whatever the layout."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from ringleader.tools.report.discover import RankLog, classify, list_files


def paths(*names: str) -> list[PurePosixPath]:
    return [PurePosixPath(name) for name in names]


def test_ringleader_local_layout_with_one_folder_per_host() -> None:
    files = classify(
        paths(
            "algo-2/output/failure",
            "algo-2/output/data/metrics.jsonl",
            "algo-2/output/data/logs/algo-2/rank-3.log",
            "algo-1/output/failure",
            "algo-1/output/data/job.json",
            "algo-1/output/data/metrics.jsonl",
            "algo-1/output/data/timeline.json",
            "algo-1/output/data/autotune_log.csv",
            "algo-1/output/data/logs/algo-1/rank-10.log",
            "algo-1/output/data/logs/algo-1/rank-2.log",
            "algo-1/model/model.pt",
        )
    )
    assert files.jobs == (PurePosixPath("algo-1/output/data/job.json"),)
    assert [str(p) for p in files.failures] == ["algo-1/output/failure", "algo-2/output/failure"]
    assert len(files.metrics) == 2 and files.successes == ()
    assert files.timelines == (PurePosixPath("algo-1/output/data/timeline.json"),)
    assert files.autotune == (PurePosixPath("algo-1/output/data/autotune_log.csv"),)
    assert [(log.host, log.rank) for log in files.rank_logs] == [
        ("algo-1", 2),
        ("algo-1", 10),
        ("algo-2", 3),
    ]
    assert not files.empty


def test_one_hosts_output_folder() -> None:
    files = classify(paths("success", "data/job.json", "data/hvd_timeline.json", "data/x.txt"))
    assert files.successes == (PurePosixPath("success"),)
    assert files.timelines == (PurePosixPath("data/hvd_timeline.json"),)


def test_an_output_tarball_of_the_data_folder_only() -> None:
    files = classify(paths("job.json", "metrics.jsonl", "Timeline-rank0.JSON", "logs/h/rank-0.log"))
    assert files.jobs and files.metrics and files.timelines
    assert files.rank_logs == (RankLog("h", 0, PurePosixPath("logs/h/rank-0.log")),)


def test_failure_files_away_from_an_output_folder_are_not_results() -> None:
    files = classify(paths("code/failure", "a/b/success", "logs/rank-0.log", "data/rank-1.log"))
    assert files.empty


def test_the_leaders_failure_file_comes_first() -> None:
    files = classify(
        paths(
            "a/output/failure", "a/output/data/m.txt", "z/output/failure", "z/output/data/job.json"
        )
    )
    assert [str(p) for p in files.failures] == ["z/output/failure", "a/output/failure"]


def test_list_files_skips_the_report_folder(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "metrics.jsonl").write_text("")
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "timeline-ops.json").write_text("")
    assert list_files(tmp_path, exclude=tmp_path / "report") == [
        PurePosixPath("data/metrics.jsonl")
    ]
    assert len(list_files(tmp_path)) == 2
