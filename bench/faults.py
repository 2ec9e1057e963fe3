"""Fault benchmark: ringleader's failure table vs sagemaker-training's MPI runner (`train`).

Both run in the same image (ringleader:latest) on the same fake hosts, 3 hosts x 2 ranks, with
examples/mpi_allreduce.py (an mpi4py script both runners start under mpirun). For each fault it
measures the seconds from the fault to the exit of every container, as Docker recorded it
(FinishedAt), and the exit code each host reported; it prints one table at the end, progress on
stderr.

Fault time, per row:
  rank exits / rank killed     when the rank's "rank 4 failing on purpose" (or "rank 4 raising
                               SIGKILL") line reached this process through `docker logs`; if that
                               line is never seen, the first `docker start` (marked *)
  docker kill / disconnect     just before the Docker API call, once every rank printed "round 1:"
  host never starting, bad     the first `docker start`
  configuration
  docker pause (frozen host)   just before the Docker API call; the seconds are until
                               every *other* container exited; then the frozen one is
                               unpaused, and its code is what it reported then
  full log volume / full       the first "the rank's log ... stopped" warning (algo-2's 1 MB
  result disk / wedged mpirun  tmpfs under output/data/logs), rank 0's "filled the disk" line
                               (algo-1's 2 MB tmpfs /opt/ml/output), the "stopped orted" line
                               (once every rank finalized MPI, algo-2's orted gets SIGSTOP);
                               the job is bench/probe/disk_job.py

A run that has not ended `--toolkit-timeout` (or `--ringleader-timeout`) seconds after its fault
is reported as hung with the codes of the hosts that had exited by then ("?" = still running),
and its containers are killed and removed. "-" is a host that was never started.

Usage: .venv/bin/python bench/faults.py [--rows 1 3] [--runners ringleader toolkit]
                                         [--toolkit-rows 1 3 4 5] [--toolkit-timeout 240]
                                         [--ringleader-timeout 120] [--log-dir DIR]
Every row runs for both runners unless --toolkit-rows narrows the toolkit's (its failure runs
take 2.5-4.5 minutes each, so all rows take about 35 minutes).
"""

import argparse
import contextlib
import dataclasses
import io
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors

from ringleader.tools.local.plan import LocalJobSpec, sagemaker_hyperparameters
from ringleader.tools.local.run import LocalJob, LocalJobResult

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.container.mounts import MountedJob

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PROBES = Path(__file__).resolve().parent / "probe"
ENTRYPOINTS = {"ringleader": None, "toolkit": ("train",)}
HOSTS = ("algo-1", "algo-2", "algo-3")
LONG_JOB = {"rounds": "100", "sleep": "5"}
RINGLEADER_SETTINGS = {"leader_timeout": "4", "startup_timeout": "60"}
STARTUP_WAIT = 120  # seconds for every rank to print "round 1:" before a fault is injected
CREATE_ALLOWANCE = 10  # seconds from launching a job to its first `docker start`, at most
FAILURE_WIDTH = 90


@dataclass(frozen=True)
class Row:
    number: int
    name: str
    # "marker": the job fails by itself, fault = the marker line; "start": fault = first start;
    # "kill": docker kill --signal `signal` `host`; "disconnect": network disconnect `host`.
    trigger: str
    hyperparameters: dict[str, str]
    expected: tuple[int | None, ...]  # ringleader's codes per its failure table
    host: str = ""
    signal: str = ""
    marker: str = ""
    settings: dict[str, str] = field(default_factory=dict)  # ringleader only, over the defaults
    absent_hosts: frozenset[str] = frozenset()
    bad_program: bool = False
    source_dir: Path = EXAMPLES
    entry_point: str = "mpi_allreduce.py"
    tmpfs: dict[str, dict[str, str]] = field(default_factory=dict)  # host -> mount -> options


