"""Before anything starts: every host is asked, in parallel and bounded, what it has (one ssh
each, running `probe`), and the answers are checked against what the job needs (pure)."""

import concurrent.futures
import inspect
import json
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ringleader import __version__
from ringleader.config.image import python_range, supported_python
from ringleader.tools.cluster import probe
from ringleader.tools.cluster.hostfile import ClusterHost
from ringleader.tools.cluster.jobroot import PathEntry, default_root, root_problem
from ringleader.tools.cluster.ssh import SshOptions

HOST_KEY_ADDED = "Permanently added"


def python_problem(version: str, executable: str) -> str | None:
    """Why a host's Python (`version` "3.12.1" at `executable`) cannot run ringleader, if not.
    Any supported version will do, whatever this machine runs: the agent and the entry point
    talk over files and sockets, never pickles, so hosts may differ from each other too."""
    if supported_python(minor_version(version)):
        return None
    return (
        f"Python {version} ({executable}) is not supported: ringleader needs Python "
        f"{python_range()} on every host; name another interpreter on the hosts with "
        "--python PATH"
    )


def minor_version(version: str) -> tuple[int, int]:
    """(3, 12) from "3.12.1"; (0, 0) when unreadable (then no supported version matches)."""
    major, _, rest = version.partition(".")
    minor = rest.partition(".")[0]
    if not (major.isdigit() and minor.isdigit()):
        return (0, 0)
    return (int(major), int(minor))


@dataclass(frozen=True)
class HostFacts:
    hostname: str
    python: str
    python_version: str
    implementation: str  # sys.implementation.name: "cpython" for compiled cp* wheels
    machine: str  # platform.machine(), e.g. x86_64: compiled wheels are built for one
    ringleader: str | None
    versions: dict[str, str | None]
    gpus: int
    free_bytes: int
    cwd_exists: bool
    mpirun: bool
    site_packages: tuple[str, ...]
    # The job root's real path and lstat of it and of what is on the way to it (the probe
    # always says; nothing known is nothing refused)
    uid: int = -1
    user: str = ""
    job_root_real: str = ""
    job_root_entries: tuple[PathEntry, ...] = ()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "HostFacts":
        return cls(
            hostname=str(data["hostname"]),
            python=str(data["python"]),
            python_version=str(data["python_version"]),
            implementation=str(data["implementation"]),
            machine=str(data["machine"]),
            ringleader=data["ringleader"],
            versions=dict(data["versions"]),
            gpus=int(data["gpus"]),
            free_bytes=int(data["free_bytes"]),
            cwd_exists=bool(data["cwd_exists"]),
            mpirun=bool(data["mpirun"]),
            site_packages=tuple(data["site_packages"]),
            uid=int(data["uid"]),
            user=str(data["user"]),
            job_root_real=str(data["job_root_real"]),
            job_root_entries=tuple(PathEntry.from_json(item) for item in data["job_root_entries"]),
        )


@dataclass(frozen=True)
class Probe:
    host: ClusterHost
    facts: HostFacts | None  # None: the host did not answer
    error: str | None = None  # why not (ssh's own words)
    key_added: bool = False  # its host key was accepted on first use


@dataclass(frozen=True)
class Needs:
    """What the job needs of every host."""

    ringleader: str = __version__
    processes_per_host: int = 1
    min_free_bytes: int = 1 << 30
    mpirun: bool = True
    cwd: str = "/"
    job_root: str = field(default_factory=default_root)


def problems(result: Probe, needs: Needs) -> list[str]:
    """What stops the job on this host (empty: it can run)."""
    facts = result.facts
    if facts is None:
        return [f"unreachable over ssh: {result.error}"]
    found = []
    python = python_problem(facts.python_version, facts.python)
    if python is not None:
        found.append(python)  # then whether ringleader is installed for it does not matter
    elif facts.ringleader is None:
        found.append(f"ringleader is not installed for {facts.python} (--bootstrap installs it)")
    elif facts.ringleader != needs.ringleader:
        found.append(f"ringleader {facts.ringleader}, not {needs.ringleader} as here (--bootstrap)")
    if needs.mpirun and not facts.mpirun:
        found.append("no mpirun on the PATH of a non-interactive ssh session (Open MPI needed)")
    if not facts.cwd_exists:
        found.append(
            f"the working directory {needs.cwd} does not exist (ringleader cluster sync copies it)"
        )
    root = root_problem(
        needs.job_root, facts.job_root_real, facts.job_root_entries, facts.uid, facts.user
    )
    if root is not None:
        found.append(root)
    if facts.free_bytes < needs.min_free_bytes:
        found.append(
            f"{_gib(facts.free_bytes)} free where the job writes ({needs.job_root}); "
            f"at least {_gib(needs.min_free_bytes)} needed (--min-free-gb)"
        )
    return found


def warnings(result: Probe, needs: Needs) -> list[str]:
    facts = result.facts
    if facts is None or facts.gpus == 0 or facts.gpus == needs.processes_per_host:
        return []
    return [f"{needs.processes_per_host} processes per host but {facts.gpus} GPUs found"]


def _gib(count: int) -> str:
    return f"{count / (1 << 30):.1f} GiB"


Runner = Callable[[Sequence[str], float], subprocess.CompletedProcess[bytes]]


def run_command(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        list(argv), stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False
    )


def probe_hosts(
    hosts: Sequence[ClusterHost],
    ssh: SshOptions,
    needs: Needs,
    names: Sequence[str],
    timeout: float,
    run: Runner = run_command,
) -> list[Probe]:
    """Every host at once; each answers within `timeout` seconds or counts as unreachable."""
    request = json.dumps(
        {"distributions": list(names), "job_root": needs.job_root, "cwd": needs.cwd}
    )
    source = inspect.getsource(probe)

    def ask(host: ClusterHost) -> Probe:
        argv = ssh.python(host.address, ["-c", source, request])
        try:
            result = run(argv, timeout)
        except subprocess.TimeoutExpired:
            return Probe(host, None, f"no answer within {timeout:g} s (--preflight-timeout)")
        stderr = result.stderr.decode(errors="replace")
        added = HOST_KEY_ADDED in stderr
        if result.returncode != 0:
            return Probe(host, None, _last_line(stderr) or f"ssh exit code {result.returncode}")
        try:
            facts = HostFacts.from_json(json.loads(result.stdout.decode().strip().splitlines()[-1]))
        except (ValueError, KeyError, IndexError, TypeError) as error:
            return Probe(host, None, f"unreadable answer ({error}): {_last_line(stderr)}")
        return Probe(host, facts, key_added=added)

    with concurrent.futures.ThreadPoolExecutor(max_workers=min(32, len(hosts))) as pool:
        return list(pool.map(ask, hosts))


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if HOST_KEY_ADDED not in line]
    return lines[-1].strip() if lines else ""


def table(results: Sequence[Probe], needs: Needs) -> list[str]:
    """One row per host: what it has and whether it can run the job."""
    rows = [("host", "python", "ringleader", "gpus", "free", "status")]
    for result in results:
        facts, found = result.facts, problems(result, needs)
        status = "; ".join(found) if found else "ok"
        notes = warnings(result, needs)
        if result.key_added:
            notes.append("host key accepted on first use")
        if notes:
            status += f" ({'; '.join(notes)})"
        if facts is None:
            rows.append((result.host.address, "-", "-", "-", "-", status))
        else:
            rows.append(
                (
                    result.host.address,
                    facts.python_version,
                    facts.ringleader or "missing",
                    str(facts.gpus),
                    _gib(facts.free_bytes),
                    status,
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[5]
        for row in rows
    ]
