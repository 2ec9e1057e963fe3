"""What a host has, printed as one JSON line. Runs on the remote host with its own Python
(`python -c SOURCE REQUEST`), which may not have ringleader yet: standard library only. The
host's Python may also be older than ringleader supports (preflight then says so), so this
runs on Python 3.7 too: no annotation is evaluated and importlib.metadata (3.8) is optional."""

from __future__ import annotations

import json
import os
import platform
import shutil
import site
import socket
import sys


def _free_bytes(path: str) -> int:
    while not os.path.isdir(path):  # the job directory may not exist yet: its nearest parent
        path = os.path.dirname(path) or "/"
    return shutil.disk_usage(path).free


def _gpus() -> int:
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


def _version(name: str) -> str | None:
    try:
        import importlib.metadata
    except ImportError:  # Python 3.7: too old for ringleader anyway
        return None
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def owner_name(uid: int) -> str:
    try:
        import pwd
    except ImportError:  # not a Unix
        return str(uid)
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid without a name here (a container's, an NFS owner's)
        return str(uid)


def path_entries(path: str) -> list[list[object]]:
    """[path, owner's uid, owner's name, st_mode] of "/", every directory on the way to the
    absolute `path` and `path` itself (lstat), first as written, then as resolved (symlinks
    followed); each walk ends at the first that does not exist. Who could change the job's
    directory root is decided from these (ringleader.tools.cluster.jobroot)."""
    entries: list[list[object]] = []
    for chain in (path, os.path.realpath(path)):
        current = "/"
        for part in [""] + [part for part in chain.split("/") if part]:
            current = os.path.join(current, part)
            try:
                info = os.lstat(current)
            except OSError:
                break
            entry: list[object] = [current, info.st_uid, owner_name(info.st_uid), info.st_mode]
            if entry not in entries:
                entries.append(entry)
    return entries


def facts(request: dict[str, object]) -> dict[str, object]:
    names = [str(name) for name in request.get("distributions", [])]  # type: ignore[attr-defined]
    job_root = str(request["job_root"])
    return {
        "hostname": socket.gethostname(),
        "python": sys.executable,
        "python_version": "{}.{}.{}".format(*sys.version_info[:3]),
        "implementation": sys.implementation.name,
        "machine": platform.machine(),
        "ringleader": _version("ringleader"),
        "versions": {name: _version(name) for name in names},
        "gpus": _gpus(),
        "free_bytes": _free_bytes(job_root),
        "uid": os.getuid(),
        "user": owner_name(os.getuid()),
        "job_root_real": os.path.realpath(job_root),
        "job_root_entries": path_entries(job_root),
        "cwd_exists": os.path.isdir(str(request["cwd"])),
        "mpirun": shutil.which("mpirun") is not None,
        "site_packages": [p for p in site.getsitepackages() if os.path.isdir(p)],
    }


if __name__ == "__main__":
    print(json.dumps(facts(json.loads(sys.argv[1]))))
