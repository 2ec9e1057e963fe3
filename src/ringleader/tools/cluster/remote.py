"""The launching machine's side of detached jobs: every verb runs
`python -m ringleader.tools.cluster.jobs` on the leader over ssh, whose stdout is ours; its
exit code comes back on its last stderr line (ssh's own 255 means the connection failed)."""

import shlex
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import IO

from ringleader.config.topology import elect_leader
from ringleader.core import exitcodes
from ringleader.tools.cluster import registry
from ringleader.tools.cluster.hostfile import ClusterHost
from ringleader.tools.cluster.jobroot import default_root
from ringleader.tools.cluster.jobspec import job_to_json
from ringleader.tools.cluster.run import SSH_FAILED, ClusterJob
from ringleader.tools.cluster.ssh import SshOptions

JOBS_MODULE = "ringleader.tools.cluster.jobs"


def leader(hosts: Sequence[ClusterHost]) -> ClusterHost:
    """The host the job's leader-election rule picks by name (as on SageMaker)."""
    name = elect_leader(host.name for host in hosts)
    return next(host for host in hosts if host.name == name)


def start_detached(job: ClusterJob, preamble: Sequence[str], timeout: float, out: IO[str]) -> int:
    """Start the job's runner on the leader; the job id and how to follow it, or the problem."""
    host = leader(job.hosts)
    request = job_to_json(job) + "\n" + "".join(f"{line}\n" for line in preamble)
    argv = job.ssh.python(host.address, ["-m", JOBS_MODULE, "start", job.remote_dir, host.name])
    try:
        done = subprocess.run(
            argv, input=request.encode(), capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        out.write(
            f"error: the leader {host.address} did not start job {job.job_id} within "
            f"--start-timeout {timeout:g} s\n"
        )
        return exitcodes.HOST_UNREACHABLE
    lines = done.stderr.decode(errors="replace").splitlines()
    code = next((c for line in lines if (c := registry.split_trailer(line)) is not None), None)
    if code != 0:
        problem = [line for line in lines if registry.split_trailer(line) is None]
        out.write(
            f"error: the leader {host.address} could not start job {job.job_id}: "
            f"{problem[-1] if problem else f'ssh exit {done.returncode}'}\n"
        )
        if code is None:
            return exitcodes.HOST_UNREACHABLE
        return code if code == exitcodes.CONFIG_ERROR else exitcodes.INTERNAL_ERROR
    where = _where_flags(job)
    out.write(
        f"==> job {job.job_id} runs detached on {host.address} "
        f"({done.stdout.decode(errors='replace').strip()}); output in "
        f"{job.job_dir}/console/output.log there\n"
        f"    follow it:   ringleader cluster attach {where}{job.job_id}\n"
        f"    list jobs:   ringleader cluster status {where}\n"
        f"    stop it:     ringleader cluster stop {where}{job.job_id}\n"
    )
    out.flush()
    return 0


def _where_flags(job: ClusterJob) -> str:
    hosts = ",".join(f"{host.address}:{host.slots}" for host in job.hosts)
    flags = f"-H {hosts} "
    if job.remote_dir != default_root():
        flags += f"--remote-dir {job.remote_dir} "
    if job.ssh.remote_python is not None:
        flags += f"--python {shlex.quote(job.ssh.remote_python)} "
    return flags


def on_leader(hosts: Sequence[ClusterHost], ssh: SshOptions, verb_args: Sequence[str]) -> int:
    """A jobs verb on the leader, its output ours; its exit code."""
    host = leader(hosts)
    process = subprocess.Popen(
        ssh.python(host.address, ["-m", JOBS_MODULE, *verb_args]),
        stdin=subprocess.PIPE,  # held open: its end tells the leader's side we have gone
        stdout=None,
        stderr=subprocess.PIPE,
    )
    found: list[int] = []
    relay = threading.Thread(target=_relay_stderr, args=(process, found), daemon=True)
    relay.start()
    try:
        returncode = process.wait()
    except KeyboardInterrupt:
        process.kill()
        process.wait()
        print(f"\nringleader cluster {verb_args[0]}: interrupted (the job itself goes on)")
        return exitcodes.signal_exit_code(2)
    finally:
        if process.stdin is not None:
            process.stdin.close()
    relay.join(timeout=5)
    if found:
        return found[-1]
    if returncode == SSH_FAILED:
        print(
            f"ringleader cluster: cannot reach the leader {host.address} over ssh", file=sys.stderr
        )
        return exitcodes.HOST_UNREACHABLE
    return returncode


def _relay_stderr(process: "subprocess.Popen[bytes]", found: list[int]) -> None:
    assert process.stderr is not None
    for raw in process.stderr:
        line = raw.decode(errors="replace")
        code = registry.split_trailer(line)
        if code is None:
            sys.stderr.write(line)
            sys.stderr.flush()
        else:
            found.append(code)
