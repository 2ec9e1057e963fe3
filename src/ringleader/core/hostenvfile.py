"""The host's environment file for its ranks (paths.HOST_ENV_FILE): `{"env": {NAME: VALUE}}`,
readable by root only (it may hold secrets). One writer (launch/hostprep.py), two readers: each
rank's wrapper, and the user's health check (launch/health.py)."""

import json
from collections.abc import Mapping
from pathlib import Path

from ringleader.core.files import write_atomically


def write_host_env(path: Path, env: Mapping[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps({"env": dict(env)}), mode=0o600)


def read_host_env(path: str | Path) -> dict[str, str] | None:
    """The environment, or None when the file is not there (yet)."""
    try:
        with open(path) as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None
    return {str(key): str(value) for key, value in data["env"].items()}
