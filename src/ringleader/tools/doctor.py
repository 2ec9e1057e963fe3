"""`ringleader doctor`: the health checks every host runs before each attempt (docs/health.md),
by hand, on every host at once, with one table of every host's results.

    ringleader doctor local --hosts 3 [--image IMAGE] [--shm-size 1g]   fake hosts (containers)
    ringleader doctor cluster --hostfile hosts [--python PATH]          your machines, over ssh
    ringleader doctor slurm                                             this allocation's nodes

Each host runs `ringleader-entrypoint doctor --json` (supervise/selfcheck.py); a host that
gives no result is a row of its own. Exit 0 when no check failed, 71 when one did, 2 for bad
usage, 78 for a bad setting.
"""

import argparse
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from ringleader.config.hostlist import expand_hostlist
from ringleader.config.job import DISTRIBUTIONS, MPI
from ringleader.core.health import FAILED, CheckResult, Report
from ringleader.supervise import selfcheck
from ringleader.tools.cluster.hostfile import parse_hostfile
from ringleader.tools.cluster.ssh import SshOptions
from ringleader.tools.local.options import DEFAULT_SHM, parse_size
from ringleader.tools.local.plan import DEFAULT_IMAGE

USAGE_ERROR = 2
HOST_TIMEOUT = 120.0  # seconds a host may take to start and answer (its checks take 30 at most)
# host -> the command that prints its JSON line
Run = Callable[[str, list[str]], "subprocess.CompletedProcess[str]"]


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="run the health checks of every job's start by hand, on every host, in one table",
        description=__doc__.splitlines()[0],
    )
    places = parser.add_subparsers(dest="place", required=True)
    local = places.add_parser("local", help="on N fake hosts: containers of the image")
    local.add_argument("--hosts", type=int, default=3)
    local.add_argument("--image", default=DEFAULT_IMAGE)
    local.add_argument("--shm-size", default=DEFAULT_SHM, help=f"default {DEFAULT_SHM}")
    cluster = places.add_parser("cluster", help="on the hosts of a hostfile, over ssh")
    cluster.add_argument("--hostfile", type=Path, required=True)
    cluster.add_argument("--python", help="the hosts' Python with ringleader (default python3)")
    slurm = places.add_parser("slurm", help="on every node of this Slurm allocation (srun)")
    for place in (local, cluster, slurm):
        place.add_argument(
            "--setting",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="a ringleader_* setting, e.g. min_free_disk=10g (repeatable)",
        )
        place.add_argument("--distribution", choices=DISTRIBUTIONS, default=MPI)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        hosts, ask = _place(args)
    except ValueError as error:
        print(f"ringleader doctor {args.place}: {error}", file=sys.stderr)
        return USAGE_ERROR
    extra = [f"--distribution={args.distribution}", *(f"--setting={s}" for s in args.setting)]
    reports = gather(hosts, ask, extra)
    for line in selfcheck.table(reports):
        print(line)
    return selfcheck.verdict(reports)


def gather(hosts: Sequence[str], ask: Run, extra: Sequence[str]) -> dict[str, Report]:
    """Every host's report, asked in parallel; a host without one is a failed row saying why."""
    reports: dict[str, Report] = {}
    lock = threading.Lock()

    def one(host: str) -> None:
        argv = ["--json", f"--host={host}", f"--hosts={','.join(hosts)}", *extra]
        try:
            done = ask(host, argv)
            lines = done.stdout.splitlines()
            found = [parsed for line in lines if (parsed := selfcheck.parse_line(line))]
            report = found[0][1] if found else _no_answer(done)
        except (OSError, subprocess.SubprocessError) as error:
            report = (CheckResult("doctor", FAILED, f"could not run the checks: {error}"),)
        with lock:
            reports[host] = report

    threads = [threading.Thread(target=one, args=(host,), daemon=True) for host in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HOST_TIMEOUT + 10)
    for host in hosts:
        reports.setdefault(host, (CheckResult("doctor", FAILED, "no answer in time"),))
    return reports


def _no_answer(done: "subprocess.CompletedProcess[str]") -> Report:
    said = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["nothing"]
    problem = f"no result (exit code {done.returncode}): {said[0][:200]}"
    return (CheckResult("doctor", FAILED, problem),)


def _place(args: argparse.Namespace) -> tuple[list[str], Run]:
    if args.place == "local":
        if args.hosts < 1:
            raise ValueError(f"--hosts: expected at least 1, got {args.hosts}")
        parse_size("--shm-size", args.shm_size)
        return [f"algo-{n}" for n in range(1, args.hosts + 1)], _in_containers(args)
    if args.place == "cluster":
        try:
            text = args.hostfile.read_text()
        except OSError as error:
            raise ValueError(f"--hostfile: cannot read {args.hostfile}: {error.strerror}") from None
        hosts = parse_hostfile(text, str(args.hostfile), os.uname().nodename)
        ssh = SshOptions(remote_python=args.python)
        by_name = {host.name: host.address for host in hosts}
        module = ["-m", "ringleader.supervise.selfcheck"]

        def over_ssh(host: str, argv: list[str]) -> "subprocess.CompletedProcess[str]":
            command = ssh.python(by_name[host], [*module, *argv])
            return subprocess.run(command, capture_output=True, text=True, timeout=HOST_TIMEOUT)

        return list(by_name), over_ssh
    nodes = os.environ.get("SLURM_JOB_NODELIST")
    if not nodes:
        raise ValueError("not inside a Slurm allocation (SLURM_JOB_NODELIST is not set)")
    return list(expand_hostlist(nodes)), _on_slurm_nodes


def _on_slurm_nodes(host: str, argv: list[str]) -> "subprocess.CompletedProcess[str]":
    command = [
        "srun", "--nodes=1", "--ntasks=1", f"--nodelist={host}", "--overlap",
        sys.executable, "-m", "ringleader.supervise.selfcheck", *argv,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=HOST_TIMEOUT)


def _in_containers(args: argparse.Namespace) -> Run:
    import docker  # only for fake hosts

    client = docker.from_env()
    mark = uuid.uuid4().hex[:6]

    def in_container(host: str, argv: list[str]) -> "subprocess.CompletedProcess[str]":
        container = client.containers.run(
            args.image,
            ["doctor", *argv],
            name=f"rl-doctor-{mark}-{host}",
            hostname=host,
            environment={"SM_CURRENT_HOST": host},
            shm_size=args.shm_size,
            network_mode="none",
            detach=True,
        )
        try:
            code = container.wait(timeout=HOST_TIMEOUT)["StatusCode"]
            out = container.logs(stdout=True, stderr=False).decode(errors="replace")
            err = container.logs(stdout=False, stderr=True).decode(errors="replace")
        finally:
            container.remove(force=True)
        return subprocess.CompletedProcess([host], code, out, err)

    return in_container