def disk_and_launcher_rows() -> tuple[Row, ...]:
    """Full disks and a wedged MPI daemon, with bench/probe/disk_job.py (every rank prints
    --megabytes)."""

    def probe(*args: Any, **kwargs: Any) -> Row:
        return Row(*args, source_dir=PROBES, entry_point="disk_job.py", **kwargs)

    full_result_disk = {"algo-1": {"/opt/ml/output": "size=2m"}}
    fill = {"megabytes": "0.5", "fill": "/opt/ml/output"}
    return (
        probe(
            12,
            "algo-2's log volume full (1 MB tmpfs, 2 MB per rank)",
            "marker",
            {"megabytes": "2"},
            (0, 0, 0),
            marker="[ringleader] the rank's log /opt/ml/output/data/logs/algo-2/",
            tmpfs={"algo-2": {"/opt/ml/output/data/logs": "size=1m"}},
        ),
        probe(
            13,
            "algo-1's result disk full, job succeeds",
            "marker",
            fill,
            (0, 0, 0),
            marker="filled the disk under",
            tmpfs=full_result_disk,
        ),
        probe(
            14,
            "algo-1's result disk full, rank 4 exits 3",
            "marker",
            {**fill, "fail-rank": "4", "fail-code": "3"},
            (3, 3, 3),
            marker="filled the disk under",
            tmpfs=full_result_disk,
        ),
        probe(
            15,
            "mpirun wedged (orted SIGSTOPped), launcher_exit_timeout 4",
            "marker",
            {"megabytes": "0.01", "wedge-host": "algo-2"},
            (0, 0, 0),
            marker="stopped orted",
            settings={"launcher_exit_timeout": "4"},
        ),
    )


ROWS = {
    row.number: row
    for row in (
        Row(
            1,
            "rank 4 exits 3",
            "marker",
            {"rounds": "100", "fail-rank": "4", "fail-code": "3"},
            (3, 3, 3),
            marker="rank 4 failing on purpose",
        ),
        Row(
            2,
            "rank 4 killed (SIGKILL)",
            "marker",
            {"rounds": "100", "fail-rank": "4", "fail-signal": "KILL"},
            (137, 137, 137),
            marker="rank 4 raising SIGKILL",
        ),
        Row(3, "SIGTERM to worker algo-2", "kill", LONG_JOB, (143, 143, 143), "algo-2", "SIGTERM"),
        Row(4, "worker algo-3 SIGKILLed", "kill", LONG_JOB, (75, 75, 137), "algo-3", "SIGKILL"),
        Row(5, "worker algo-3 partitioned", "disconnect", LONG_JOB, (75, 75, 75), "algo-3"),
        Row(6, "leader algo-1 SIGKILLed", "kill", LONG_JOB, (137, 75, 75), "algo-1", "SIGKILL"),
        Row(7, "leader algo-1 partitioned", "disconnect", LONG_JOB, (75, 75, 75), "algo-1"),
        Row(
            8,
            "host algo-3 never starts",
            "start",
            {"rounds": "2"},
            (69, 69, None),
            settings={"startup_timeout": "10"},
            absent_hosts=frozenset({"algo-3"}),
        ),
        Row(
            9,
            "bad config: program nope.py",
            "start",
            {"rounds": "2"},
            (78, 78, 78),
            bad_program=True,
        ),
        Row(10, "worker algo-3 frozen (docker pause)", "pause", LONG_JOB, (75, 75, 75), "algo-3"),
        *disk_and_launcher_rows(),
    )
}


class Capture(io.TextIOBase):
    """The job's printed lines, each with the wall clock at which it arrived."""

    def __init__(self) -> None:
        self._lines: list[tuple[float, str]] = []
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        now = time.time()
        with self._lock:
            self._lines.append((now, text))
        return len(text)

    def text(self) -> str:
        with self._lock:
            return "".join(text for _, text in self._lines)

    def timed_text(self) -> str:
        """Every line prefixed with the UTC time it arrived here (HH:MM:SS.mmm)."""
        with self._lock:
            return "".join(f"{_clock(at)} {text}" for at, text in self._lines)

    def count(self, needle: str) -> int:
        return self.text().count(needle)

    def first(self, needle: str) -> float | None:
        with self._lock:
            return next((at for at, text in self._lines if needle in text), None)


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1000):03d}"


