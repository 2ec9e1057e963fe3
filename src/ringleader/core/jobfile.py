"""job.json: the leader's summary of the job (one writer, one reader).

    {"exit_code": int, "failure": str|null, "hosts": [str], "world_size": int,
     "root_cause": rank record|null, "ranks": [rank record],
     "timeline": [{"host": str, "phase": str, "at": float}],
     "attempts": [{"attempt": int, "started_at": float, "ended_at": float, "exit_code": int,
                   "cause": str|null, "hosts": [str], "progressed": bool}],
     "progress": [{"at": float, "step": int, "total": int|null, "rate": float|null,
                   "eta": float|null, "steps": {rank: int}}],
     "stragglers": [{"rank": int, "host": str, "share": float, "median": float,
                     "since": float, "until": float|null}],
     "health": {host: [{"name": str, "status": str, "detail": str,
                        "link": {"source": str, "target": str, "round_trip": float,
                                 "bandwidth": float}  (a reachability probe's, when through)}]}}

`ranks` are the last attempt's; `attempts` has every start of the ranks (restarts in place:
ringleader_max_restarts), in order, the last one included; `health` every host's checks at
the last health gate (ringleader.core.health); `progress` the job's step at each status line
(ringleader.core.progress), with every reporting rank's; `stragglers` every rank the straggler
watch named, its wait share against the median rank's, from when until when
(ringleader.core.straggler).

A rank record is what ringleader.core.records.RankRecord writes (times in epoch seconds).
The leader writes the file once, at the end of the job (`write_job_file`, called by
ringleader.core.results.write_job_summary); `ringleader report` reads it (`parse_job_file`).
The reader is strict about what the report cannot do without (a JSON object, a whole-number
exit_code, ranks as a list) and lenient about the rest: a rank record that cannot be read
becomes a problem in `JobSummary.problems`, and missing hosts or world_size get a value from
what is there.
"""

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ringleader.core.attempts import AttemptRecord
from ringleader.core.files import write_atomically
from ringleader.core.health import CheckResult, Report
from ringleader.core.progress import StatusSample
from ringleader.core.records import RankRecord
from ringleader.core.straggler import Straggler
from ringleader.core.timeline import Mark


class JobFileError(ValueError):
    """job.json is not a JSON object of the expected shape; the message names the field."""


_T = TypeVar("_T")


@dataclass(frozen=True)
class JobSummary:
    exit_code: int
    failure: str | None
    hosts: tuple[str, ...]
    world_size: int
    root_cause: RankRecord | None
    ranks: tuple[RankRecord, ...]  # as written; read back sorted by (rank, host)
    problems: tuple[str, ...] = ()  # when read: the rank records that could not be read
    timeline: tuple[Mark, ...] = ()  # every host's launcher phases (ringleader.core.timeline)
    attempts: tuple[AttemptRecord, ...] = ()  # every start of the ranks (ringleader.core.attempts)
    health: Mapping[str, Report] = field(default_factory=dict)  # the last health gate's
    progress: tuple[StatusSample, ...] = ()  # every status line's numbers (core/progress.py)
    stragglers: tuple[Straggler, ...] = ()  # every straggler episode (core/straggler.py)

    @property
    def unhealthy(self) -> tuple[str, ...]:
        """The hosts that failed a check at the last health gate, in the job's order."""
        return tuple(h for h in self.health if any(result.failed for result in self.health[h]))

    def to_json(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "failure": self.failure,
            "hosts": list(self.hosts),
            "world_size": self.world_size,
            "root_cause": self.root_cause.to_json() if self.root_cause else None,
            "ranks": [record.to_json() for record in self.ranks],
            "timeline": [mark.to_json() for mark in self.timeline],
            "attempts": [attempt.to_json() for attempt in self.attempts],
            "health": {
                host: [result.to_json() for result in report]
                for host, report in self.health.items()
            },
            "progress": [each.to_json() for each in self.progress],
            "stragglers": [each.to_json() for each in self.stragglers],
        }


def job_file_text(summary: JobSummary) -> str:
    return json.dumps(summary.to_json(), indent=2) + "\n"


def write_job_file(path: Path, summary: JobSummary) -> None:
    """Write job.json atomically, creating its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, job_file_text(summary))


def read_job_file(path: Path) -> JobSummary:
    """parse_job_file of the file's text; OSError when it cannot be read."""
    return parse_job_file(path.read_text(encoding="utf-8", errors="replace"))


def parse_job_file(text: str) -> JobSummary:
    """The summary in job.json's text; JobFileError naming the field when it cannot be read."""
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
    timeline = _each(data, "timeline", Mark.from_json, "a timeline entry", problems)
    attempts = _each(data, "attempts", AttemptRecord.from_json, "an attempt", problems)
    health: dict[str, Report] = {}
    raw_health = data.get("health") or {}
    for host, items in raw_health.items() if isinstance(raw_health, dict) else ():
        try:
            health[str(host)] = tuple(CheckResult.from_json(item) for item in items)
        except (KeyError, TypeError, ValueError, AttributeError):
            problems.append(f"a host's health checks cannot be read: {host!r:.80}")
    progress = _each(data, "progress", StatusSample.from_json, "a status", problems)
    stragglers = _each(data, "stragglers", Straggler.from_json, "a straggler episode", problems)
    return JobSummary(
        exit_code=exit_code,
        failure=failure if isinstance(failure, str) and failure else None,
        hosts=tuple(str(h) for h in hosts) if isinstance(hosts, list) else (),
        world_size=world_size if isinstance(world_size, int) else len(ranks),
        root_cause=root_cause,
        ranks=tuple(sorted(ranks, key=lambda r: (r.rank, r.host))),
        problems=tuple(problems),
        timeline=tuple(sorted(timeline, key=lambda mark: mark.at)),
        attempts=tuple(attempts),
        health=health,
        progress=tuple(progress),
        stragglers=tuple(stragglers),
    )


def _each(
    data: dict[str, Any],
    key: str,
    parse: Callable[[Any], _T],
    what: str,
    problems: list[str],
) -> list[_T]:
    """Every item of the list `key` that can be read; each that cannot is a problem, named."""
    found = []
    raw = data.get(key) or []
    for item in raw if isinstance(raw, list) else ():
        try:
            found.append(parse(item))
        except (KeyError, TypeError, ValueError, AttributeError):
            problems.append(f"{what} cannot be read: {item!r:.80}")
    return found


def _rank_record(data: Any) -> RankRecord:
    if not isinstance(data, dict):
        raise JobFileError(f"a rank record is not an object: {data!r:.80}")
    try:
        return RankRecord.from_json(data)
    except (KeyError, TypeError, ValueError) as error:
        raise JobFileError(f"a rank record lacks or mistypes {error}: {data!r:.120}") from None
