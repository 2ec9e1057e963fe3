"""The launcher's own timeline (pure): when each host reached each phase of a job, with
wall-clock times, for job.json, a Chrome trace (output/data/launcher_trace.json, opens in
Perfetto beside the Horovod timeline) and the report's Gantt chart."""

import itertools
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ringleader.core.records import RankRecord

# Phases in the order a host normally reaches them.
ENTRY = "entry point started"
CONFIG = "configuration read"
SSHD = "sshd ready"
CONNECTED = "connected to the leader"  # a worker: joined, before its checks
HEALTH_CHECKED = "health checked"  # the host's checks before the first attempt ended
SSH_CHECKED = "ssh check passed"
PAIRS_ASKED = "pair probes asked"  # the leader: every worker up (ringleader_health_pairs=all)
WORKERS_UP = "all workers up"
LAUNCHED = "launcher started"
MPI_DAEMON_UP = "MPI daemon up"  # mpirun's daemon (orted) on a host it reaches over ssh
WRAPPER_STARTED = "first rank wrapper started"
FIRST_RANK = "first rank started"
FIRST_OUTPUT = "first output"
LAST_RANK_ENDED = "last rank ended"
VERDICT = "verdict"
VERDICT_RECEIVED = "verdict received"
EXITED = "exited"
PHASES = (
    ENTRY,
    CONFIG,
    SSHD,
    CONNECTED,
    HEALTH_CHECKED,
    SSH_CHECKED,
    PAIRS_ASKED,
    WORKERS_UP,
    LAUNCHED,
    MPI_DAEMON_UP,
    WRAPPER_STARTED,
    FIRST_RANK,
    FIRST_OUTPUT,
    LAST_RANK_ENDED,
    VERDICT,
    VERDICT_RECEIVED,
    EXITED,
)
# Up to here a host is getting ready; the job's startup ends when the last host's first rank
# runs.
STARTUP_PHASES = PHASES[: PHASES.index(FIRST_RANK) + 1]


@dataclass(frozen=True)
class Mark:
    host: str
    phase: str
    at: float  # time.time()

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "phase": self.phase, "at": round(self.at, 6)}

    @classmethod
    def from_json(cls, data: Any) -> "Mark":
        return cls(str(data["host"]), str(data["phase"]), float(data["at"]))


@dataclass(frozen=True)
class Span:
    host: str
    phase: str  # the phase the span ends in: the time it took to get there
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


class Timeline:
    """One process's marks, added from any thread."""

    def __init__(self) -> None:
        self._marks: list[Mark] = []
        self._lock = threading.Lock()

    def mark(self, host: str, phase: str, at: float | None = None) -> None:
        with self._lock:
            self._marks.append(Mark(host, phase, time.time() if at is None else at))

    def extend(self, marks: Iterable[Mark]) -> None:
        with self._lock:
            self._marks.extend(marks)

    def marks(self) -> list[Mark]:
        with self._lock:
            return sorted(self._marks, key=lambda mark: mark.at)

    def of(self, host: str) -> list[Mark]:
        return [mark for mark in self.marks() if mark.host == host]


def rank_marks(records: Sequence[RankRecord]) -> list[Mark]:
    """Per host, from its ranks' records: its MPI daemon's start (mpirun jobs), its first rank
    wrapper's start, its first rank's start and first output, and its last rank's end (each
    rank's own times stay in its record)."""
    marks = []
    for host in sorted({record.host for record in records}):
        mine = [record for record in records if record.host == host]
        for phase, times in (
            (MPI_DAEMON_UP, [record.daemon_started_at for record in mine]),
            (WRAPPER_STARTED, [record.wrapper_started_at for record in mine]),
        ):
            if known := [at for at in times if at is not None]:
                marks.append(Mark(host, phase, min(known)))
        marks.append(Mark(host, FIRST_RANK, min(record.started_at for record in mine)))
        outputs = [record.first_output_at for record in mine if record.first_output_at]
        if outputs:
            marks.append(Mark(host, FIRST_OUTPUT, min(outputs)))
        marks.append(Mark(host, LAST_RANK_ENDED, max(record.ended_at for record in mine)))
    return marks


