"""metrics.jsonl, parsed and grouped per metric and rank (pure).

Each line is `{"timestamp": epoch seconds, "name": str, "value": float, "rank": int,
"host": str, "attempt": int}`; `attempt` is which start of the job's ranks wrote it (restarts
in place), and a line without it (an older metrics.jsonl) is attempt 0. Every host may have its
own file; the same point read twice (a copy of a host's output next to the original) counts
once. Lines that are not such an object are counted and skipped, so a file cut short by a crash
still reports everything before the cut.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeGuard


@dataclass(frozen=True, order=True)
class Point:
    timestamp: float
    name: str
    value: float
    rank: int
    host: str
    attempt: int = 0


@dataclass(frozen=True)
class Series:
    """One metric of one rank, in time order, across every attempt."""

    rank: int
    host: str
    times: tuple[float, ...]
    values: tuple[float, ...]
    attempts: tuple[int, ...] = ()  # each point's attempt (0 for every point when empty)

    def attempt_of(self, index: int) -> int:
        return self.attempts[index] if self.attempts else 0

    def by_attempt(self) -> list[tuple[int, tuple[float, ...], tuple[float, ...]]]:
        """(attempt, times, values) per run of points of one attempt, in time order: a chart
        draws each as its own line, never joining the end of one attempt to the next."""
        runs: list[tuple[int, list[float], list[float]]] = []
        for index, (at, value) in enumerate(zip(self.times, self.values, strict=True)):
            attempt = self.attempt_of(index)
            if not runs or runs[-1][0] != attempt:
                runs.append((attempt, [], []))
            runs[-1][1].append(at)
            runs[-1][2].append(value)
        return [(attempt, tuple(times), tuple(values)) for attempt, times, values in runs]


@dataclass(frozen=True)
class Metric:
    name: str
    series: tuple[Series, ...]  # by rank

    @property
    def points(self) -> int:
        return sum(len(series.values) for series in self.series)

    @property
    def attempts(self) -> tuple[int, ...]:
        """The attempts its points come from, in order."""
        return tuple(sorted({s.attempt_of(i) for s in self.series for i in range(len(s.times))}))

    def _finite(self) -> list[float]:
        return [v for series in self.series for v in series.values if math.isfinite(v)]

    @property
    def minimum(self) -> float | None:
        values = self._finite()
        return min(values) if values else None

    @property
    def maximum(self) -> float | None:
        values = self._finite()
        return max(values) if values else None

    @property
    def last(self) -> float | None:
        """The latest value of any rank (the lowest rank's on a tie)."""
        candidates = [(s.times[-1], -s.rank, s.values[-1]) for s in self.series if s.values]
        return max(candidates)[2] if candidates else None


@dataclass(frozen=True)
class Metrics:
    metrics: tuple[Metric, ...]  # by name
    skipped_lines: int

    @property
    def first_timestamp(self) -> float | None:
        times = [s.times[0] for m in self.metrics for s in m.series if s.times]
        return min(times) if times else None

    @property
    def attempt_starts(self) -> dict[int, float]:
        """Each attempt's first point of any metric, by attempt."""
        starts: dict[int, float] = {}
        for metric in self.metrics:
            for series in metric.series:
                for index, at in enumerate(series.times):
                    attempt = series.attempt_of(index)
                    starts[attempt] = min(at, starts.get(attempt, at))
        return dict(sorted(starts.items()))


def parse_line(line: str) -> Point | None:
    try:
        data: Any = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    timestamp, value, rank = data.get("timestamp"), data.get("value"), data.get("rank")
    name, host, attempt = data.get("name"), data.get("host", ""), data.get("attempt", 0)
    if not isinstance(name, str) or not name or not isinstance(host, str):
        return None
    if not (_is_number(timestamp) and _is_number(value) and _is_whole(rank)):
        return None
    if not math.isfinite(timestamp) or not _is_whole(attempt) or attempt < 0:
        return None
    return Point(float(timestamp), name, float(value), rank, host, attempt)


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_whole(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_metrics(lines: Iterable[str]) -> Metrics:
    points: set[Point] = set()
    skipped = 0
    for line in lines:
        if not line.strip():
            continue
        point = parse_line(line)
        if point is None:
            skipped += 1
        else:
            points.add(point)
    grouped: dict[str, dict[tuple[int, str], list[Point]]] = {}
    for point in sorted(points):
        grouped.setdefault(point.name, {}).setdefault((point.rank, point.host), []).append(point)
    metrics = tuple(
        Metric(
            name,
            tuple(
                Series(
                    rank,
                    host,
                    tuple(p.timestamp for p in series),
                    tuple(p.value for p in series),
                    tuple(p.attempt for p in series),
                )
                for (rank, host), series in sorted(by_rank.items())
            ),
        )
        for name, by_rank in sorted(grouped.items())
    )
    return Metrics(metrics, skipped)
