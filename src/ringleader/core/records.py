"""What each rank's wrapper records about its process, and how it travels as JSON."""

import signal
from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class RankRecord:
    rank: int
    host: str
    exit_code: int  # 128+N when the process was killed by signal N
    signal: int | None
    started_at: float  # time.time() on the rank's host
    ended_at: float
    terminated: bool  # the wrapper had been told to stop it (SIGTERM) before it ended
    stderr_tail: tuple[str, ...]
    # The exception a torch `@record`-decorated main wrote (type: message, then last frames).
    error: tuple[str, ...] = ()
    role: str | None = None  # what the rank is for, when it has a role (TensorFlow: ps:1)
    first_output_at: float | None = None  # time.time() of its first output line
    # When the process that launched the wrapper (mpirun's daemon; mpirun on its own host) and
    # the wrapper itself were created: the launch fan-out and the wrapper's Python start-up.
    daemon_started_at: float | None = None
    wrapper_started_at: float | None = None
    # Its wrapper ended without sending this record (killed first: Open MPI 5's daemon SIGKILLs
    # a rank's process group 0.2 s after its SIGTERM); the host's agent wrote it instead.
    unreported: bool = False
    attempt: int = 0  # which start of the job's ranks (0, then one more per restart)

    @property
    def failed(self) -> bool:
        return self.exit_code != 0

    def describe(self) -> str:
        role = f" ({self.role})" if self.role else ""
        where = f"Rank {self.rank}{role} on host {self.host}"
        if self.unreported:
            return f"{where} ended without a report: its wrapper was killed (SIGKILL) first"
        if self.signal is not None:
            return (
                f"{where} was killed by signal {self.signal} ({signal_name(self.signal)}); "
                f"exit code {self.exit_code}"
            )
        return f"{where} exited with code {self.exit_code}"

    def on_clock(self, offset: float) -> "RankRecord":
        """The record with its times moved by `offset` seconds (its host's clock to the
        leader's, measured at the host's hello)."""
        if offset == 0.0:
            return self

        def moved(at: float | None) -> float | None:
            return None if at is None else at + offset

        return replace(
            self,
            started_at=self.started_at + offset,
            ended_at=self.ended_at + offset,
            first_output_at=moved(self.first_output_at),
            daemon_started_at=moved(self.daemon_started_at),
            wrapper_started_at=moved(self.wrapper_started_at),
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["stderr_tail"] = list(self.stderr_tail)
        data["error"] = list(self.error)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RankRecord":
        return cls(
            rank=int(data["rank"]),
            host=str(data["host"]),
            exit_code=int(data["exit_code"]),
            signal=None if data.get("signal") is None else int(data["signal"]),
            started_at=float(data["started_at"]),
            ended_at=float(data["ended_at"]),
            terminated=bool(data["terminated"]),
            stderr_tail=tuple(str(line) for line in data.get("stderr_tail", ())),
            error=tuple(str(line) for line in data.get("error", ())),
            role=None if data.get("role") is None else str(data["role"]),
            first_output_at=_optional_time(data, "first_output_at"),
            daemon_started_at=_optional_time(data, "daemon_started_at"),
            wrapper_started_at=_optional_time(data, "wrapper_started_at"),
            unreported=bool(data.get("unreported", False)),
            attempt=int(data.get("attempt", 0)),
        )


# How much of a rank's stderr its record keeps: the last lines, each cut to this many characters.
STDERR_TAIL_LINES = 20
TAIL_LINE_CHARS = 300


def unreported_record(
    rank: int,
    host: str,
    started_at: float,
    ended_at: float,
    attempt: int = 0,
    exiting_with: int | None = None,
    stderr_tail: tuple[str, ...] = (),
) -> RankRecord:
    """What a host's agent knows of a rank whose wrapper died before reporting: it was
    killed, and whatever killed the wrapper (its process group's SIGKILL) killed the rank;
    unless the rank had begun to exit with a code of its own (`exiting_with`, its exit note:
    mpirun's daemon kills a wrapper a second after its stop, and on a busy machine that can
    come while the failing rank's exit still runs): then it is reported with that code, and
    with the last lines of stderr the agent relayed for it."""
    said = (
        f"[ringleader] its wrapper was killed while it was exiting with code {exiting_with}: "
        "reported with it"
    )
    return RankRecord(
        rank=rank,
        host=host,
        exit_code=exiting_with or 128 + signal.SIGKILL,
        signal=None if exiting_with else int(signal.SIGKILL),
        started_at=started_at,
        ended_at=ended_at,
        terminated=True,
        stderr_tail=(*stderr_tail[-(STDERR_TAIL_LINES - 1) :], said) if exiting_with else (),
        unreported=not exiting_with,
        attempt=attempt,
    )


def _optional_time(data: dict[str, Any], key: str) -> float | None:
    return None if data.get(key) is None else float(data[key])


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
