"""`ringleader slurm`'s work on one node of the step: the job's directory on the shared output
directory, the container entry point's supervision in a child with the hosts read from Slurm's
variables (config/slurm.py), signals passed on, and nothing of the job left running here when
it ends. The node's exit code is the job's, the same on every node."""

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ringleader.config.slurm import INTERFACE_VARIABLE, SLURM, TOPOLOGY_VARIABLE, SlurmStep
from ringleader.config.slurm import job_environment as slurm_job_environment
from ringleader.core import exitcodes
from ringleader.rank.tree import become_subreaper
from ringleader.tools.cluster.agent import SWEEP_GRACE, leftover_line, sweep
from ringleader.tools.cluster.jobroot import default_root, make_job_dir
from ringleader.tools.hostjob import host_environment, lay_out_host
from ringleader.tools.slurm.requeue import forbid_requeue
from ringleader.tools.slurm.timelimit import (
    QUERY_TIMEOUT,
    EndTime,
    at_time_limit,
    end_time_at_stop,
    put_first,
    time_limit_line,
)

# SIGTERM (scancel, the time limit) and SIGINT (Ctrl-C on an interactive srun) stop the job
# gracefully; SIGQUIT shows every rank's stacks and the job goes on.
PASSED_ON = {
    signal.SIGTERM: signal.SIGTERM,
    signal.SIGINT: signal.SIGTERM,
    signal.SIGQUIT: signal.SIGQUIT,
}


@dataclass(frozen=True)
class NodeJob:
    step: SlurmStep
    output_dir: Path  # OUTPUT/<job id>/<node>: this node's /opt/ml, on the submit directory
    cwd: str
    hyperparameters: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)  # --env: for every rank (never printed)
    network_interface: str | None = None

    @property
    def job_dir(self) -> Path:
        """On this node's own disk, at the same path on every node: mpirun hands the leader's
        paths to every rank. `ml` in it is this node's output directory (a symlink), `run`
        holds the sockets and per-rank files, never on a shared disk."""
        return Path(default_root()) / self.step.mark

    @property
    def ml_root(self) -> Path:
        return self.job_dir / "ml"

    @property
    def run_dir(self) -> Path:
        return self.job_dir / "run"


def node_environment(job: NodeJob, base: dict[str, str]) -> dict[str, str]:
    environment = host_environment(
        slurm_job_environment(base), job.ml_root, job.run_dir, job.step.mark, job.env
    )
    environment[TOPOLOGY_VARIABLE] = SLURM
    if job.network_interface:
        environment[INTERFACE_VARIABLE] = job.network_interface
    return environment


def link_output(link: Path, output_dir: Path) -> None:
    """`link` -> this node's output directory (replaced if a requeued job's run left one)."""
    with contextlib.suppress(FileNotFoundError):
        link.unlink()
    link.symlink_to(output_dir, target_is_directory=True)


class NodeRun:
    def __init__(self, job: NodeJob, stdout: IO[str]) -> None:
        self._job, self._stdout = job, stdout
        self._child: subprocess.Popen[bytes] | None = None
        self._pending: list[signal.Signals] = []  # arrived before the child existed
        self._end_time: EndTime | None = None
        self._time_limit: threading.Thread | None = None  # started by the first SIGTERM
        self._limit_line: str | None = None  # set when that SIGTERM was the time limit

    def run(self) -> int:
        job = self._job
        for signum in PASSED_ON:
            signal.signal(signum, self._on_signal)
        become_subreaper()  # the job's daemons (ssh master connections) are adopted, then swept
        self._end_time = EndTime(job.step.job_id)
        make_job_dir(str(job.job_dir))
        link_output(job.ml_root, job.output_dir)
        lay_out_host(job.ml_root, job.run_dir, job.hyperparameters)
        self._say(
            f"job {job.step.job_id} step {job.step.step_id} on {job.step.node} of "
            f"{','.join(job.step.hosts)}; output in {job.output_dir}"
        )
        self._child = subprocess.Popen(
            [sys.executable, "-m", "ringleader.tools.cluster.host"],
            env=node_environment(job, dict(os.environ)),
            cwd=job.cwd,
            stdin=subprocess.DEVNULL,
        )
        for signum in self._pending:
            self._pass_on(signum)
        code = self._child.wait()
        left = sweep(job.step.mark, SWEEP_GRACE, descendants=True)
        if left:
            self._say(leftover_line(job.step.node, left))
        code = code if code >= 0 else exitcodes.signal_exit_code(-code)
        if self._time_limit is not None:
            self._time_limit.join(2 * QUERY_TIMEOUT)  # the start's query, and one more
            if self._limit_line is not None:
                put_first(job.output_dir / "output" / "failure", self._limit_line)
        if code == exitcodes.DO_NOT_RETRY and job.step.node == job.step.hosts[0]:
            self._say(forbid_requeue(job.step.job_id))
        return code

    def _on_signal(self, signum: int, _frame: object) -> None:
        if signum == signal.SIGTERM and self._time_limit is None:
            self._time_limit = threading.Thread(
                target=self._name_time_limit, args=(time.time(),), daemon=True
            )
            self._time_limit.start()
        if self._child is None:
            self._pending.append(signal.Signals(signum))
        else:
            self._pass_on(signal.Signals(signum))

    def _name_time_limit(self, stopped_at: float) -> None:
        """Said at once (Slurm's SIGKILL follows KillWait later); the failure file gets it
        when the supervision has written its own."""
        if self._end_time is None:
            return
        job_id = self._job.step.job_id
        answer = end_time_at_stop(self._end_time, lambda: EndTime(job_id))
        end_time = answer.value()
        if end_time is not None and at_time_limit(end_time, stopped_at):
            self._limit_line = time_limit_line(end_time)
            self._say(self._limit_line)
        elif answer.problem is not None:
            self._say(f"whether this SIGTERM is Slurm's time limit is not known: {answer.problem}")

    def _pass_on(self, signum: signal.Signals) -> None:
        assert self._child is not None
        with contextlib.suppress(ProcessLookupError):
            self._child.send_signal(PASSED_ON[signum])

    def _say(self, line: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._stdout.write(f"[ringleader slurm] {line}\n")
            self._stdout.flush()
