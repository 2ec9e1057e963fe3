"""The leader's data/job.json and the failure/success files, as the job's outcome (pure).

job.json: `{"exit_code": int, "failure": str|null, "hosts": [str], "world_size": int,
"root_cause": rank record|null, "ranks": [rank record]}` where a rank record is what
ringleader.core.records.RankRecord writes (times in epoch seconds).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ringleader.core.records import RankRecord, signal_name


class JobFileError(ValueError):
    """job.json is not a JSON object of the expected shape."""


@dataclass(frozen=True)
class JobInfo:
    exit_code: int
    failure: str | None
    hosts: tuple[str, ...]
    world_size: int
    root_cause: RankRecord | None
    ranks: tuple[RankRecord, ...]  # by rank
    problems: tuple[str, ...] = ()  # rank records that could not be read


@dataclass(frozen=True)
class Outcome:
    """What the report says about the job as a whole, from the best source there is."""

    known: bool
    exit_code: int | None
    failure: str | None  # the cause, as the failure file or job.json tells it
    source: str  # where it came from, for the reader

    @property
    def succeeded(self) -> bool:
        return self.known and self.exit_code in (0, None) and self.failure is None

    @property
    def headline(self) -> str:
        if not self.known:
            return "outcome unknown"
        if self.succeeded:
            code = "" if self.exit_code is None else f" (exit code {self.exit_code})"
            return f"succeeded{code}"
        if self.exit_code is None:
            return "failed"
        return f"failed with exit code {self.exit_code}"


def _rank_record(data: Any) -> RankRecord:
    if not isinstance(data, dict):
        raise JobFileError(f"a rank record is not an object: {data!r:.80}")
    try:
        return RankRecord.from_json(data)
    except (KeyError, TypeError, ValueError) as error:
        raise JobFileError(f"a rank record lacks or mistypes {error}: {data!r:.120}") from None


def parse_job(text: str) -> JobInfo:
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as error:
        raise JobFileError(f"not JSON: {error}") from None
    if not isinstance(data, dict):
        raise JobFileError("not a JSON object")
    exit_code = data.get("exit_code")
    if not isinstance(exit_code, int) or isinstance(exit_code, bool):
        raise JobFileError(f"exit_code is not a whole number: {exit_code!r}")
    failure = data.get("failure")
    ranks: list[RankRecord] = []
    problems: list[str] = []
    raw_ranks = data.get("ranks") or []
    if not isinstance(raw_ranks, list):
        raise JobFileError("ranks is not a list")
    for item in raw_ranks:
        try:
            ranks.append(_rank_record(item))
        except JobFileError as error:
            problems.append(str(error))
    root_cause: RankRecord | None = None
    if data.get("root_cause") is not None:
        try:
            root_cause = _rank_record(data["root_cause"])
        except JobFileError as error:
            problems.append(f"root_cause: {error}")
    hosts = data.get("hosts") or []
    world_size = data.get("world_size")
    return JobInfo(
        exit_code=exit_code,
        failure=failure if isinstance(failure, str) and failure else None,
        hosts=tuple(str(h) for h in hosts) if isinstance(hosts, list) else (),
        world_size=world_size if isinstance(world_size, int) else len(ranks),
        root_cause=root_cause,
        ranks=tuple(sorted(ranks, key=lambda r: (r.rank, r.host))),
        problems=tuple(problems),
    )


def decide_outcome(
    job: JobInfo | None, failure_texts: Sequence[str], success_files: int
) -> Outcome:
    """job.json wins; else a failure file; else a success file; else unknown."""
    if job is not None:
        failure = job.failure
        if job.exit_code != 0 and failure is None and failure_texts:
            failure = failure_texts[0]
        if job.exit_code != 0 and failure is None:
            failure = f"The job failed with exit code {job.exit_code}."
        return Outcome(True, job.exit_code, failure if job.exit_code != 0 else None, "job.json")
    if failure_texts:
        return Outcome(True, None, failure_texts[0].strip() or "(empty failure file)", "failure")
    if success_files:
        return Outcome(True, None, None, "success")
    return Outcome(False, None, None, "")


def is_root_cause(record: RankRecord, root: RankRecord | None) -> bool:
    return root is not None and (record.rank, record.host) == (root.rank, root.host)


def duration(record: RankRecord) -> float:
    return max(0.0, record.ended_at - record.started_at)


def short_status(record: RankRecord) -> str:
    text = f"exit {record.exit_code}"
    if record.signal is not None:
        text = signal_name(record.signal)
    return text + (", stopped" if record.terminated else "")


def status(record: RankRecord) -> str:
    if record.signal is not None:
        text = f"killed by {signal_name(record.signal)}"
    elif record.exit_code == 0:
        text = "ok"
    else:
        text = f"exit {record.exit_code}"
    if record.terminated:
        text += " (was told to stop)"
    return text
