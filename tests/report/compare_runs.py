"""Runs of one job at several sizes, laid out as `ringleader local` leaves them
(OUTPUT/<job>/run.json, OUTPUT/<job>/algo-N/output/data/{job.json,metrics.jsonl}), for the
comparison's tests. Written with the project's own job.json and run.json writers."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

from ringleader.core.jobfile import JobSummary, write_job_file
from ringleader.core.records import RankRecord
from ringleader.core.runfile import RUN_FILE, RunInfo, write_run_file
from ringleader.core.timeline import ENTRY, EXITED, FIRST_RANK, Mark
from ringleader.tools import cli as ringleader_cli

T0 = 1_750_000_000.0


@dataclass(frozen=True)
class FakeRun:
    hosts: int
    ranks_per_host: int
    per_rank_rate: float  # images/s of each rank
    exit_code: int = 0
    program: str = "train.py"
    instance_type: str = "local"
    epochs: int = 3
    epoch_seconds: float = 10.0
    startup: float = 2.0
    metric: str = "images_per_sec"
    metric_on_every_rank: bool = False  # else rank 0 prints the job's total


def write_run(folder: Path, run: FakeRun) -> Path:
    """The run's OUTPUT/<job> folder."""
    hosts = [f"algo-{n}" for n in range(1, run.hosts + 1)]
    ranks = run.hosts * run.ranks_per_host
    first_rank = T0 + run.startup
    end = first_rank + run.epochs * run.epoch_seconds + 1.0
    records = tuple(
        RankRecord(
            rank,
            hosts[rank // run.ranks_per_host],
            run.exit_code if rank == 0 else 0,
            None,
            first_rank,
            end,
            False,
            (),
        )
        for rank in range(ranks)
    )
    marks = [Mark(host, ENTRY, T0 + 0.1 * index) for index, host in enumerate(hosts)]
    marks += [Mark(host, FIRST_RANK, first_rank) for host in hosts]
    marks += [Mark(host, EXITED, end + 0.5) for host in hosts]
    summary = JobSummary(
        run.exit_code,
        None if run.exit_code == 0 else f"Rank 0 on host algo-1 exited with code {run.exit_code}",
        tuple(hosts),
        ranks,
        None,
        records,
        timeline=tuple(sorted(marks, key=lambda mark: mark.at)),
    )
    data = folder / "algo-1" / "output" / "data"
    write_job_file(data / "job.json", summary)
    lines = []
    for epoch in range(1, run.epochs + 1):
        at = first_rank + epoch * run.epoch_seconds
        lines.append(
            {"timestamp": at, "name": "epoch", "value": epoch, "rank": 0, "host": "algo-1"}
        )
        writers = range(ranks) if run.metric_on_every_rank else (0,)
        for rank in writers:
            value = run.per_rank_rate if run.metric_on_every_rank else run.per_rank_rate * ranks
            lines.append(
                {
                    "timestamp": at,
                    "name": run.metric,
                    "value": value,
                    "rank": rank,
                    "host": "algo-1",
                }
            )
    (data / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    write_run_file(
        folder / RUN_FILE,
        RunInfo(run.program, run.instance_type, run.hosts, run.ranks_per_host, "mpi", "x"),
    )
    return folder


def write_study(root: Path, runs: dict[str, FakeRun]) -> list[Path]:
    return [write_run(root / name, run) for name, run in runs.items()]


def ringleader(*argv: str) -> tuple[int, str, str]:
    """The `ringleader` command in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = ringleader_cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()
