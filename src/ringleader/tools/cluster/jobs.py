"""Detached jobs, the leader's side: `python -m ringleader.tools.cluster.jobs VERB ...`, run
over ssh by `ringleader cluster run --detach|attach|status|stop`.

- `start ROOT LEADER`: the job (JSON) on stdin; starts its runner in a session of its own with
  its output in ROOT/<job>/console/output.log, so it outlives the ssh session and the terminal.
- `runner CONSOLE LEADER`: the runner itself: `ringleader cluster run`'s supervision of the
  agents, from the leader (its own agent started directly), exit code into exit.json.
- `attach ROOT JOB`, `status ROOT [JOB]`, `stop ROOT JOB`.
Every verb's last stderr line is `ringleader-exit-code=N`, so the caller tells the verb's code
from ssh's own 255.
"""

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import psutil

from ringleader.core import exitcodes
from ringleader.core.errors import ConfigError
from ringleader.core.files import write_atomically
from ringleader.tools.cluster import registry
from ringleader.tools.cluster.follow import DirectoryWatch
from ringleader.tools.cluster.jobroot import UnsafeJobRoot, check_root, make_job_dir
from ringleader.tools.cluster.jobspec import job_from_json, results_on_leader
from ringleader.tools.cluster.registry import JobRecord, JobStatus
from ringleader.tools.cluster.run import STOP_SIGNALS, ClusterRun

SAFETY_INTERVAL = 5.0  # with inotify: a wake-up even if an event was missed
POLL_INTERVAL = 0.5  # without inotify: how often the file is looked at
CHUNK = 65536


# ------------------------------------------------------------------------------- start/runner
def start(root: str, leader: str, request: str) -> int:
    """request: the job's JSON line, then the preamble (what the launcher printed so far)."""
    spec, _, preamble = request.partition("\n")
    job = job_from_json(spec)
    console = registry.job_console(root, job.job_id)
    make_job_dir(str(console.parent))  # ROOT checked first: the runner's log, record, Python
    console.mkdir(exist_ok=False)
    log = console / "output.log"
    log.write_text(preamble)
    # A stop that comes before the runner can handle it waits (blocked, inherited across exec)
    # until it can: the runner unblocks it once its handlers are in place.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    with log.open("ab") as output:
        runner = subprocess.Popen(
            [sys.executable, "-m", "ringleader.tools.cluster.jobs", "runner", str(console), leader],
            stdin=subprocess.PIPE,
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=job.cwd,
            start_new_session=True,  # no terminal, no ssh session: its own
        )
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    assert runner.stdin is not None
    runner.stdin.write(spec.encode() + b"\n")
    runner.stdin.close()
    record = JobRecord(
        job=job.job_id,
        pid=runner.pid,
        pid_started=psutil.Process(runner.pid).create_time(),
        started=time.strftime("%Y-%m-%d %H:%M:%S"),
        leader=leader,
        hosts=job.names,
        command=job.command,
        results=str(results_on_leader(job)),
    )
    write_atomically(console / "record.json", record.to_json())
    print(f"pid {runner.pid}")
    return 0


def runner(console: Path, leader: str, stdin: IO[str]) -> int:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    job = job_from_json(stdin.readline())
    code = registry.RUNNER_VANISHED
    try:
        code = ClusterRun(job, sys.stdout, local_host=leader).launch()
    finally:
        write_atomically(console / "exit.json", registry.exit_json(code))
    return code


# --------------------------------------------------------------------------- attach/status/stop
def runner_alive(record: JobRecord) -> bool:
    try:
        process = psutil.Process(record.pid)
        return (
            abs(process.create_time() - record.pid_started) < 0.5
            and process.status() != psutil.STATUS_ZOMBIE
        )
    except psutil.Error:
        return False


def status_of(console: Path) -> JobStatus | None:
    record = registry.read_record(console)
    if record is None:
        return None
    # the exit code first: the runner writes it before it ends
    exit_code = registry.read_exit(console)
    return registry.state_of(record, exit_code, exit_code is None and runner_alive(record))


class NoSuchJob(Exception):
    def __init__(self, job: str, root: str) -> None:
        super().__init__(
            f"no job {job!r} in {root} on this leader (see `ringleader cluster status`)"
        )


def _console_of(root: str, job: str) -> tuple[Path, JobStatus]:
    check_root(root)  # another user's record could name any of our processes for `stop`
    console = registry.job_console(root, job)
    status = status_of(console)
    if status is None:
        raise NoSuchJob(job, root)
    return console, status


def attach(root: str, job: str, timeout: float | None, out: IO[bytes], watch_fd: int | None) -> int:
    """The job's output from the beginning, followed until it ends; its exit code."""
    console, status = _console_of(root, job)
    deadline = None if timeout is None else time.monotonic() + timeout
    watch = DirectoryWatch(console, also=watch_fd)
    interval = SAFETY_INTERVAL if watch.uses_events else POLL_INTERVAL
    try:
        with (console / "output.log").open("rb") as log:
            while True:
                if _copy(log, out):
                    continue
                status = status_of(console) or status
                if status.state != registry.RUNNING:
                    _copy_all(log, out)
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    print(
                        f"ringleader cluster attach: --timeout {timeout:g} s passed; job {job} "
                        "is still running (attach again to follow it)",
                        file=sys.stderr,
                    )
                    return registry.WAIT_TIMED_OUT
                if not watch.wait(interval if left is None else min(interval, left)):
                    return registry.WAIT_TIMED_OUT  # the one attached has gone
    finally:
        watch.close()
    _say(out, f"==> {status.summary()}")
    return status.code