@dataclass
class Outcome:
    row: Row
    runner: str
    seconds: float | None = None  # fault -> every container exited
    hung_after: float | None = None  # the bound, when the run did not end within it
    from_start: bool = False  # the marker was never seen: measured from the first docker start
    codes: tuple[str, ...] = ("?", "?", "?")
    failure: str = ""
    note: str = ""
    image: str = ""  # short id of the image the job ran (it may be rebuilt between runs)

    def seconds_text(self) -> str:
        if self.hung_after is not None:
            return f"> {self.hung_after:.0f} (hung)"
        if self.seconds is None:
            return "n/a"
        return f"{self.seconds:.2f}{'*' if self.from_start else ''}"

    def codes_text(self) -> str:
        text = " ".join(self.codes)
        if self.runner == "ringleader":
            expected = tuple("-" if code is None else str(code) for code in self.row.expected)
            if self.codes != expected or self.hung_after is not None:
                text += f"  (expected {' '.join(expected)})"
        return text


def build_spec(row: Row, runner: str, output_dir: Path) -> LocalJobSpec:
    toolkit = runner == "toolkit"
    spec = LocalJobSpec(
        hosts=len(HOSTS),
        processes_per_host=2,
        source_dir=row.source_dir,
        entry_point=row.entry_point,
        hyperparameters=row.hyperparameters,
        # The toolkit passes every hyperparameter to the script, which rejects unknown options.
        settings={} if toolkit else {**RINGLEADER_SETTINGS, **row.settings},
        output_dir=output_dir,
        command=() if toolkit else ("train",),
        entrypoint=ENTRYPOINTS[runner],
        absent_hosts=row.absent_hosts,
    )
    if row.bad_program:
        values = {
            **sagemaker_hyperparameters(spec, os.cpu_count() or 1),
            "sagemaker_program": json.dumps("nope.py"),
        }
        text = json.dumps(values)
        overrides = {host: {"hyperparameters.json": text} for host in HOSTS}
        spec = dataclasses.replace(spec, config_overrides=overrides)
    return spec


def progress(text: str) -> None:
    print(f"... {text}", file=sys.stderr, flush=True)


def wait_until(predicate: Callable[[], bool], deadline: float, thread: threading.Thread) -> bool:
    """True once `predicate` holds; False when the job ended or the deadline passed first."""
    while time.time() < deadline:
        if predicate():
            return True
        if not thread.is_alive():
            return predicate()
        time.sleep(0.1)
    return predicate()


def container_states(client: Any, job: LocalJob) -> dict[str, dict[str, Any]]:
    states = {}
    for host, container_id in job.container_ids.items():
        with contextlib.suppress(docker.errors.APIError):
            states[host] = client.api.inspect_container(container_id)["State"]
    return states


def known_code(host: str, job: LocalJob, states: dict[str, dict[str, Any]]) -> str:
    """A host's exit code if it has exited, "?" if it still runs, "-" if never created."""
    if host not in job.container_ids:
        return "-"
    state = states.get(host)
    return str(state["ExitCode"]) if state and state["Status"] == "exited" else "?"


def force_end(client: Any, job: LocalJob, thread: threading.Thread) -> None:
    """Kill every container so LocalJob finishes and cleans up; remove what it leaves behind."""
    for container_id in job.container_ids.values():
        with contextlib.suppress(docker.errors.APIError):
            client.api.kill(container_id, signal="SIGKILL")
    thread.join(150)  # LocalJob drains logs (bounded) and removes containers and network
    if thread.is_alive():
        for container_id in job.container_ids.values():
            with contextlib.suppress(docker.errors.APIError):
                client.api.remove_container(container_id, force=True)
        with contextlib.suppress(docker.errors.APIError):
            client.api.remove_network(f"{job.job_id}-net")


def first_failure_line(job: LocalJob) -> str:
    for host in HOSTS:
        path = job.output_dir / host / "output" / "failure"
        with contextlib.suppress(OSError):
            lines = [line.strip() for line in path.read_text(errors="replace").splitlines()]
            lines = [line for line in lines if line]
            if lines:
                # A first line that only announces what follows ("ExecuteUserScriptError:")
                # gets the next line after " | ".
                first = lines[0] if not lines[0].endswith(":") else " | ".join(lines[:2])
                text = f"{host}: {first}"
                return text if len(text) <= FAILURE_WIDTH else text[: FAILURE_WIDTH - 3] + "..."
    return "(no failure file)"


class JobThread(threading.Thread):
    """A job run in the background: its result, or what it raised (reported in the table: the
    benchmark goes on)."""

    def __init__(self, job: LocalJob) -> None:
        super().__init__(daemon=True)
        self._job = job
        self.result: LocalJobResult | None = None
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            self.result = self._job.run()
        except Exception as error:
            self.error = error


