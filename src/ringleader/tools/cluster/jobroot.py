"""The job directory root on every cluster host (`--remote-dir`): one per user, made 0700, and
refused when another user could change what is in it.

It holds every job's directory: the wrapper the ranks start as their Python, the job's
configuration and its outputs. A shared, predictable /tmp/ringleader-jobs let another local
user create it first and swap that wrapper, and left outputs readable by anyone.

The default is /tmp/ringleader-jobs-<uid>, <uid> the user id on the machine ringleader runs on:
on each host's local disk (not a shared home, where the hosts' job directories would collide),
the same path on every host (the ranks' wrapper must be), short enough for the job's Unix
sockets, and found again by attach, status and stop. It is not $XDG_RUNTIME_DIR: an ssh
session has none on a host without systemd-logind, and it is a small tmpfs for models and
checkpoints. Whoever owns it on a host, the checks below hold there.

The decision is a pure function of what lstat says about the root and every directory on the
way to it (probe.path_entries), taken in preflight (nothing is launched when a host refuses)
and again on each host just before the job's directory is made in it.
"""

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ringleader.core.errors import ConfigError
from ringleader.tools.cluster.probe import owner_name, path_entries

FIELD = "--remote-dir"
PRIVATE = 0o700


def default_root(uid: int | None = None) -> str:
    return f"/tmp/ringleader-jobs-{os.getuid() if uid is None else uid}"


@dataclass(frozen=True)
class PathEntry:
    path: str
    uid: int
    owner: str
    mode: int  # lstat's st_mode: type and permission bits

    @classmethod
    def from_json(cls, item: Sequence[Any]) -> "PathEntry":
        path, uid, owner, mode = item
        return cls(str(path), int(uid), str(owner), int(mode))

    def described(self) -> str:
        return f"owner {self.owner} (uid {self.uid}), mode {stat.S_IMODE(self.mode):04o}"


class UnsafeJobRoot(ConfigError):
    def __init__(self, problem: str) -> None:
        super().__init__(FIELD, problem)


def root_problem(
    root: str, resolved: str, entries: Sequence[PathEntry], uid: int, user: str
) -> str | None:
    """Why `root` (whose real path is `resolved`) cannot hold this user's jobs, if it cannot.

    The root itself (when it exists): a directory of this user with no access for group or
    others. Every directory and symlink on the way to it, as written and as resolved: of this
    user or root, and, when group or others may write to it, sticky (as /tmp is), so that no
    one else can rename or replace what is in it."""
    for entry in entries:
        if entry.path == resolved:
            problem = _root_itself(entry, uid, user)
        else:
            problem = _on_the_way(entry, root, uid)
        if problem is not None:
            return problem
    return None


def _root_itself(entry: PathEntry, uid: int, user: str) -> str | None:
    where = f"the job directory root {entry.path}"
    if not stat.S_ISDIR(entry.mode):
        return f"{where} is not a directory ({entry.described()}); give another {FIELD}"
    if entry.uid != uid:
        return (
            f"{where} belongs to someone else ({entry.described()}), not to you ({user}, "
            f"uid {uid}), who could change the jobs' files and the Python they run: remove it "
            f"(as its owner or root) or give another {FIELD}"
        )
    if stat.S_IMODE(entry.mode) & 0o077:
        return (
            f"{where} is open to group or others ({entry.described()}), who could read the "
            f"jobs' files: `chmod 700 {entry.path}` or give another {FIELD}"
        )
    return None


def _on_the_way(entry: PathEntry, root: str, uid: int) -> str | None:
    where = f"{entry.path}, on the way to the job directory root {root},"
    advice = f"give a {FIELD} under directories that only you or root can change"
    if not (stat.S_ISDIR(entry.mode) or stat.S_ISLNK(entry.mode)):
        return f"{where} is not a directory ({entry.described()}); give another {FIELD}"
    if entry.uid not in (0, uid):
        return f"{where} belongs to another user ({entry.described()}); {advice}"
    writable = stat.S_IMODE(entry.mode) & 0o022
    if stat.S_ISDIR(entry.mode) and writable and not entry.mode & stat.S_ISVTX:
        return f"{where} can be changed by group or others ({entry.described()}); {advice}"
    return None


def check_root(root: str) -> None:
    """Raises UnsafeJobRoot when `root`, on this host, is not safe for this user's jobs."""
    uid = os.getuid()
    entries = [PathEntry.from_json(item) for item in path_entries(root)]
    problem = root_problem(root, os.path.realpath(root), entries, uid, owner_name(uid))
    if problem is not None:
        raise UnsafeJobRoot(problem)


def make_job_dir(job_dir: str) -> Path:
    """The job's directory (0700) in its root, which is made 0700 when missing and checked
    before anything is made in it (UnsafeJobRoot: nothing is)."""
    job = Path(job_dir)
    root = job.parent
    root.parent.mkdir(parents=True, exist_ok=True)
    try:
        root.mkdir(mode=PRIVATE)
    except FileExistsError:
        pass  # checked next, whoever made it
    else:
        root.chmod(PRIVATE)  # whatever the umask
    check_root(str(root))
    job.mkdir(mode=PRIVATE, exist_ok=True)
    return job