def stop(root: str, job: str, timeout: float, out: IO[bytes]) -> int:
    """SIGTERM to the job's runner (a Ctrl-C of a foreground run), then wait for its end."""
    console, status = _console_of(root, job)
    if status.state != registry.RUNNING:
        _say(out, f"==> already over: {status.summary()}")
        return 0
    _say(out, f"==> stopping job {job}: SIGTERM to its runner (pid {status.record.pid})")
    with contextlib.suppress(ProcessLookupError):
        os.kill(status.record.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    watch = DirectoryWatch(console)
    interval = SAFETY_INTERVAL if watch.uses_events else POLL_INTERVAL
    try:
        while True:
            status = status_of(console) or status
            if status.state != registry.RUNNING:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                print(
                    f"ringleader cluster stop: --timeout {timeout:g} s passed and job {job} "
                    "has not ended yet",
                    file=sys.stderr,
                )
                return registry.WAIT_TIMED_OUT
            watch.wait(min(interval, left))
    finally:
        watch.close()
    _say(out, f"==> {status.summary()}")
    return 0


def list_jobs(root: str, job: str | None, out: IO[bytes]) -> int:
    if job is not None:
        _, found = _console_of(root, job)
        _say(out, found.summary())
        return 0
    check_root(root)
    consoles = sorted(Path(root).glob("*/console")) if Path(root).is_dir() else []
    statuses = [each for console in consoles if (each := status_of(console)) is not None]
    if not statuses:
        _say(out, f"no detached jobs in {root} on this leader")
        return 0
    for row in registry.status_table(statuses):
        _say(out, row)
    return 0


def _copy(source: IO[bytes], out: IO[bytes]) -> bool:
    data = source.read(CHUNK)
    if data:
        out.write(data)
        out.flush()
    return bool(data)


def _copy_all(source: IO[bytes], out: IO[bytes]) -> None:
    while _copy(source, out):
        pass


def _say(out: IO[bytes], line: str) -> None:
    out.write(f"{line}\n".encode())
    out.flush()


# -------------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ringleader.tools.cluster.jobs")
    verbs = parser.add_subparsers(dest="verb", required=True)
    p = verbs.add_parser("start")
    p.add_argument("root")
    p.add_argument("leader")
    p = verbs.add_parser("runner")
    p.add_argument("console", type=Path)
    p.add_argument("leader")
    p = verbs.add_parser("attach")
    p.add_argument("root")
    p.add_argument("job")
    p.add_argument("--timeout", type=float)
    p = verbs.add_parser("status")
    p.add_argument("root")
    p.add_argument("job", nargs="?")
    p = verbs.add_parser("stop")
    p.add_argument("root")
    p.add_argument("job")
    p.add_argument("--timeout", type=float, default=60.0)
    return parser


def dispatch(args: argparse.Namespace) -> int:
    out = sys.stdout.buffer
    verbs: dict[str, Callable[[], int]] = {
        "start": lambda: start(args.root, args.leader, sys.stdin.read()),
        "runner": lambda: runner(args.console, args.leader, sys.stdin),
        "attach": lambda: attach(args.root, args.job, args.timeout, out, _stdin_fd()),
        "status": lambda: list_jobs(args.root, args.job, out),
        "stop": lambda: stop(args.root, args.job, args.timeout, out),
    }
    try:
        return verbs[args.verb]()
    except NoSuchJob as error:
        print(f"ringleader cluster {args.verb}: {error}", file=sys.stderr)
        return registry.NO_SUCH_JOB
    except UnsafeJobRoot as error:
        print(f"ringleader cluster {args.verb}: {error}", file=sys.stderr)
        return exitcodes.CONFIG_ERROR
    except ConfigError as error:
        print(f"ringleader cluster {args.verb}: {error}", file=sys.stderr)
        return registry.NO_SUCH_JOB
    except FileExistsError as error:
        print(f"ringleader cluster {args.verb}: {error.filename} already exists", file=sys.stderr)
        return exitcodes.CONFIG_ERROR


def _stdin_fd() -> int | None:
    """stdin when it is a pipe (ssh's channel): its end means the caller is gone."""
    try:
        fd = sys.stdin.fileno()
        return fd if not os.isatty(fd) and _is_pipe(fd) else None
    except (OSError, ValueError):
        return None


def _is_pipe(fd: int) -> bool:
    import stat

    return stat.S_ISFIFO(os.fstat(fd).st_mode) or stat.S_ISSOCK(os.fstat(fd).st_mode)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = dispatch(args)
    except BrokenPipeError:  # the one who asked has gone: nothing more to tell anyone
        return exitcodes.signal_exit_code(signal.SIGPIPE)
    if args.verb != "runner":
        with contextlib.suppress(OSError):
            print(f"{registry.EXIT_TRAILER}{code}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