def run_row(
    row: Row, runner: str, bound: float, client: Any, workdir: Path, log_dir: Path | None
) -> Outcome:
    outcome = Outcome(row, runner)
    capture = Capture()
    job = MountedJob(row.tmpfs, build_spec(row, runner, workdir), capture, client)
    thread = JobThread(job)
    outcome.image = client.images.get(job.spec.image).short_id.removeprefix("sha256:")
    load = os.getloadavg()[0]
    progress(
        f"{runner} row {row.number}: job {job.job_id}, image {outcome.image}, "
        f"load average {load:.1f}"
    )
    launched = time.time()
    thread.start()
    fault_at: float | None = None
    try:
        if row.trigger == "marker":
            deadline = launched + STARTUP_WAIT + bound
            if wait_until(lambda: capture.first(row.marker) is not None, deadline, thread):
                fault_at = capture.first(row.marker)
                progress(f"{runner} row {row.number}: saw {row.marker!r}")
        elif row.trigger in ("kill", "disconnect", "pause"):
            ready = wait_until(
                lambda: capture.count("round 1:") >= 6, launched + STARTUP_WAIT, thread
            )
            if not ready:
                outcome.note = f'not every rank printed "round 1:" within {STARTUP_WAIT} s'
                progress(f"{runner} row {row.number}: {outcome.note}; giving up on this run")
                force_end(client, job, thread)
                return finish(outcome, job, thread, capture, log_dir, None)
            container_id = job.container_ids[row.host]
            fault_at = time.time()
            if row.trigger == "kill":
                client.api.kill(container_id, signal=row.signal)
                progress(f"{runner} row {row.number}: sent {row.signal} to {row.host}")
            elif row.trigger == "pause":
                if not freeze(client, job, row, runner, fault_at + bound, thread):
                    outcome.hung_after = bound
                    states = container_states(client, job)
                    outcome.codes = tuple(known_code(host, job, states) for host in HOSTS)
                    force_end(client, job, thread)
                    return finish(outcome, job, thread, capture, log_dir, fault_at)
            else:
                client.api.disconnect_container_from_network(container_id, f"{job.job_id}-net")
                progress(f"{runner} row {row.number}: disconnected {row.host} from the network")
        start = fault_at if fault_at is not None else launched + CREATE_ALLOWANCE
        deadline = (time.time() if row.trigger == "pause" else start) + bound
        thread.join(max(deadline - time.time(), 0.0))
        if thread.is_alive():
            outcome.hung_after = bound
            states = container_states(client, job)
            outcome.codes = tuple(known_code(host, job, states) for host in HOSTS)
            progress(
                f"{runner} row {row.number}: still running {bound:.0f} s after the fault "
                f"(codes so far {' '.join(outcome.codes)}); killing its containers"
            )
            force_end(client, job, thread)
        return finish(outcome, job, thread, capture, log_dir, fault_at)
    finally:
        if thread.is_alive():  # interrupted or failed above: never leave containers behind
            force_end(client, job, thread)


def freeze(
    client: Any, job: LocalJob, row: Row, runner: str, deadline: float, thread: threading.Thread
) -> bool:
    """docker pause `row.host` until every other container has exited (True) or the deadline
    passed (False); then unpause it, so it can report what it finds."""
    container_id = job.container_ids[row.host]
    client.api.pause(container_id)
    progress(f"{runner} row {row.number}: paused {row.host}")
    others = [host for host in job.container_ids if host != row.host]

    def others_exited() -> bool:
        states = container_states(client, job)
        return all(states.get(host, {}).get("Status") == "exited" for host in others)

    try:
        ended = wait_until(others_exited, deadline, thread)
    finally:
        client.api.unpause(container_id)
    progress(
        f"{runner} row {row.number}: unpaused {row.host}"
        + ("" if ended else " (the other hosts still ran at the bound)")
    )
    return ended


