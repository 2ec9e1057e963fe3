"""Detached cluster jobs on the leader host: where each one's files are, what they hold, and
what a job's state is (pure, apart from the small readers at the end).

A detached job `J` lives in `ROOT/J/console/` on the leader (ROOT is `--remote-dir`):
`output.log` (everything a foreground `ringleader cluster run` would have printed),
`record.json` (who runs it: the runner's pid and start time, the command, where its results
go) and, once it is over, `exit.json` (its exit code), written last and in one step.
"""

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ringleader.core.errors import ConfigError

NO_SUCH_JOB = 66  # EX_NOINPUT: attach/stop/status of a job the leader does not have
WAIT_TIMED_OUT = 124  # attach/stop: --timeout passed first (as GNU timeout)
RUNNER_VANISHED = 70  # the job's runner ended without writing its exit code
EXIT_TRAILER = "ringleader-exit-code="  # the remote side's last stderr line, for ssh's caller

_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

RUNNING, ENDED, VANISHED = "running", "ended", "vanished"


@dataclass(frozen=True)
class JobRecord:
    job: str
    pid: int
    pid_started: float  # the runner's create time, so a reused pid is not taken for it
    started: str  # wall clock, for people
    leader: str
    hosts: tuple[str, ...]
    command: tuple[str, ...]
    results: str  # absolute, on the leader: <results>/<host>/

    def to_json(self) -> str:
        return json.dumps(
            {**asdict(self), "hosts": list(self.hosts), "command": list(self.command)}
        )

    @classmethod
    def from_json(cls, text: str) -> "JobRecord":
        data: dict[str, Any] = json.loads(text)
        return cls(
            job=str(data["job"]),
            pid=int(data["pid"]),
            pid_started=float(data["pid_started"]),
            started=str(data["started"]),
            leader=str(data["leader"]),
            hosts=tuple(str(host) for host in data["hosts"]),
            command=tuple(str(word) for word in data["command"]),
            results=str(data["results"]),
        )


@dataclass(frozen=True)
class JobStatus:
    record: JobRecord
    state: str  # RUNNING, ENDED or VANISHED
    exit_code: int | None  # None while running

    def summary(self) -> str:
        job = self.record.job
        if self.state == RUNNING:
            return f"job {job} is running (since {self.record.started})"
        if self.state == VANISHED:
            return (
                f"job {job}: its runner (pid {self.record.pid}) ended without an exit code "
                f"(exit {RUNNER_VANISHED}); results, if any, on {self.record.leader} in "
                f"{self.record.results}/<host>/"
            )
        return (
            f"job {job} ended: exit code {self.exit_code}; results on {self.record.leader} "
            f"in {self.record.results}/<host>/"
        )

    @property
    def code(self) -> int:
        """What attach returns for it once it is over."""
        return RUNNER_VANISHED if self.exit_code is None else self.exit_code


def check_job_id(job: str) -> str:
    """A job id names a directory: no separators, no leading dot."""
    if not _JOB_ID.fullmatch(job):
        raise ConfigError(
            "JOB", f"expected a job id such as cluster-20261125-093000-abc123, got {job!r}"
        )
    return job


def job_console(root: str | Path, job: str) -> Path:
    return Path(root) / check_job_id(job) / "console"


def state_of(record: JobRecord, exit_code: int | None, runner_alive: bool) -> JobStatus:
    if exit_code is not None:
        return JobStatus(record, ENDED, exit_code)
    return JobStatus(record, RUNNING if runner_alive else VANISHED, None)


def status_table(statuses: list[JobStatus]) -> list[str]:
    rows = [f"{'JOB':<34} {'STATE':<9} {'EXIT':>4}  {'STARTED':<19}  RESULTS / COMMAND"]
    for status in sorted(statuses, key=lambda item: item.record.started):
        record = status.record
        code = "-" if status.exit_code is None else str(status.exit_code)
        rows.append(
            f"{record.job:<34} {status.state:<9} {code:>4}  {record.started:<19}  "
            f"{record.results}/<host>/  ({' '.join(record.command)})"
        )
    return rows


def parse_exit(text: str) -> int:
    return int(json.loads(text)["exit_code"])


def exit_json(code: int) -> str:
    return json.dumps({"exit_code": code})


def split_trailer(line: str) -> int | None:
    """The exit code in the remote side's trailer line, else None."""
    if not line.startswith(EXIT_TRAILER):
        return None
    try:
        return int(line[len(EXIT_TRAILER) :].strip())
    except ValueError:
        return None


# ------------------------------------------------------------------------------------ readers
def read_record(console: Path) -> JobRecord | None:
    try:
        return JobRecord.from_json((console / "record.json").read_text())
    except FileNotFoundError:
        return None


def read_exit(console: Path) -> int | None:
    try:
        return parse_exit((console / "exit.json").read_text())
    except FileNotFoundError:
        return None
