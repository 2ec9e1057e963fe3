"""A cluster host's agent: `python -m ringleader.tools.cluster.agent`, started over ssh by
`ringleader cluster run` on every host, the job's description on its first stdin line.

It lays out the job's directory as SageMaker would (input/config, output, model), runs the
container entry point's supervision in a child (`ringleader.tools.cluster.host`) and relays its
output. stdin stays open for the whole job: "stop" or end of file (Ctrl-C on the leader, its
ringleader killed, the ssh connection gone) stops the job here: "stop" with SIGTERM, end of
file with SIGHUP (this host is lost to the job), and every process of the job still alive on
this host `grace` seconds later is killed. Processes are recognised by
the job's mark in their environment, which also finds the ranks mpirun started through sshd.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

from ringleader.core import paths
from ringleader.core.errors import ConfigError
from ringleader.core.processes import stop_processes
from ringleader.core.procfind import processes_carrying
from ringleader.rank.tree import become_subreaper
from ringleader.tools.cluster.jobroot import make_job_dir
from ringleader.tools.hostjob import host_environment, lay_out_host

STOP = "stop"
STACKS = "stacks"  # Ctrl-\ on the machine that runs the job: every rank's stacks, job goes on
SWEEP_GRACE = 2.0  # SIGTERM to SIGKILL for processes of the job left after it ended


@dataclass(frozen=True)
class AgentJob:
    job: str
    job_dir: str
    hosts: tuple[str, ...]
    current_host: str
    hyperparameters: Mapping[str, str]  # JSON-encoded values, as in hyperparameters.json
    grace: float  # after a stop: SIGTERM to SIGKILL of everything left
    env: Mapping[str, str] = field(default_factory=dict)  # --env: for every rank (secret)
    secret: str = ""  # the job's, for its control channel (wire.auth); the entry point's only

    def to_json(self) -> str:
        return json.dumps(
            {
                **self.__dict__,
                "hosts": list(self.hosts),
                "hyperparameters": dict(self.hyperparameters),
                "env": dict(self.env),
            }
        )

    @classmethod
    def from_json(cls, line: str) -> "AgentJob":
        data: dict[str, Any] = json.loads(line)
        return cls(
            job=str(data["job"]),
            job_dir=str(data["job_dir"]),
            hosts=tuple(data["hosts"]),
            current_host=str(data["current_host"]),
            hyperparameters=dict(data["hyperparameters"]),
            grace=float(data["grace"]),
            env={str(key): str(value) for key, value in data.get("env", {}).items()},
            secret=str(data.get("secret", "")),
        )


def job_environment(job: AgentJob, base: Mapping[str, str]) -> dict[str, str]:
    root = Path(job.job_dir)
    return host_environment(base, root / "ml", root / "run", job.job, job.env, job.secret)


def lay_out(job: AgentJob) -> None:
    """The job's directory on this host, like a SageMaker container's /opt/ml, made 0700 in a
    job root that only this user can change (jobroot.UnsafeJobRoot when it is not)."""
    root = make_job_dir(job.job_dir)
    resource = {"current_host": job.current_host, "hosts": list(job.hosts)}
    lay_out_host(root / "ml", root / "run", job.hyperparameters, resource)


def marked_processes(mark: str) -> list[psutil.Process]:
    """This user's processes carrying the job's mark, except this one."""
    return processes_carrying({paths.JOB_MARK_VARIABLE: mark})


def sweep(mark: str, grace: float, descendants: bool = False) -> list[str]:
    """End every process of the job on this host; what they were (`name[pid]`).

    `descendants`: also every descendant of this process. The agent is a subreaper, so the
    job's daemons are among them even when they no longer carry the mark: an ssh master
    connection's process title overwrites its environment."""
    left = marked_processes(mark)
    if descendants:
        known = {process.pid for process in left}
        with contextlib.suppress(psutil.Error):
            left += [
                process
                for process in psutil.Process().children(recursive=True)
                if process.pid not in known
            ]
    running = [process for process in left if not _reaped_if_ended(process)]
    names = [_described(process) for process in running]
    stop_processes(running, grace)
    return names