def finish(
    outcome: Outcome,
    job: LocalJob,
    thread: "JobThread",
    capture: Capture,
    log_dir: Path | None,
    fault_at: float | None,
) -> Outcome:
    row, runner = outcome.row, outcome.runner
    outcome.failure = first_failure_line(job)
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / f"row{row.number}-{runner}.log").write_text(capture.timed_text())
    if thread.error is not None:
        outcome.note = f"job error: {thread.error!r}"
    result = thread.result
    if outcome.hung_after is None and result is not None and not outcome.note:
        started = [host for host in result.hosts if host.exit_code is not None]
        outcome.codes = tuple(
            "-" if host.exit_code is None else str(host.exit_code) for host in result.hosts
        )
        if started:
            if fault_at is None:
                fault_at = min(host.started_at for host in started)
                outcome.from_start = row.trigger == "marker"
            if row.trigger == "pause":  # the frozen host ends when it runs again
                started = [host for host in started if host.name != row.host]
            outcome.seconds = max(host.finished_at for host in started) - fault_at
    progress(
        f"{runner} row {row.number} ({row.name}): {outcome.seconds_text()} s, codes "
        f"{outcome.codes_text()}; {outcome.failure}" + (f"; {outcome.note}" if outcome.note else "")
    )
    expected = outcome.codes_text() == " ".join(outcome.codes)
    if runner == "ringleader" and (not expected or outcome.note):
        tail = capture.text().splitlines()[-40:]
        print("\n".join(f"    | {line}" for line in tail), file=sys.stderr, flush=True)
    return outcome


def print_table(outcomes: list[Outcome], total: float) -> None:
    headers = (
        "row",
        "runner",
        "seconds fault->all exited",
        "exit codes (algo-1 algo-2 algo-3)",
        "first line of the failure file (algo-1, else first host with one)",
    )
    cells = [
        (
            f"{o.row.number} {o.row.name}",
            o.runner,
            o.seconds_text(),
            o.codes_text(),
            o.failure + (f" [{o.note}]" if o.note else ""),
        )
        for o in outcomes
    ]
    widths = [max(len(text) for text in column) for column in zip(headers, *cells, strict=False)]
    widths[-1] = 0
    for line in (headers, *cells):
        print(
            "  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip()
        )
    print(
        "Fault time: rows 1-2 the failing rank's line as received via docker logs (* = never seen,"
        " from the first docker start); rows 3-7 the docker kill/disconnect call; rows 8-9 the "
        "first docker start; rows 12-15 the line of the fault (see the module's docstring). Exit "
        "times: Docker's FinishedAt. '?' = still running at the bound, '-' = never started."
    )
    if any(o.row.trigger == "pause" for o in outcomes):
        print(
            "Row 10: from the docker pause to the exit of every other container; the "
            "frozen host's code is what it reported once unpaused."
        )
    images = sorted({o.image for o in outcomes})
    if len(images) > 1:
        rows = {
            image: [f"{o.row.number}/{o.runner}" for o in outcomes if o.image == image]
            for image in images
        }
        print(
            "The image changed during the benchmark: "
            + "; ".join(f"{image}: {' '.join(runs)}" for image, runs in rows.items())
        )
    print(f"Total benchmark time: {total:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--runners", nargs="+", default=list(ENTRYPOINTS), choices=ENTRYPOINTS)
    parser.add_argument(
        "--toolkit-rows",
        type=int,
        nargs="+",
        default=list(ROWS),
        choices=list(ROWS),
        help="rows run for the toolkit too (each can take up to --toolkit-timeout)",
    )
    parser.add_argument("--toolkit-timeout", type=float, default=240.0)
    parser.add_argument("--ringleader-timeout", type=float, default=120.0)
    parser.add_argument(
        "--log-dir", type=Path, help="keep each run's job output here, lines timed on arrival"
    )
    args = parser.parse_args()
    client = docker.from_env()
    began = time.monotonic()
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="rl-faults-") as workdir:
        for number in args.rows:
            row = ROWS[number]
            for runner in args.runners:
                if runner == "toolkit" and number not in args.toolkit_rows:
                    continue
                bound = args.toolkit_timeout if runner == "toolkit" else args.ringleader_timeout
                progress(f"{runner} row {number}: {row.name}")
                outcome = run_row(row, runner, bound, client, Path(workdir), args.log_dir)
                outcomes.append(outcome)
    print_table(outcomes, time.monotonic() - began)
    return 0


if __name__ == "__main__":
    sys.exit(main())
