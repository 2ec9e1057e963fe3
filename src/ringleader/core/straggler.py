"""The straggler verdict (pure): which rank holds a synchronous job back, from the share of time
each rank waits for the others.

In a synchronous job every rank steps at the same rate (each collective waits for the slowest),
so step rates cannot tell who is slow. What differs is waiting: the others wait in every
collective for the slow one, and the slow one hardly waits at all. Each rank's wrapper samples
its rank's stacks and counts the samples in which it waits in a collective (rank/waits.py);
the leader keeps each rank's counts per status interval, takes each rank's wait share over the
last `window` intervals, and names the rank whose share is below the median rank's by at least
`threshold` (a share, 0 to 1). A job that slows down as a whole has no straggler: every rank
waits as before.
"""

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MIN_SAMPLES = 3  # a rank's samples over the window below which its share is not judged


@dataclass(frozen=True)
class WaitCount:
    """A rank's stack samples so far, and how many of them waited in a collective."""

    rank: int
    samples: int
    waiting: int

    def to_json(self) -> list[int]:
        return [self.rank, self.samples, self.waiting]

    @classmethod
    def from_json(cls, data: Any) -> "WaitCount":
        rank, samples, waiting = data
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in data):
            raise ValueError(f"a rank's waits are [rank, samples, waiting], got {data!r}")
        if not 0 <= waiting <= samples:
            raise ValueError(f"a rank's waiting samples are 0 to its samples, got {data!r}")
        return cls(rank, samples, waiting)


@dataclass(frozen=True)
class Shares:
    """Each judged rank's wait share over the window, and their median."""

    by_rank: Mapping[int, float]
    median: float


@dataclass(frozen=True)
class Straggler:
    """A straggler episode: the rank named, its latest numbers, since when (and until when,
    once it recovered or its attempt ended)."""

    rank: int
    host: str
    share: float  # its wait share over the window
    median: float  # the median rank's
    since: float  # wall clock (leader's) of the status at which it was first named
    until: float | None = None

    def describe(self) -> str:
        return (
            f"rank {self.rank} on {self.host} waits {self.share:.0%} of the time, the median "
            f"rank {self.median:.0%}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "host": self.host,
            "share": round(self.share, 4),
            "median": round(self.median, 4),
            "since": self.since,
            "until": self.until,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Straggler":
        until = data.get("until")
        return cls(
            int(data["rank"]),
            str(data["host"]),
            float(data["share"]),
            float(data["median"]),
            float(data["since"]),
            None if until is None else float(until),
        )


def window_counts(
    history: Sequence[Mapping[int, WaitCount]], window: int
) -> dict[int, tuple[int, int]]:
    """Each rank's (samples, waiting) over the last `window` intervals, from the cumulative
    counts at each status (`history`, oldest first)."""
    if not history:
        return {}
    last = history[-1]
    first = history[-window - 1] if len(history) > window else {}
    counts = {}
    for rank, now in last.items():
        before = first.get(rank)
        samples = now.samples - (before.samples if before else 0)
        waiting = now.waiting - (before.waiting if before else 0)
        if samples > 0:
            counts[rank] = (samples, max(min(waiting, samples), 0))
    return counts


def shares(counts: Mapping[int, tuple[int, int]]) -> Shares | None:
    """The wait share of every rank with enough samples; None with fewer than 3 such ranks (a
    median of two says nothing about which is slow)."""
    judged = {
        rank: waiting / samples
        for rank, (samples, waiting) in counts.items()
        if samples >= MIN_SAMPLES
    }
    if len(judged) < 3:
        return None
    return Shares(judged, statistics.median(judged.values()))


def straggler(found: Shares, threshold: float) -> int | None:
    """The rank that waits least, when it waits less than the median rank by `threshold` or
    more and less than every other rank by half of that (a clear margin: two ranks that
    hardly wait, one by chance of its samples, name neither); None otherwise."""
    ordered = sorted(found.by_rank, key=lambda each: (found.by_rank[each], each))
    rank, runner_up = ordered[0], ordered[1]
    least = found.by_rank[rank]
    if found.median - least < threshold or found.by_rank[runner_up] - least < threshold / 2:
        return None
    return rank
