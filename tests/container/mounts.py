"""Fault injection for container tests and bench/faults.py: a local job whose hosts get tmpfs
mounts of their own (a small disk that fills, a small /dev/shm), and an entry script that holds
a port before ringleader starts."""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ringleader.tools.local.plan import HostPlan
from ringleader.tools.local.run import LocalJob

# host -> mount point in the container -> tmpfs options ("size=1m")
Tmpfs = Mapping[str, Mapping[str, str]]


class MountedJob(LocalJob):
    """A LocalJob with `tmpfs` mounts; a mount replaces the job directory Docker would bind
    at the same place (the leader's /opt/ml/output, say)."""

    def __init__(self, tmpfs: Tmpfs, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tmpfs = tmpfs

    def _binds(self, host: HostPlan, config_dir: Path, output: Path) -> dict[str, Any]:
        mounted = self._tmpfs.get(host.name, {})
        binds = super()._binds(host, config_dir, output)
        return {source: bind for source, bind in binds.items() if bind["bind"] not in mounted}

    def _resources(self, index: int) -> dict[str, Any]:
        resources = super()._resources(index)
        mounted = self._tmpfs.get(self.hosts[index].name)
        if mounted:
            resources["tmpfs"] = dict(mounted)
        return resources


# Started instead of the image's entry point on every host: with HOLD_PORT set, another
# process (Python's HTTP server) listens on that port before ringleader starts.
# HOLD_PORT: hold it with another server before the entry point starts; AWAIT_PORT (host:port):
# start the entry point only once that accepts, so that its startup deadline leaves it the
# whole greeting timeout against the holder (a holder up late on a busy machine left the
# workers less, and they reported the leader as never answering).
HOLD_PORT_THEN_TRAIN = """
import os, socket, subprocess, sys, time
def await_port(host, port):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
port = os.environ.get("HOLD_PORT")
if port:
    subprocess.Popen([sys.executable, "-m", "http.server", port], stdout=subprocess.DEVNULL)
    await_port("127.0.0.1", port)
if os.environ.get("AWAIT_PORT"):
    await_port(*os.environ["AWAIT_PORT"].split(":"))
os.execv("/usr/local/bin/ringleader-entrypoint", ["ringleader-entrypoint", *sys.argv[1:]])
"""
