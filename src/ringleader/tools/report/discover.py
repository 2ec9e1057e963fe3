"""Which files below PATH are a job's output.

PATH may be one host's /opt/ml/output (or a copy of it), `ringleader local`'s OUTPUT/<job>/
with one `<host>/output/` per host, or the unpacked output.tar.gz; so files are found by name
at any depth: job.json, metrics.jsonl, `*timeline*.json`, `*autotune*.csv`,
`logs/<host>/rank-<N>.log`, a hang's `hang/stacks.json`, `run.json`, and `failure`/`success`
at the top or next to a `data/` folder.
`classify` is pure (relative paths in, roles out); `list_files` walks the disk.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ringleader.core.runfile import RUN_FILE

JOB_FILE = "job.json"
METRICS_FILE = "metrics.jsonl"
TIMELINE_PATTERN = "*timeline*.json"
AUTOTUNE_PATTERN = "*autotune*.csv"
RANK_LOG = re.compile(r"rank-(\d+)\.log")
RESULT_FILES = ("failure", "success")
HANG_DIR, HANG_FILE = "hang", "stacks.json"  # the leader's data/hang/stacks.json after a hang


@dataclass(frozen=True)
class RankLog:
    host: str
    rank: int
    path: PurePosixPath


@dataclass(frozen=True)
class JobFiles:
    jobs: tuple[PurePosixPath, ...] = ()  # the leader's first
    failures: tuple[PurePosixPath, ...] = ()  # the leader's first
    successes: tuple[PurePosixPath, ...] = ()
    metrics: tuple[PurePosixPath, ...] = ()
    timelines: tuple[PurePosixPath, ...] = ()
    autotune: tuple[PurePosixPath, ...] = ()
    rank_logs: tuple[RankLog, ...] = ()  # by host, then rank
    hangs: tuple[PurePosixPath, ...] = ()  # the leader's first
    runs: tuple[PurePosixPath, ...] = ()  # run.json (`ringleader local`'s), the shallowest first

    @property
    def empty(self) -> bool:
        return not any(
            (
                self.jobs,
                self.failures,
                self.successes,
                self.metrics,
                self.timelines,
                self.autotune,
                self.rank_logs,
            )
        )


def _key(path: PurePosixPath) -> tuple[int, str]:
    return len(path.parts), str(path)


def _output_dir(path: PurePosixPath) -> PurePosixPath:
    """The /opt/ml/output a file belongs to: the folder above its `data/`, if any."""
    parts = path.parent.parts
    if "data" in parts:
        at = len(parts) - 1 - parts[::-1].index("data")
        return PurePosixPath(*parts[:at]) if at else PurePosixPath(".")
    return path.parent


def classify(paths: Iterable[PurePosixPath]) -> JobFiles:
    files = sorted(set(paths), key=_key)
    data_parents = {
        PurePosixPath(*path.parts[:i])
        for path in files
        for i, part in enumerate(path.parts[:-1])
        if part == "data"
    }
    jobs = [p for p in files if p.name == JOB_FILE]
    leader_dirs = {_output_dir(p) for p in jobs}

    def result_files(name: str) -> list[PurePosixPath]:
        found = [
            p for p in files if p.name == name and (len(p.parts) == 1 or p.parent in data_parents)
        ]
        return sorted(found, key=lambda p: (p.parent not in leader_dirs, *_key(p)))

    logs = []
    for path in files:
        match = RANK_LOG.fullmatch(path.name)
        if match and len(path.parts) >= 3 and path.parts[-3] == "logs":
            logs.append(RankLog(path.parts[-2], int(match.group(1)), path))
    return JobFiles(
        jobs=tuple(jobs),
        failures=tuple(result_files("failure")),
        successes=tuple(result_files("success")),
        metrics=tuple(p for p in files if p.name == METRICS_FILE),
        timelines=tuple(p for p in files if fnmatch.fnmatch(p.name.lower(), TIMELINE_PATTERN)),
        autotune=tuple(p for p in files if fnmatch.fnmatch(p.name.lower(), AUTOTUNE_PATTERN)),
        rank_logs=tuple(sorted(logs, key=lambda log: (log.host, log.rank, str(log.path)))),
        hangs=tuple(
            sorted(
                (p for p in files if p.name == HANG_FILE and p.parent.name == HANG_DIR),
                key=lambda p: (_output_dir(p.parent) not in leader_dirs, *_key(p)),
            )
        ),
        runs=tuple(p for p in files if p.name == RUN_FILE),
    )


def list_files(root: Path, exclude: Path | None = None) -> list[PurePosixPath]:
    """Every regular file below root, relative to it, skipping the folder `exclude`."""
    skip = exclude.resolve() if exclude is not None else None
    found: list[PurePosixPath] = []
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if skip is None or (here / d).resolve() != skip)
        for name in names:
            path = here / name
            if path.is_file():
                found.append(PurePosixPath(path.relative_to(root).as_posix()))
    return found
