"""The straggler verdict (pure): which rank holds a synchronous job back, from the share of time
each rank waits for the others.

In a synchronous job every rank steps at the same rate (each collective waits for the slowest),
so step rates cannot tell who is slow. What differs is waiting: the others wait in every
collective for the slow one, and the slow one hardly waits at all. Each rank's wrapper samples
its rank's stacks and counts the samples in which it waits in a collective (rank/waits.py);
the leader keeps each rank's counts per status interval, takes each rank's wait share over the
last `window` intervals, and names the rank whose share is below the median rank's by at least
`threshold` (a share, 0 to 1), when its samples show it: a share from a few samples is
noisy, and the least of many noisy shares is low by chance. So the rank is named only when
ranks that wait alike would give it so few waiting samples with a chance of at most ALPHA
shared among the ranks judged (Fisher's exact test of its counts against the other ranks'
pooled). A job that slows down as a whole has no straggler: every rank waits as before.
"""

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MIN_SAMPLES = 3  # a rank's samples over the window below which its share is not judged
# the chance, at each status, that ranks which wait alike get one of them named: low, since a
# job is judged at every status for as long as it runs (a day at 60 s: 1,440 verdicts)
ALPHA = 1e-6
# Stack samples a second of each rank (ringleader_straggler_sample_rate), for the first 10 s of
# each status interval (rank/waits.py): a window of 3 intervals then has the 120 samples of a
# rank that show one waiting 5% of the time against others waiting 30% (bench/straggler_rule.py).
# Each sample pauses the rank: milliseconds for PyTorch, 20 ms for TensorFlow
# (bench/sampler_pause.py).
SAMPLE_RATE = 4


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
    """Each judged rank's (samples, waiting) over the window, its wait share, and the median
    share."""

    counts: Mapping[int, tuple[int, int]]

    @property
    def by_rank(self) -> dict[int, float]:
        return {rank: waiting / samples for rank, (samples, waiting) in self.counts.items()}

    @property
    def median(self) -> float:
        return statistics.median(self.by_rank.values())


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
    judged = {rank: count for rank, count in counts.items() if count[0] >= MIN_SAMPLES}
    if len(judged) < 3:
        return None
    return Shares(judged)


def straggler(found: Shares, threshold: float) -> int | None:
    """The rank that waits least, when it waits less than the median rank by `threshold` or
    more, less than every other rank by half of that (a clear margin: of two ranks that
    hardly wait neither is named), and its samples show it (`chance_of_so_few`); None
    otherwise."""
    by_rank = found.by_rank
    ordered = sorted(by_rank, key=lambda each: (by_rank[each], each))
    rank, runner_up = ordered[0], ordered[1]
    least = by_rank[rank]
    if found.median - least < threshold or by_rank[runner_up] - least < threshold / 2:
        return None
    others = [count for each, count in found.counts.items() if each != rank]
    pooled = (sum(samples for samples, _ in others), sum(waiting for _, waiting in others))
    if chance_of_so_few(found.counts[rank], pooled) > ALPHA / len(found.counts):
        return None
    return rank


def chance_of_so_few(rank: tuple[int, int], others: tuple[int, int]) -> float:
    """Fisher's exact test, one-sided: were the (samples, waiting) of `rank` and of `others`
    drawn alike, the chance that `rank`'s samples hold as few waiting ones as they do."""
    samples, waiting = rank
    total = samples + others[0]
    waited = waiting + others[1]

    def log_comb(n: int, k: int) -> float:
        return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)

    whole = log_comb(total, samples)
    fewest = max(0, samples - (total - waited))
    return min(
        1.0,
        sum(
            math.exp(log_comb(waited, k) + log_comb(total - waited, samples - k) - whole)
            for k in range(fewest, waiting + 1)
        ),
    )
