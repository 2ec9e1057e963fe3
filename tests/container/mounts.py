"""A local job whose hosts get tmpfs mounts of their own: a small disk that fills (fault
injection for tests/container/test_disks_and_ports.py and bench/faults.py)."""

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
