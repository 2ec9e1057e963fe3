"""Starting this host's sshd (for mpirun's daemons) and checking that workers accept us."""

import contextlib
import os
import socket
import subprocess
import threading
from pathlib import Path

from ringleader.core.errors import StartupError

SSHD = "/usr/sbin/sshd"


def start_sshd(notify_path: Path, timeout: float) -> subprocess.Popen[bytes]:
    """Start sshd in the foreground and wait until it reports READY=1 (systemd notify protocol).

    Debian's sshd speaks that protocol when NOTIFY_SOCKET is set, so readiness is an event,
    not a poll. If sshd dies first, a watcher thread wakes us with the same socket.
    """
    notify_path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        notify_path.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(notify_path))
    try:
        env = dict(os.environ, NOTIFY_SOCKET=str(notify_path))
        process = subprocess.Popen([SSHD, "-D", "-e"], env=env, stdin=subprocess.DEVNULL)

        def report_exit() -> None:
            code = process.wait()
            with (
                contextlib.suppress(OSError),
                socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender,
            ):
                sender.sendto(f"EXITED={code}".encode(), str(notify_path))

        threading.Thread(target=report_exit, daemon=True).start()
        listener.settimeout(timeout)
        while True:
            try:
                message = listener.recv(4096).decode(errors="replace")
            except TimeoutError:
                process.kill()
                raise StartupError(
                    f"sshd did not report readiness within {timeout:g} s "
                    "(ringleader_startup_timeout)"
                ) from None
            if "READY=1" in message.split("\n"):
                return process
            if message.startswith("EXITED="):
                raise StartupError(f"sshd exited with code {message[7:]} before it was ready")
    finally:
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            notify_path.unlink()


def ssh_problem(host: str, timeout: float) -> str | None:
    """One authenticated `ssh HOST true`; what went wrong, or None when it worked."""
    try:
        result = subprocess.run(
            ["ssh", "-o", f"ConnectTimeout={max(int(timeout), 1)}", host, "true"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"{host}: no answer within {timeout:g} s"
    if result.returncode != 0:
        return f"{host}: {result.stderr.decode(errors='replace').strip() or result.returncode}"
    return None
