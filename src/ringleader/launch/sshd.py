"""Starting this host's sshd (for mpirun's daemons), checking that workers accept us, and the
ssh master connections those checks leave for mpirun."""

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ringleader.config.image import ImageSettings
from ringleader.core.errors import ConfigError, StartupError
from ringleader.core.processes import kill_processes, wait_ended

if TYPE_CHECKING:
    import psutil

# OpenSSH's privilege separation directory on Debian and Ubuntu; sshd refuses to start without
# it, and a /run emptied at container start may have lost the one the image made.
PRIVSEP_DIR = Path("/run/sshd")


def sshd_command(image: ImageSettings | None) -> list[str]:
    """The job's own sshd with the files `ringleader image setup` wrote; a clear error when
    the image was not prepared for mpi jobs."""
    if image is None:
        raise ConfigError(
            "image",
            "an mpi job starts its ranks over ssh, but this image was not prepared for it: "
            "add `RUN pip install ringleader-*.whl && ringleader image setup` to its "
            "Dockerfile (see docs/own-image.md)",
        )
    if image.sshd is None or not os.access(image.sshd, os.X_OK):
        found = "was prepared with --without-mpi" if image.sshd is None else f"has no {image.sshd}"
        raise ConfigError(
            "image",
            f"an mpi job needs sshd on every host, but this image {found}: install OpenSSH's "
            "server (Debian/Ubuntu: openssh-server) and run `ringleader image setup` again; "
            "`ringleader image check IMAGE` lists what each distribution needs",
        )
    return [image.sshd, "-D", "-e", "-f", str(image.sshd_config)]


def start_sshd(
    command: Sequence[str], notify_path: Path, timeout: float
) -> subprocess.Popen[bytes]:
    """Start sshd in the foreground and wait until it reports READY=1 (systemd notify protocol).

    Debian's sshd speaks that protocol when NOTIFY_SOCKET is set, so readiness is an event,
    not a poll. If sshd dies first, a watcher thread wakes us with the same socket.
    """
    PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    notify_path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        notify_path.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(notify_path))
    try:
        env = dict(os.environ, NOTIFY_SOCKET=str(notify_path))
        process = subprocess.Popen(list(command), env=env, stdin=subprocess.DEVNULL)

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


def ssh_problem(host: str, timeout: float, options: Sequence[str] = ()) -> str | None:
    """One authenticated `ssh HOST true`; what went wrong, or None when it worked."""
    try:
        result = subprocess.run(
            ["ssh", "-o", f"ConnectTimeout={max(int(timeout), 1)}", *options, host, "true"],
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


# A master left behind by a leader that died ends by itself this long after its last session.
MASTER_PERSIST_SECONDS = 30
MASTER_EXIT_SECONDS = 5.0  # for every master to be told to exit at the job's end


class SshMasters:
    """The leader's ssh check of each worker leaves a master connection that mpirun's own ssh
    to that host reuses: one key exchange per host instead of two (at 32 hosts on 2 cores each
    costs the leader about 2.5 s). The masters belong to the job: their sockets live in a
    directory of its own, `close` tells each to exit, and one whose leader died without
    closing ends MASTER_PERSIST_SECONDS after its last session (a cluster instance outlives
    the job; a container takes its masters with it)."""

    def __init__(self, base: Path = Path("/tmp"), config: Path | None = None) -> None:
        # short and without spaces: a socket path has ~100 bytes, and Open MPI splits
        # plm_rsh_args at spaces
        self._dir = Path(tempfile.mkdtemp(prefix="rl-ssh-", dir=base))
        self._config = config  # the image's ssh client file for the job (`ssh -F`), if any
        self._hosts: set[str] = set()
        self._lock = threading.Lock()

    @property
    def control_path(self) -> str:
        return f"{self._dir}/%C"  # %C: a hash of this host, the host, its port and the user

    def config_options(self) -> tuple[str, ...]:
        """Every ssh of the job reads the image's client file, when there is one."""
        return ("-F", str(self._config)) if self._config is not None else ()

    def reuse_options(self) -> tuple[str, ...]:
        """For mpirun's ssh: a host's master where there is one, else a connection of its own."""
        return ("-o", f"ControlPath={self.control_path}")

    def check(self, host: str, timeout: float) -> str | None:
        """ssh_problem, leaving the connection open as the host's master."""
        with self._lock:
            self._hosts.add(host)
        options = (
            *self.config_options(),
            *self.reuse_options(),
            "-o",
            "ControlMaster=auto",
            "-o",
            f"ControlPersist={MASTER_PERSIST_SECONDS}",
        )
        return ssh_problem(host, timeout, options)

    def end_sessions(self) -> None:
        """SIGKILL every master now, as mpirun is killed: mpirun's ssh handed them its output
        pipes, which they would hold open until the remote daemons noticed mpirun was gone."""
        title = f"ssh: {self._dir}/"  # how an ssh master names itself
        kill_processes(
            process
            for process in self._ssh_processes()
            if " ".join(process.info["cmdline"]).startswith(title)
        )
        # Killed masters leave their sockets: a later mpirun (a restart in place) would try
        # each, warn "Connection refused", and then connect on its own anyway.
        for socket_file in self._dir.iterdir():
            with contextlib.suppress(OSError):
                socket_file.unlink()

    def _ssh_processes(self) -> list["psutil.Process"]:
        """The masters and every ssh through them (mpirun's): their command lines name this
        job's directory of sockets."""
        import psutil  # the leader has it loaded already (it chose the job's interface)

        found = []
        for process in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                if str(self._dir) in " ".join(process.info["cmdline"] or ()):
                    found.append(process)
        return found

    def close(self, log: Callable[[str], None]) -> None:
        """Tell every master to exit (all at once, bounded), wait for them and every ssh through
        them to be gone (the host's sweep at the job's end then finds only what the user's job
        left), and remove their directory."""
        with self._lock:
            hosts = sorted(self._hosts)
            self._hosts.clear()
        ours = self._ssh_processes() if hosts else []
        exits = [
            subprocess.Popen(
                ["ssh", *self.config_options(), *self.reuse_options(), "-O", "exit", host],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for host in hosts
        ]
        deadline = time.monotonic() + MASTER_EXIT_SECONDS
        late = []
        for process, host in zip(exits, hosts, strict=True):
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                late.append(host)
        alive = wait_ended(ours, max(deadline - time.monotonic(), 0.0))
        kill_processes(alive)
        if late or alive:
            hosts_named = ", ".join(late) or "the job's hosts"
            killed = f"; killed {len(alive)} ssh process(es) still running" if alive else ""
            log(
                f"ssh master connections to {hosts_named} did not exit within "
                f"{MASTER_EXIT_SECONDS:g} s{killed}"
            )
        shutil.rmtree(self._dir, ignore_errors=True)
