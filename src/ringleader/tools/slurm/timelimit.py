"""Whether a SIGTERM from Slurm is its time limit (`--time`): Slurm stops a job at its limit
exactly as scancel does, so the job's end time, asked once at the start, tells them apart."""

import contextlib
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ringleader.core.files import write_atomically
from ringleader.core.outcome import FAILURE_FILE_LIMIT

QUERY_TIMEOUT = 10.0  # seconds squeue may take; the job starts meanwhile
CLOCK_SLACK = 2.0  # the controller's and this node's clocks, and the signal's way here
_END_TIME = "%Y-%m-%dT%H:%M:%S"  # squeue's %e, in the controller's (and node's) local time
_NO_ANSWER = f"squeue gave no answer within {QUERY_TIMEOUT:g} s"

Run = Callable[..., "subprocess.CompletedProcess[str]"]


def parse_end_time(text: str) -> float | None:
    """squeue's end time; None for what a job without a limit shows (Unknown, N/A, NONE)."""
    try:
        return time.mktime(time.strptime(text.strip(), _END_TIME))
    except ValueError:
        return None


def at_time_limit(end_time: float | None, stopped_at: float) -> bool:
    return end_time is not None and stopped_at >= end_time - CLOCK_SLACK


class EndTime:
    """The job's end time, asked of squeue in the background (None: no limit, or no answer;
    `problem` then says why there was none)."""

    def __init__(self, job_id: str, run: Run = subprocess.run) -> None:
        self._value: float | None = None
        self.problem: str | None = None
        self._known = threading.Event()
        self._thread = threading.Thread(target=self._ask, args=(job_id, run), daemon=True)
        self._thread.start()

    def _ask(self, job_id: str, run: Run) -> None:
        argv = ["squeue", "--noheader", "--jobs", job_id, "--format", "%e"]
        try:
            done = run(argv, capture_output=True, text=True, timeout=QUERY_TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            self.problem = _NO_ANSWER
        except (OSError, subprocess.SubprocessError) as error:
            self.problem = f"squeue did not run: {error}"
        else:
            if done.returncode == 0:
                self._value = parse_end_time(done.stdout)
            else:
                said = (done.stderr or "").strip().splitlines()
                self.problem = f"squeue exited with {done.returncode}" + (
                    f": {said[-1]}" if said else ""
                )
        self._known.set()

    def value(self) -> float | None:
        """The answer, waiting for it at most as long as the query may take."""
        if not self._known.wait(QUERY_TIMEOUT):
            self.problem = _NO_ANSWER
        return self._value


def end_time_at_stop(first: EndTime, ask_again: Callable[[], EndTime]) -> EndTime:
    """The answer that tells the job's end time when its SIGTERM came: the one asked at the
    start or, when that has none, one asked now. squeue can fail or time out on a busy
    controller (seen in CI: every node's failure file then named a plain SIGTERM at the time
    limit); a job without a limit pays a second query, during its stop."""
    return first if first.value() is not None else ask_again()


def time_limit_line(end_time: float) -> str:
    when = time.strftime(_END_TIME, time.localtime(end_time))
    return f"Slurm's time limit was reached (the job's end time {when}); it sent SIGTERM."


def put_first(failure_file: Path, line: str) -> None:
    """`line` first in this node's failure file, within its 1024 bytes (best-effort: a full
    disk never changes the job's exit code)."""
    with contextlib.suppress(OSError):
        previous = failure_file.read_text() if failure_file.exists() else ""
        text = f"{line}\n{previous}".encode()[:FAILURE_FILE_LIMIT]
        write_atomically(failure_file, text.decode(errors="ignore").encode())
