"""`ringleader image setup`: prepare the image being built (run in its Dockerfile, as root).

It writes the job's own sshd and ssh client files under /etc/ringleader/ssh (the image's own
ssh configuration is left alone), the image settings the entry point reads (the user's
interpreter among them), a stable /usr/local/bin/ringleader-entrypoint and SageMaker's /opt/ml
layout. No ssh key goes into the image: every job makes its own when it starts
(launch/jobkeys.py), and keys an older version baked in are removed. Run again, it changes
nothing that is already right.
"""

import os
import shlex
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template

from ringleader import __version__
from ringleader.config.image import (
    IMAGE_DIR,
    SETTINGS_NAME,
    SSH_CONFIG_NAME,
    SSH_DIR_NAME,
    SSHD_CONFIG_NAME,
    ImageSettings,
)
from ringleader.launch.jobkeys import (
    AUTHORIZED_KEYS_NAME,
    BAKED_FILES,
    CLIENT_KEY_NAME,
    HOST_KEY_NAME,
    KNOWN_HOSTS_NAME,
)
from ringleader.tools.image.needs import (
    MPI_TOOLS,
    Missing,
    missing_tools,
    python_problem,
)
from ringleader.tools.image.probe import ImageFacts

ENTRYPOINT = Path("/usr/local/bin/ringleader-entrypoint")
ML_DIRS = (
    "opt/ml/code",
    "opt/ml/model",
    "opt/ml/input/config",
    "opt/ml/input/data",
    "opt/ml/output/data",
    "opt/ml/checkpoints",
)
# What ssh sessions (mpirun's daemons and the ranks they start) need of the image's ENV.
SESSION_VARIABLES = ("PATH", "LD_LIBRARY_PATH", "OPAL_PREFIX", "LANG")
SESSION_DEFAULTS = {
    "LANG": "C.UTF-8",
    "PYTHONUNBUFFERED": "1",
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
}
# sshd's privilege separation directory on Debian and Ubuntu (the entry point makes it too, for
# a /run emptied at start; an sshd started by hand needs it in the image).
PRIVSEP_DIR = "run/sshd"


@dataclass(frozen=True)
class SetupRequest:
    python: str  # the interpreter of the user's program
    ringleader_python: str  # the interpreter ringleader runs in
    with_mpi: bool  # prepare sshd and ssh for mpi jobs
    root: Path = Path("/")  # where the image's file system is (tests use another)


def refusals(request: SetupRequest, facts: ImageFacts) -> list[Missing]:
    """Why this image cannot be prepared as asked (pure)."""
    found: list[Missing] = []
    problem = python_problem(facts.python(request.python), request.python)
    if problem is not None:
        found.append(problem)
    if request.with_mpi:
        found += missing_tools(facts, MPI_TOOLS)
    return found