def spans(marks: Sequence[Mark]) -> list[Span]:
    """Per host, in time order: from one mark to the next, named after the later one."""
    result = []
    for host in dict.fromkeys(mark.host for mark in marks):
        mine = sorted((mark for mark in marks if mark.host == host), key=lambda m: m.at)
        for before, after in itertools.pairwise(mine):
            result.append(Span(host, after.phase, before.at, after.at))
    return result


def _last_ready(marks: Sequence[Mark]) -> tuple[float, Mark] | None:
    """(the first host's entry, the mark of the host whose first rank started last), over the
    job's first start of its ranks (after a restart in place a host has a first rank per
    attempt); None without both."""
    ready: dict[str, Mark] = {}
    for mark in sorted(marks, key=lambda mark: mark.at):
        if mark.phase == FIRST_RANK:
            ready.setdefault(mark.host, mark)
    starts = [mark.at for mark in marks if mark.phase == ENTRY]
    if not ready or not starts:
        return None
    return min(starts), max(ready.values(), key=lambda mark: mark.at)


def startup_seconds(marks: Sequence[Mark]) -> float | None:
    """The job's startup: from the first host's entry point to the last host's first rank."""
    found = _last_ready(marks)
    return None if found is None else found[1].at - found[0]


def summary_line(marks: Sequence[Mark]) -> str | None:
    """The host that was ready last and its longest step of the startup."""
    found = _last_ready(marks)
    if found is None:
        return None
    origin, last = found
    # The slowest host's own longest step (the leader's wait for it says nothing new).
    startup = [
        span
        for span in spans(marks)
        if span.phase in STARTUP_PHASES and span.host == last.host and span.end <= last.at
    ]
    text = f"startup {last.at - origin:.2f} s; slowest host {last.host}"
    if startup:
        longest = max(startup, key=lambda span: span.seconds)
        text += (
            f"; longest phase: {longest.host} reaching '{longest.phase}' "
            f"took {longest.seconds:.2f} s"
        )
    return text


def chrome_trace(marks: Sequence[Mark], records: Sequence[RankRecord]) -> dict[str, Any]:
    """Chrome's trace event format: a process per host, its phases on thread 0 and each rank's
    run on a thread of its own."""
    hosts = list(dict.fromkeys([*(mark.host for mark in marks), *(r.host for r in records)]))
    pid = {host: index + 1 for index, host in enumerate(hosts)}
    events: list[dict[str, Any]] = []
    for host in hosts:
        events.append(_meta("process_name", pid[host], 0, host))
        events.append(_meta("thread_name", pid[host], 0, "ringleader"))
    for span in spans(marks):
        events.append(_complete(span.phase, pid[span.host], 0, span.start, span.end))
    for mark in marks:
        events.append(
            {
                "name": mark.phase,
                "ph": "i",
                "s": "t",
                "pid": pid[mark.host],
                "tid": 0,
                "ts": _us(mark.at),
            }
        )
    for record in records:
        tid = record.rank + 1
        events.append(_meta("thread_name", pid[record.host], tid, f"rank {record.rank}"))
        events.append(
            _complete(
                f"rank {record.rank} (exit {record.exit_code})",
                pid[record.host],
                tid,
                record.started_at,
                record.ended_at,
            )
        )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _us(seconds: float) -> int:
    return round(seconds * 1_000_000)


def _meta(name: str, pid: int, tid: int, value: str) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {"name": value}}


def _complete(name: str, pid: int, tid: int, start: float, end: float) -> dict[str, Any]:
    return {
        "name": name,
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "ts": _us(start),
        "dur": max(_us(end) - _us(start), 0),
    }
