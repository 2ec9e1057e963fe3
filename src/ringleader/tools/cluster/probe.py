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


def facts(request: dict[str, object]) -> dict[str, object]:
    names = [str(name) for name in request.get("distributions", [])]  # type: ignore[attr-defined]
    return {
        "hostname": socket.gethostname(),
        "python": sys.executable,
        "python_version": "{}.{}.{}".format(*sys.version_info[:3]),
        "implementation": sys.implementation.name,
        "machine": platform.machine(),
        "ringleader": _version("ringleader"),
        "versions": {name: _version(name) for name in names},
        "gpus": _gpus(),
        "free_bytes": _free_bytes(str(request["job_root"])),
        "cwd_exists": os.path.isdir(str(request["cwd"])),
        "mpirun": shutil.which("mpirun") is not None,
        "site_packages": [p for p in site.getsitepackages() if os.path.isdir(p)],
    }


if __name__ == "__main__":
    print(json.dumps(facts(json.loads(sys.argv[1]))))
