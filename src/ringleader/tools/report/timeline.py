"""Horovod's timeline, summarised (pure).

Horovod (horovod/common/timeline.cc) writes the Chrome trace event format from rank 0 only,
one JSON array that it keeps valid by rewriting its closing `]` after every event, so a file
cut short by a crash may end anywhere. Its shapes:

- `{"name": "process_name", "ph": "M", "pid": N, "args": {"name": TENSOR}}`: each tensor is a
  "process"; pid 0 carries `{"start_time_since_epoch_in_micros": T}` instead of a name.
- `{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": T, "pid": N}` opens the negotiation; each
  rank that reports ready adds `{"ph": "X", "name": "<rank>", "ts": T, "pid": N, "dur": 0}`,
  and `{"ph": "E", ...}` closes it once every rank is ready.
- `B` with a response type (ALLREDUCE, ALLGATHER, BROADCAST, ...) opens the operation, nested
  `B`/`E` pairs are its activities (QUEUE, MEMCPY_IN_FUSION_BUFFER, MPI_ALLREDUCE, ...), and
  the operation's `E` may carry `{"dtype": ..., "shape": ...}`. `E` events have no name.
- `{"ph": "i", "name": "CYCLE_START", "ts": T, "s": "g"}` marks a background-loop cycle.

Timestamps are microseconds since Horovod started.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

NEGOTIATE_PREFIX = "NEGOTIATE_"
ALLREDUCE = "ALLREDUCE"
_WHITESPACE_AND_COMMAS = " \t\r\n,"


class TimelineError(ValueError):
    """The file is not a Chrome trace event array at all."""


@dataclass(frozen=True)
class TraceEvents:
    events: tuple[Mapping[str, Any], ...]
    truncated: bool  # the array did not end with `]`, or its last event was cut off


class TraceStream:
    """The events of a Chrome trace array, decoded about a megabyte at a time.

    Memory stays near the file's size however many events it has, and every complete event
    of a cut-off file is kept: after the iteration, `truncated` tells whether it was cut.
    """

    CHUNK = 1 << 20

    def __init__(self, text: str) -> None:
        self.text = text.strip()
        self.truncated = False
        if not self.text:
            raise TimelineError("the file is empty")
        if not self.text.startswith(("[", "{")):
            raise TimelineError("not a JSON array of trace events (it does not start with '[')")

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        if self.text.startswith("{"):
            yield from self._object_form()
            return
        text, position = self.text, 1
        while True:
            while position < len(text) and text[position] in _WHITESPACE_AND_COMMAS:
                position += 1
            if position >= len(text):
                self.truncated = True
                return
            if text[position] == "]":
                return
            chunk, after, complete = self._next_chunk(position)
            try:
                events = json.loads(chunk)
            except json.JSONDecodeError:
                yield from self._one_by_one(position)  # a cut-off end, or an odd split
                return
            yield from (event for event in events if isinstance(event, dict))
            if after < 0:
                self.truncated = not complete
                return
            position = after

    def _next_chunk(self, position: int) -> tuple[str, int, bool]:
        """A JSON array of whole events from position, where to go on (-1: the end), and
        whether the file's own `]` closed it. A split between two events is at `},`; one that
        falls inside an event leaves braces or quotes unbalanced and fails to decode."""
        text = self.text
        if len(text) - position > self.CHUNK:
            cut = text.find("},", position + self.CHUNK)
            if cut >= 0:
                return "[" + text[position : cut + 1] + "]", cut + 2, False
        if text.endswith("]"):
            return "[" + text[position:], -1, True
        return "[" + text[position:].rstrip(_WHITESPACE_AND_COMMAS) + "]", -1, False

    def _one_by_one(self, position: int) -> Iterator[Mapping[str, Any]]:
        decoder, text = json.JSONDecoder(), self.text
        while True:
            while position < len(text) and text[position] in _WHITESPACE_AND_COMMAS:
                position += 1
            if position >= len(text):
                self.truncated = True
                return
            if text[position] == "]":
                return
            try:
                value, position = decoder.raw_decode(text, position)
            except json.JSONDecodeError:
                self.truncated = True
                return
            if isinstance(value, dict):
                yield value

    def _object_form(self) -> Iterator[Mapping[str, Any]]:
        try:
            data = json.loads(self.text)
        except json.JSONDecodeError as error:
            raise TimelineError(f"not JSON: {error}") from None
        events = data.get("traceEvents") if isinstance(data, dict) else None
        if not isinstance(events, list):
            raise TimelineError("a JSON object without a traceEvents list")
        yield from (event for event in events if isinstance(event, dict))


def parse_trace(text: str) -> TraceEvents:
    """Every event at once (for small files and tests; summarise_text streams)."""
    stream = TraceStream(text)
    events = tuple(stream)
    return TraceEvents(events, stream.truncated)


@dataclass(frozen=True)
class OpTotal:
    name: str
    count: int
    total_us: float
    activity: bool  # nested inside an operation (MPI_ALLREDUCE, QUEUE, ...)

    @property
    def mean_us(self) -> float:
        return self.total_us / self.count if self.count else 0.0


@dataclass(frozen=True)
class TensorTotal:
    tensor: str
    count: int
    total_us: float
    negotiation_us: float


@dataclass(frozen=True)
class RankWait:
    rank: int
    negotiations: int  # negotiations this rank reported ready in
    wait_us: float  # summed time from its report to the end of the negotiation
    last_count: int  # negotiations in which it was the last rank to report

    @property
    def mean_wait_us(self) -> float:
        return self.wait_us / self.negotiations if self.negotiations else 0.0


@dataclass(frozen=True)
class TimelineSummary:
    events: int
    truncated: bool
    tensors: int
    span_us: float  # first to last timestamp
    start_epoch: float | None  # when Horovod started, epoch seconds, if the file says
    cycles: int
    unclosed: int  # operations still open where the file ends
    ops: tuple[OpTotal, ...]  # by total time, largest first
    allreduce: tuple[TensorTotal, ...]  # by allreduce time, largest first
    waits: tuple[RankWait, ...]  # by rank

    @property
    def negotiations(self) -> int:
        return sum(op.count for op in self.ops if op.name.startswith(NEGOTIATE_PREFIX))


@dataclass
class _Open:
    name: str
    ts: float
    ready: dict[int, float] = field(default_factory=dict)


@dataclass
class _Totals:
    count: int = 0
    total: float = 0.0


@dataclass
class _Wait:
    negotiations: int = 0
    total: float = 0.0
    last: int = 0


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _rank_of(name: Any) -> int | None:
    if isinstance(name, str) and name.isdigit():
        return int(name)
    return None


def summarise(events: Iterable[Mapping[str, Any]], truncated: bool = False) -> TimelineSummary:
    tensor_names: dict[Any, str] = {}
    start_epoch: float | None = None
    stacks: dict[Any, list[_Open]] = {}
    ops: dict[tuple[str, bool], _Totals] = {}
    per_tensor: dict[Any, tuple[_Totals, _Totals]] = {}  # pid -> (allreduce, negotiation)
    waits: dict[int, _Wait] = {}
    first: float | None = None
    last: float | None = None
    count = cycles = 0

    for event in events:
        count += 1
        phase = event.get("ph")
        pid = event.get("pid")
        if phase == "M":
            args = event.get("args")
            if event.get("name") == "process_name" and isinstance(args, Mapping):
                if isinstance(args.get("name"), str):
                    tensor_names[pid] = args["name"]
                epoch_us = _number(args.get("start_time_since_epoch_in_micros"))
                if epoch_us is not None:
                    start_epoch = epoch_us / 1e6
            continue
        ts = _number(event.get("ts"))
        if ts is None:
            continue
        first = ts if first is None else min(first, ts)
        last = ts if last is None else max(last, ts)
        stack = stacks.setdefault(pid, [])
        if phase == "B":
            stack.append(_Open(str(event.get("name", "?")), ts))
        elif phase == "E":
            if not stack:
                continue
            span = stack.pop()
            duration = max(0.0, ts - span.ts)
            totals = ops.setdefault((span.name, bool(stack)), _Totals())
            totals.count += 1
            totals.total += duration
            if stack:
                continue
            allreduce, negotiation = per_tensor.setdefault(pid, (_Totals(), _Totals()))
            if span.name.startswith(NEGOTIATE_PREFIX):
                negotiation.count += 1
                negotiation.total += duration
                _count_waits(span, ts, waits)
            elif span.name == ALLREDUCE:
                allreduce.count += 1
                allreduce.total += duration
        elif phase == "X":
            rank = _rank_of(event.get("name"))
            if stack and stack[-1].name.startswith(NEGOTIATE_PREFIX) and rank is not None:
                stack[-1].ready.setdefault(rank, ts)
            elif rank is None:
                totals = ops.setdefault((str(event.get("name", "?")), bool(stack)), _Totals())
                totals.count += 1
                totals.total += max(0.0, _number(event.get("dur")) or 0.0)
        elif phase in ("i", "I") and event.get("name") == "CYCLE_START":
            cycles += 1

    op_totals = sorted(
        (OpTotal(name, t.count, t.total, activity) for (name, activity), t in ops.items()),
        key=lambda op: (-op.total_us, op.name),
    )
    tensor_totals = sorted(
        (
            TensorTotal(tensor_names.get(pid, f"pid {pid}"), a.count, a.total, n.total)
            for pid, (a, n) in per_tensor.items()
            if a.count
        ),
        key=lambda t: (-t.total_us, t.tensor),
    )
    return TimelineSummary(
        events=count,
        truncated=truncated,
        tensors=sum(1 for pid in tensor_names if pid != 0),
        span_us=(last - first) if first is not None and last is not None else 0.0,
        start_epoch=start_epoch,
        cycles=cycles,
        unclosed=sum(len(stack) for stack in stacks.values()),
        ops=tuple(op_totals),
        allreduce=tuple(tensor_totals),
        waits=tuple(
            RankWait(rank, w.negotiations, w.total, w.last) for rank, w in sorted(waits.items())
        ),
    )


def _count_waits(span: _Open, end: float, waits: dict[int, _Wait]) -> None:
    if not span.ready:
        return
    latest = max(span.ready.values())
    for rank, ready in span.ready.items():
        wait = waits.setdefault(rank, _Wait())
        wait.negotiations += 1
        wait.total += max(0.0, end - ready)
        if ready == latest and len(span.ready) > 1:
            wait.last += 1


def summarise_text(text: str) -> TimelineSummary:
    stream = TraceStream(text)
    return replace(summarise(stream), truncated=stream.truncated)
