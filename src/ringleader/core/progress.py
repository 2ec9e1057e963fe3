"""A job's progress in steps (pure): each rank's latest step, the job's step over time, its rate
and ETA, and the status line the leader says every ringleader_status_interval.

A rank's step comes from its own source (ringleader.rank.steps): `ringleader.progress(step=N,
total=M)` or a number in its heartbeat file, else its output matched by the step regex
(ringleader_step_regex, or the regex of the metric definition ringleader_step_metric names).
The job's step is the lowest of its ranks' (in a synchronous job they move together; the one
behind holds the others), never below the last status's. Its rate is taken over the last status
interval, and the ETA from it.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# Each rank's wrapper reports its step this many times per status interval, at most every
# MAX_REPORT_INTERVAL seconds (a rank's step is at most that old when the status is said).
REPORTS_PER_STATUS = 6
MAX_REPORT_INTERVAL = 10.0
# The status samples job.json keeps: beyond, every other one is dropped (a week of 60 s
# intervals is 10,080; the report draws this many points well).
MAX_SAMPLES = 2000


@dataclass(frozen=True)
class RankStep:
    """A rank's step as its wrapper last saw it; `total` when the rank said one."""

    rank: int
    step: int
    total: int | None = None

    def to_json(self) -> list[Any]:
        return [self.rank, self.step, self.total]

    @classmethod
    def from_json(cls, data: Any) -> "RankStep":
        rank, step, total = data
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (rank, step)):
            raise ValueError(f"a rank's step is [rank, step, total], got {data!r}")
        if total is not None and (not isinstance(total, int) or isinstance(total, bool)):
            raise ValueError(f"a step's total is a whole number or null, got {total!r}")
        return cls(rank, step, total)


def report_interval(status_interval: float) -> float | None:
    """How often each rank's wrapper reports its step; None with the status line off."""
    if status_interval <= 0:
        return None
    return max(min(status_interval / REPORTS_PER_STATUS, MAX_REPORT_INTERVAL), 0.05)


def parse_heartbeat(text: str) -> tuple[int, int | None] | None:
    """The step (and total) a heartbeat file holds ("1200 5000", "1200"); None when it holds
    none (a plain heartbeat: `touch`)."""
    words = text.split()
    if not words or len(words) > 2 or not all(word.isdigit() for word in words):
        return None
    return int(words[0]), int(words[1]) if len(words) == 2 else None


@dataclass(frozen=True)
class StatusSample:
    """The job's progress at one status tick (leader's clock)."""

    at: float
    step: int  # the lowest step of the ranks that reported one
    total: int | None
    rate: float | None  # steps per second since the last tick; None at the first
    eta: float | None  # seconds to `total` at `rate`
    steps: Mapping[int, int]  # every reporting rank's step

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "step": self.step,
            "total": self.total,
            "rate": self.rate,
            "eta": self.eta,
            "steps": {str(rank): step for rank, step in sorted(self.steps.items())},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "StatusSample":
        return cls(
            float(data["at"]),
            int(data["step"]),
            None if data.get("total") is None else int(data["total"]),
            None if data.get("rate") is None else float(data["rate"]),
            None if data.get("eta") is None else float(data["eta"]),
            {int(rank): int(step) for rank, step in dict(data.get("steps") or {}).items()},
        )


def sample(
    steps: Mapping[int, RankStep],
    at: float,
    configured_total: int | None,
    last: StatusSample | None,
) -> StatusSample | None:
    """The job's progress now, from every rank's latest step; None when no rank has a step
    source (nothing to say)."""
    if not steps:
        return None
    step = min(each.step for each in steps.values())
    if last is not None:
        # a rank whose first report comes late (behind, on a busy host) does not take the job
        # back: the job had reached the last status's step
        step = max(step, last.step)
    totals = [each.total for each in steps.values() if each.total is not None]
    total = configured_total if configured_total is not None else (max(totals) if totals else None)
    rate = None
    if last is not None and at > last.at:
        rate = max(step - last.step, 0) / (at - last.at)
    eta = None
    if total is not None and rate:
        eta = max(total - step, 0) / rate
    return StatusSample(at, step, total, rate, eta, {r: s.step for r, s in steps.items()})


def kept(samples: tuple[StatusSample, ...], new: StatusSample) -> tuple[StatusSample, ...]:
    """`samples` with `new`, at most MAX_SAMPLES: beyond, every other older one goes."""
    grown = (*samples, new)
    if len(grown) <= MAX_SAMPLES:
        return grown
    return (*grown[:-1:2], new)


def status_line(now: StatusSample) -> str:
    """`progress: step 1200/5000 (24%), 3.1 steps/s, ETA 20 min`; the parts it knows."""
    if now.total:
        where = f"step {now.step}/{now.total} ({100 * now.step / now.total:.0f}%)"
    else:
        where = f"step {now.step}"
    parts = [where]
    if now.rate is not None:
        parts.append(f"{_rate(now.rate)} steps/s")
    if now.eta is not None:
        parts.append(f"ETA {duration(now.eta)}")
    elif now.total and now.rate == 0:
        parts.append("no step since the last status")
    return "progress: " + ", ".join(parts)


def metric_line(now: StatusSample) -> str:
    """The same for SageMaker's metric definitions to scrape (docs/progress.md gives the
    regexes): `ringleader_step=1200; ringleader_steps_per_second=3.1; ...`."""
    values: list[tuple[str, float | int | None]] = [
        ("ringleader_step", now.step),
        ("ringleader_total_steps", now.total),
        ("ringleader_steps_per_second", None if now.rate is None else round(now.rate, 4)),
        ("ringleader_eta_seconds", None if now.eta is None else round(now.eta)),
    ]
    return "; ".join(f"{name}={value}" for name, value in values if value is not None) + ";"


def metric_values(now: StatusSample) -> Iterable[tuple[str, float]]:
    """The status as metrics.jsonl records (name, value)."""
    yield "ringleader_step", float(now.step)
    if now.rate is not None:
        yield "ringleader_steps_per_second", now.rate
    if now.eta is not None:
        yield "ringleader_eta_seconds", now.eta


def _rate(rate: float) -> str:
    return f"{rate:.1f}" if rate >= 1 else f"{rate:#.3g}"  # 0.9997 -> 1.00, 0.0312


def duration(seconds: float) -> str:
    """`45 s`, `20 min`, `3 h 5 min`."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"