def session_environment(request: SetupRequest, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables every ssh session gets (sshd's SetEnv), from the build's environment."""
    values = {name: environ[name] for name in SESSION_VARIABLES if environ.get(name)}
    for name, value in SESSION_DEFAULTS.items():
        values.setdefault(name, value)
    path = values.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    entries = path.split(":")
    for python in (request.python, request.ringleader_python):
        directory = str(Path(python).parent)
        if directory not in entries:
            entries.insert(0, directory)
    values["PATH"] = ":".join(entries)
    return {name: value for name, value in values.items() if '"' not in value}


def render(name: str, **values: str) -> str:
    template = resources.files("ringleader.tools.image").joinpath(f"files/{name}").read_text()
    return Template(template).substitute(values)


def entry_script(ringleader_python: str) -> str:
    return (
        "#!/bin/sh\n"
        "# ringleader's entry point (written by `ringleader image setup`): SageMaker runs\n"
        "# `docker run IMAGE train`; exec keeps signals going straight to Python.\n"
        f'exec {shlex.quote(ringleader_python)} -m ringleader.supervise.entrypoint "$@"\n'
    )


class SetupError(Exception):
    pass


def remove_baked_keys(ssh_dir: Path) -> list[str]:
    """The names of the key files an older `image setup` baked into the image, now removed:
    whoever has the image must not hold a key to its running jobs (each job makes its own)."""
    removed = []
    for name in BAKED_FILES:
        try:
            (ssh_dir / name).unlink()
        except FileNotFoundError:
            continue
        except OSError as error:
            raise SetupError(f"cannot remove {ssh_dir / name}: {error}") from None
        removed.append(name)
    return removed


def write_if_changed(path: Path, content: str, mode: int) -> bool:
    """Write `content` with `mode` unless the file already holds exactly that."""
    try:
        if path.read_text(encoding="utf-8") == content and (path.stat().st_mode & 0o777) == mode:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".new")
    temporary.write_text(content, encoding="utf-8")
    temporary.chmod(mode)
    temporary.replace(path)
    return True


def apply(
    request: SetupRequest,
    facts: ImageFacts,
    environ: Mapping[str, str],
    say: Callable[[str], None],
) -> list[str]:
    """Write everything; return what changed (empty: the image was prepared already)."""
    image_dir = request.root / IMAGE_DIR.relative_to("/")
    ssh_dir = image_dir / SSH_DIR_NAME
    ssh_dir_in_image = IMAGE_DIR / SSH_DIR_NAME
    changed: list[str] = []
    # an image prepared by an older version may hold keys it baked in, with or without mpi now
    if ssh_dir.is_dir():
        for name in remove_baked_keys(ssh_dir):
            changed.append(f"removed {ssh_dir_in_image / name} (each job makes its own keys)")
    if request.with_mpi:
        ssh_dir.mkdir(parents=True, exist_ok=True)
        ssh_dir.chmod(0o700)
        set_env = " ".join(
            f'"{name}={value}"' for name, value in session_environment(request, environ).items()
        )
        names = {
            "host_key": HOST_KEY_NAME,
            "authorized_keys": AUTHORIZED_KEYS_NAME,
            "client_key": CLIENT_KEY_NAME,
            "known_hosts": KNOWN_HOSTS_NAME,
        }
        ssh_dir_text = str(ssh_dir_in_image)
        files = {
            SSHD_CONFIG_NAME: render("sshd_config", ssh_dir=ssh_dir_text, set_env=set_env, **names),
            SSH_CONFIG_NAME: render("ssh_config", ssh_dir=ssh_dir_text, **names),
        }
        for name, content in files.items():
            if write_if_changed(ssh_dir / name, content, 0o600):
                changed.append(f"wrote {ssh_dir_in_image / name}")
    settings = ImageSettings(
        python=request.python,
        ringleader_python=request.ringleader_python,
        ringleader_version=__version__,
        sshd=facts.tools.get("sshd") if request.with_mpi else None,
        ssh_dir=str(ssh_dir_in_image),
    )
    if write_if_changed(image_dir / SETTINGS_NAME, settings.to_json(), 0o644):
        changed.append(f"wrote {IMAGE_DIR / SETTINGS_NAME}")
    entrypoint = request.root / ENTRYPOINT.relative_to("/")
    if write_if_changed(entrypoint, entry_script(request.ringleader_python), 0o755):
        changed.append(f"wrote {ENTRYPOINT}")
    directories = (*ML_DIRS, PRIVSEP_DIR) if request.with_mpi else ML_DIRS
    for directory in directories:
        path = request.root / directory
        if not path.is_dir():
            path.mkdir(parents=True)
            changed.append(f"made /{directory}")
    for line in changed:
        say(line)
    return changed


def default_request(python: str | None, with_mpi: bool, root: Path) -> SetupRequest:
    """`--python` as given (a venv's interpreter is a symlink: kept, not resolved), a bare
    name looked up on PATH; by default ringleader's own interpreter."""
    ringleader_python = sys.executable
    if python and os.sep not in python:
        python = shutil.which(python) or python
    return SetupRequest(
        python=os.path.abspath(python) if python else ringleader_python,
        ringleader_python=ringleader_python,
        with_mpi=with_mpi,
        root=root,
    )
