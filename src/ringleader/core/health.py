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
class CheckResult:
    name: str  # what was checked: "free disk /opt/ml/checkpoints", "/dev/shm", "port 7777"
    status: str  # OK, FAILED or NOT_CHECKED
    detail: str  # its numbers: "1.0 MiB, at least 64.0 MiB wanted (ringleader_min_shm)"

    @property
    def failed(self) -> bool:
        return self.status == FAILED

    def describe(self) -> str:
        return f"{self.name}: {self.detail}"

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CheckResult":
        status = data["status"]
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        return cls(str(data["name"]), str(status), str(data["detail"]))


Report = tuple[CheckResult, ...]


def summary(results: Sequence[CheckResult]) -> str:
    """One line for the host's log: every check, failed ones first."""
    ordered = sorted(results, key=lambda result: not result.failed)
    return "; ".join(f"{result.describe()} [{result.status}]" for result in ordered)


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