def _reaped_if_ended(process: psutil.Process) -> bool:
    """Whether the process has ended already: gone, or a zombie, which is reaped when it is
    this agent's (the subreaper adopts the ssh clients mpirun leaves as it exits; they end
    soon after, and nothing else waits for them). Neither is a leftover of the job."""
    try:
        if process.status() != psutil.STATUS_ZOMBIE:
            return False
    except psutil.Error:
        return True
    with contextlib.suppress(ChildProcessError):
        os.waitpid(process.pid, os.WNOHANG)
    return True


def _described(process: psutil.Process) -> str:
    try:
        return f"{process.name()}[{process.pid}]"
    except psutil.Error:
        return f"?[{process.pid}]"


def leftover_line(host: str, left: list[str]) -> str:
    return f"ended {len(left)} leftover process(es) of the job on {host}: {', '.join(left)}"


class Agent:
    def __init__(self, job: AgentJob, stdin: IO[str], stdout: IO[bytes]) -> None:
        self._job, self._stdin, self._stdout = job, stdin, stdout
        self._stopped = threading.Event()

    def run(self) -> int:
        lay_out(self._job)
        child = subprocess.Popen(
            [sys.executable, "-m", "ringleader.tools.cluster.host"],
            env=job_environment(self._job, os.environ),
            cwd=self._job.job_dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a terminal's signals reach the leader's ringleader only
        )
        threading.Thread(target=self._watch_stdin, args=(child,), daemon=True).start()
        assert child.stdout is not None
        for chunk in iter(lambda: child.stdout.readline(), b""):  # type: ignore[union-attr]
            self._relay(chunk)
        code = child.wait()
        left = sweep(self._job.job, SWEEP_GRACE, descendants=True)
        if left:
            line = leftover_line(self._job.current_host, left)
            self._relay(f"[{self._job.current_host}] {line}\n".encode())
        return code

    def _relay(self, data: bytes) -> None:
        """Output goes to the leader while it listens; once it is gone, the job goes on."""
        try:
            self._stdout.write(data)
            self._stdout.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass

    def _watch_stdin(self, child: "subprocess.Popen[bytes]") -> None:
        asked = False
        for line in self._stdin:
            if line.strip() == STACKS:
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signal.SIGQUIT)
            elif line.strip() == STOP:
                asked = True
                break
        self._stopped.set()
        # "stop" is the leader's Ctrl-C, a stop from outside: the entry point stops the job
        # gracefully (143 everywhere). End of input means the leader's ringleader or this host's
        # ssh connection is gone, which no one asked for: this host is lost to the job, so its
        # supervision ends at once (a hang-up) and the leader reports the host lost (75) instead
        # of a SIGTERM that never came; the sweep after it still gives the ranks SIGTERM first.
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signal.SIGTERM if asked else signal.SIGHUP)
        if not _wait(child, self._job.grace):
            sweep(self._job.job, 0.0, descendants=True)
            with contextlib.suppress(ProcessLookupError):
                child.kill()


def _wait(child: "subprocess.Popen[bytes]", timeout: float) -> bool:
    try:
        child.wait(timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


def survive_hangups() -> None:
    """A dropped session is seen on stdin instead. SIGHUP is caught, not ignored: an ignored
    signal stays ignored across exec, and the entry point must end on the SIGHUP it is sent."""
    signal.signal(signal.SIGHUP, _hung_up)


def _hung_up(_signum: int, _frame: object) -> None:
    """Nothing: the agent goes on (its stdin tells it what happened)."""


def main() -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    survive_hangups()
    become_subreaper()  # the job's daemons (ssh master connections) are adopted, then swept
    line = sys.stdin.readline()
    if not line:
        return 2
    try:
        return Agent(AgentJob.from_json(line), sys.stdin, sys.stdout.buffer).run()
    except ConfigError as error:  # the job's directory turned unsafe since the preflight
        print(f"[ringleader] {error}", flush=True)
        return error.exit_code


if __name__ == "__main__":
    sys.exit(main())
