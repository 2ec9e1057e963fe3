"""Reading a job's output from disk: a folder, or an output.tar.gz unpacked to a temporary one."""

from __future__ import annotations

import os
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ringleader.tools.report.discover import JobFiles, classify, list_files
from ringleader.tools.report.model import Inputs, LogTail, TextFile

LOG_TAIL_LINES = 20
LOG_TAIL_BYTES = 16 * 1024
FAILURE_BYTES = 64 * 1024
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")


class SourceError(Exception):
    """PATH cannot be read as job output (exit code 2)."""


@dataclass(frozen=True)
class Source:
    root: Path  # the folder to search
    archive: bool  # unpacked from a tarball: its files vanish after the report


def default_out_dir(path: Path) -> Path:
    """PATH/report for a folder; <name>-report beside an archive."""
    if path.is_dir():
        return path / "report"
    name = path.name
    for suffix in ARCHIVE_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return path.with_name(f"{name}-report")


@contextmanager
def open_source(path: Path) -> Iterator[Source]:
    if path.is_dir():
        yield Source(path, archive=False)
        return
    if not path.exists():
        raise SourceError(f"{path} does not exist")
    if not path.is_file() or not tarfile.is_tarfile(path):
        raise SourceError(
            f"{path} is neither a folder nor a tar archive (give a job's output folder "
            "or its output.tar.gz)"
        )
    with tempfile.TemporaryDirectory(prefix="ringleader-report-") as folder:
        try:
            with tarfile.open(path, "r:*") as archive:
                _extract_safely(archive, path, folder)
        except (tarfile.TarError, OSError, EOFError) as error:
            raise SourceError(f"{path}: cannot unpack: {error}") from None
        yield Source(Path(folder), archive=True)


def _extract_safely(archive: tarfile.TarFile, path: Path, folder: str) -> None:
    if hasattr(tarfile, "data_filter"):
        archive.extractall(folder, filter="data")
        return
    # Python before 3.10.12 and 3.11.4 has no extraction filters: the same member checks as
    # for a job's source tarball refuse what could land outside the folder.
    from ringleader.source.usercode import member_of, unsafe_members

    members = archive.getmembers()
    problems = unsafe_members([member_of(member) for member in members])
    if problems:
        name, reason = problems[0]
        raise SourceError(f"{path}: cannot unpack: member {name!r} {reason}")
    archive.extractall(folder, members=members)  # noqa: S202 (checked just above)


def find_files(source: Source, exclude: Path | None) -> JobFiles:
    return classify(list_files(source.root, exclude))


def _read(root: Path, path: PurePosixPath, problems: list[str], limit: int | None = None) -> str:
    try:
        with (root / path).open("rb") as file:
            data = file.read() if limit is None else file.read(limit)
    except OSError as error:
        problems.append(f"{path}: cannot read: {error.strerror or error}")
        return ""
    return data.decode("utf-8", errors="replace")


def _tail(root: Path, path: PurePosixPath, problems: list[str]) -> tuple[str, ...]:
    try:
        with (root / path).open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - LOG_TAIL_BYTES))
            data = file.read()
    except OSError as error:
        problems.append(f"{path}: cannot read: {error.strerror or error}")
        return ()
    lines = data.decode("utf-8", errors="replace").splitlines()
    if size > LOG_TAIL_BYTES and lines:
        lines = lines[1:]  # the first line is probably cut
    return tuple(lines[-LOG_TAIL_LINES:])


def read_inputs(source: Source, files: JobFiles, shown_as: str, out_dir: Path) -> Inputs:
    root = source.root
    problems: list[str] = []

    def texts(paths: tuple[PurePosixPath, ...], limit: int | None = None) -> tuple[TextFile, ...]:
        return tuple(TextFile(str(p), _read(root, p, problems, limit)) for p in paths)

    logs = tuple(
        LogTail(
            host=log.host,
            rank=log.rank,
            path=str(log.path),
            lines=_tail(root, log.path, problems),
            link=None
            if source.archive
            else Path(os.path.relpath(root / log.path, out_dir)).as_posix(),
        )
        for log in files.rank_logs
    )
    jobs = texts(files.jobs)
    failures = texts(files.failures, FAILURE_BYTES)
    metrics = texts(files.metrics)
    timelines = texts(files.timelines)
    autotune = texts(files.autotune)
    hangs = texts(files.hangs)
    return Inputs(
        source=shown_as,
        jobs=jobs,
        failures=failures,
        successes=tuple(str(p) for p in files.successes),
        metrics=metrics,
        timelines=timelines,
        autotune=autotune,
        logs=logs,
        hangs=hangs,
        problems=tuple(problems),
    )
