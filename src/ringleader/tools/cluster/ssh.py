"""ssh command lines (pure). Batch mode: a password prompt would hang a parallel run, so a
host that wants one fails instead. A host key is accepted on first use (and ssh says so), never
ignored: `StrictHostKeyChecking=no` is not ours to choose for the user."""

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

BOOTSTRAP_VENV = ".ringleader/venv"  # under the remote user's home


def bootstrap_venv(remote_python: str | None) -> str:
    """Where `--bootstrap` installs ringleader on a host (relative to the remote home): one venv
    per interpreter named with --python, so a venv made from one Python never stands in for
    another the user asked for."""
    if remote_python is None:
        return BOOTSTRAP_VENV
    return f"{BOOTSTRAP_VENV}-{re.sub(r'[^A-Za-z0-9._-]+', '_', remote_python.strip('/'))}"


def find_python_script(remote_python: str | None) -> str:
    """The remote interpreter: the bootstrapped venv first, then `remote_python` (--python),
    or python3 on the remote PATH when none was named."""
    venv_python = f'"$HOME/{bootstrap_venv(remote_python)}/bin/python"'
    if remote_python is None:
        fallback, missing = "python3", "no python3 on this host's PATH (name one with --python)"
    else:
        fallback = shlex.quote(remote_python)
        missing = f"--python {remote_python} is not an executable on this host"
    return (
        f"for p in {venv_python} {fallback}; do "
        'if command -v "$p" >/dev/null 2>&1; then exec "$p" "$@"; fi; done; '
        f"echo {shlex.quote(f'ringleader: {missing}')} >&2; exit 127"
    )


@dataclass(frozen=True)
class SshOptions:
    connect_timeout: float = 10.0
    extra: tuple[str, ...] = ()  # --ssh-option values, e.g. "Port=2222" or "IdentityFile=..."
    remote_python: str | None = None  # --python: the hosts' interpreter (None: python3)

    def argv(self) -> list[str]:
        argv = [
            "ssh",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=accept-new",
            "-o",
            f"ConnectTimeout={max(round(self.connect_timeout), 1)}",
            "-o",
            "ServerAliveInterval=5",
            "-o",
            "ServerAliveCountMax=3",
        ]
        for option in self.extra:
            argv += ["-o", option]
        return argv

    def command(self, address: str, remote: Sequence[str]) -> list[str]:
        """ssh running `remote` (an argument list, quoted for the remote shell)."""
        return [*self.argv(), address, "--", shlex.join(remote)]

    def python(self, address: str, args: Sequence[str]) -> list[str]:
        """ssh running the host's ringleader Python with `args`."""
        script = find_python_script(self.remote_python)
        return self.command(address, ["sh", "-c", script, "ringleader-python", *args])

    def rsync_shell(self) -> str:
        """The `rsync -e` value: the same options, as one command string."""
        return shlex.join(self.argv())
