"""A host's health before an attempt: what each check found, and the job's verdict on them.

Every host runs its checks (launch/health.py) before the first attempt and before each restart;
the workers send theirs to the leader with their hello or their ready. Pure: the results, their
wire form, and the outcome when a host failed one (exitcodes.HEALTH_CHECK_FAILED, every failing
host and check named with its numbers, no rank started).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ringleader.core import exitcodes
from ringleader.core.outcome import Outcome, truncate

OK = "ok"
FAILED = "failed"
NOT_CHECKED = "not checked"  # nothing to check here (no GPU): said, never passed silently
STATUSES = (OK, FAILED, NOT_CHECKED)


@dataclass(frozen=True)
class LinkSpeed:
    """What a reachability probe measured on one link (ringleader.wire.probe)."""

    source: str  # the host that probed
    target: str  # the host it reached
    round_trip: float  # seconds, the median of the probe's round trips
    bandwidth: float  # bytes per second, of the probe's bulk transfer

    def describe(self) -> str:
        return (
            f"{self.source} -> {self.target}: round trip {self.round_trip * 1000:.2f} ms, "
            f"{self.bandwidth / 1e6:.0f} MB/s"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target,
            "round_trip": round(self.round_trip, 6),
            "bandwidth": round(self.bandwidth),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "LinkSpeed":
        round_trip, bandwidth = float(data["round_trip"]), float(data["bandwidth"])
        if not (round_trip >= 0 and bandwidth >= 0):
            raise ValueError("a link's round trip and bandwidth are not negative")
        return cls(str(data["source"]), str(data["target"]), round_trip, bandwidth)


@dataclass(frozen=True)
class CheckResult:
    name: str  # what was checked: "free disk /opt/ml/checkpoints", "/dev/shm", "port 7777"
    status: str  # OK, FAILED or NOT_CHECKED
    detail: str  # its numbers: "1.0 MiB, at least 64.0 MiB wanted (ringleader_min_shm)"
    link: LinkSpeed | None = None  # a reachability probe's numbers, when it got through

    @property
    def failed(self) -> bool:
        return self.status == FAILED

    def describe(self) -> str:
        return f"{self.name}: {self.detail}"

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"name": self.name, "status": self.status, "detail": self.detail}
        if self.link is not None:
            found["link"] = self.link.to_json()
        return found

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CheckResult":
        status = data["status"]
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        link = None if data.get("link") is None else LinkSpeed.from_json(data["link"])
        return cls(str(data["name"]), str(status), str(data["detail"]), link)


Report = tuple[CheckResult, ...]


def summary(results: Sequence[CheckResult]) -> str:
    """One line for the host's log: every check, failed ones first."""
    ordered = sorted(results, key=lambda result: not result.failed)
    return "; ".join(f"{result.describe()} [{result.status}]" for result in ordered)


def clock_check(offset: float, bound: float) -> CheckResult:
    """A worker's clock against the leader's (the leader's minus the worker's, as measured at
    its hello), failed beyond `bound` seconds either way."""
    detail = (
        f"{offset:+.3f} s from the leader's, at most {bound:g} s allowed "
        "(ringleader_max_clock_offset)"
    )
    return CheckResult("clock", OK if abs(offset) <= bound else FAILED, detail)


def slowest_links(reports: Mapping[str, Sequence[CheckResult]], count: int = 3) -> str | None:
    """The `count` slowest links the probes measured, by bandwidth (then round trip), in one
    line; None when no probe got through."""
    links = [result.link for report in reports.values() for result in report if result.link]
    if not links:
        return None
    slowest = sorted(links, key=lambda link: (link.bandwidth, -link.round_trip))[:count]
    shown = "; ".join(link.describe() for link in slowest)
    return f"slowest of {len(links)} link(s) probed: {shown}"


def health_outcome(reports: Mapping[str, Sequence[CheckResult]], attempt: int) -> Outcome | None:
    """None when no host failed a check; else the job's outcome: every host exits with
    HEALTH_CHECK_FAILED and the failure file names each failing host, check and numbers."""
    failing = [
        (host, result) for host in sorted(reports) for result in reports[host] if result.failed
    ]
    if not failing:
        return None
    hosts = sorted({host for host, _ in failing})
    before = "the job started" if attempt == 0 else f"attempt {attempt}"
    first_host, first = failing[0]
    if len(hosts) == 1:
        headline = f"Host {first_host} failed its health check before {before}: "
    else:
        headline = (
            f"Hosts {', '.join(hosts)} failed their health checks before {before}; first "
            f"{first_host}: "
        )
    nothing = "No rank was started." if attempt == 0 else f"Attempt {attempt} was not started."
    headline += f"{first.describe()}. {nothing}"
    lines = [f"{host}: {result.describe()}" for host, result in failing]
    return Outcome(
        exitcodes.HEALTH_CHECK_FAILED,
        truncate(headline, lines, "Every failed check:", first=True),
    )
