"""ssh command lines (pure). Batch mode: a password prompt would hang a parallel run, so a
host that wants one fails instead. A host key is accepted on first use (and ssh says so), never
ignored: `StrictHostKeyChecking=no` is not ours to choose for the user."""

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

# The remote interpreter: a bootstrapped venv first, then python3 on the remote PATH.
BOOTSTRAP_VENV = ".ringleader/venv"  # under the remote user's home
_FIND_PYTHON = (
    f'for p in "$HOME/{BOOTSTRAP_VENV}/bin/python" python3; do '
    'if command -v "$p" >/dev/null 2>&1; then exec "$p" "$@"; fi; done; '
    'echo "ringleader: no python3 on this host" >&2; exit 127'
)


@dataclass(frozen=True)
class SshOptions:
    connect_timeout: float = 10.0
    extra: tuple[str, ...] = ()  # --ssh-option values, e.g. "Port=2222" or "IdentityFile=..."

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
        return self.command(address, ["sh", "-c", _FIND_PYTHON, "ringleader-python", *args])

    def rsync_shell(self) -> str:
        """The `rsync -e` value: the same options, as one command string."""
        return shlex.join(self.argv())
