"""User code as SageMaker delivers it, made ready on this host before the job starts.

`sagemaker_submit_directory` is either a directory that is used as it is, or a sourcedir
tarball (an s3:// object fetched with boto3, or a local file) that is checked member by member
and extracted into the code directory. Then `requirements.txt` (and the code directory itself
when it is a Python package, as sagemaker-training does) is installed with pip, and the entry
point is checked. Every host does this for its own copy; any problem is a ConfigError naming
`sagemaker_submit_directory`, `sagemaker_program` or `requirements.txt`, which the entry point
turns into exit code 78 and a failure file on every host.

The checks (member paths, link targets, S3 URIs, pip's command line) are pure functions, as
is the entry point's kind (ringleader.config.program); fetching, extracting and running pip
are bounded by timeouts that are named in the error when they fire.
"""

import contextlib
import enum
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from ringleader.aws.uri import S3UriError, parse_s3_object_uri
from ringleader.config.job import SourceConfig
from ringleader.config.program import EntryPointKind, entry_point_kind
from ringleader.core import exitcodes
from ringleader.core.errors import ConfigError
from ringleader.core.processes import signal_group
from ringleader.output import log

if TYPE_CHECKING:
    import tarfile

SUBMIT_DIRECTORY = "sagemaker_submit_directory"
PROGRAM = "sagemaker_program"
REQUIREMENTS = "requirements.txt"

DOWNLOAD_TIMEOUT = 600.0  # seconds for the whole sourcedir download
INSTALL_TIMEOUT = 1200.0  # seconds for pip
S3_ATTEMPTS = 4  # tries of each request (botocore's standard retry mode)
S3_CONNECT_TIMEOUT = 10.0
S3_READ_TIMEOUT = 60.0  # one read of the object's body
SOURCEDIR_OBJECT = "a sourcedir tarball object (s3://bucket/prefix/sourcedir.tar.gz)"
OUTPUT_TAIL_LINES = 8  # of pip's output, in the failure file
# After SIGTERM, a download or pip run may go on this long before it is abandoned (exit 143).
# Under docker compose (the SDK's local mode) SIGTERM usually means that another host already
# exited, most often with the same problem in its copy of the code: finishing lets this host
# report that problem too (compose kills after 10 s), instead of "stopped by SIGTERM".
STOP_GRACE = 5.0
_CHUNK = 1 << 20


class PreparationStopped(ConfigError):
    """SIGTERM came while the code was being fetched or installed, and the work did not end
    within the grace period: the job exits 143."""

    exit_code = exitcodes.SIGTERM_EXIT

    def __init__(self, field: str, activity: str) -> None:
        super().__init__(field, f"stopped by SIGTERM while {activity}")
        self.args = (f"Stopped by SIGTERM while {activity} ({field}).",)


# ------------------------------------------------------------------------------ pure: members


class MemberKind(enum.Enum):
    FILE = "file"
    DIRECTORY = "directory"
    SYMLINK = "symlink"
    HARDLINK = "hard link"
    OTHER = "special file"


@dataclass(frozen=True)
class Member:
    """What the safety check needs to know about one archive member."""

    name: str
    kind: MemberKind
    link_target: str = ""  # symlink target, or the archive member a hard link refers to


def member_of(info: "tarfile.TarInfo") -> Member:
    if info.isdir():
        kind = MemberKind.DIRECTORY
    elif info.issym():
        kind = MemberKind.SYMLINK
    elif info.islnk():
        kind = MemberKind.HARDLINK
    elif info.isreg():
        kind = MemberKind.FILE
    else:
        kind = MemberKind.OTHER
    return Member(info.name, kind, info.linkname)


def _components(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def _normal_parts(path: str) -> tuple[str, ...] | str:
    """The path's components without '.' and empty ones, or why it is not a safe member path."""
    if not path:
        return "has an empty name"
    if path.startswith("/"):
        return "is an absolute path"
    parts = tuple(_components(path))
    if ".." in parts:
        return "has a '..' component"
    return parts


MAX_LINK_HOPS = 40  # symlinks followed in one lookup, as Linux allows (then ELOOP)

Links = Mapping[tuple[str, ...], str]  # a symlink's path in the code directory: its target


def _follow(parent: tuple[str, ...], target: str, links: Links) -> tuple[str, ...] | str:
    """Where a relative symlink in `parent` leads once `links` are on disk, followed as the
    kernel follows them (a '..' after a link goes up from where the link leads, not from where
    it lies), or how it gets out of the code directory."""
    location: list[str] = []
    pending = [*parent, *_components(target)][::-1]
    followed: list[str] = []
    hops = 0
    while pending:
        part = pending.pop()
        if part == "..":
            if not location:
                through = f" through the symlink {', '.join(followed)}" if followed else ""
                return f"outside the code{through}"
            location.pop()
            continue
        here = (*location, part)
        if here not in links:
            location.append(part)
            continue
        name = "/".join(here)
        if name not in followed:
            followed.append(name)
        hops += 1
        if hops > MAX_LINK_HOPS:
            return f"a loop of symlinks ({', '.join(followed[:3])})"
        if links[here].startswith("/"):
            return f"outside the code through the symlink {', '.join(followed)}"
        pending += _components(links[here])[::-1]
    return tuple(location)


def _under_link(parts: tuple[str, ...], links: Links) -> str | None:
    """The symlink among `parts`' parent directories, if any."""
    return next(("/".join(parts[:n]) for n in range(1, len(parts)) if parts[:n] in links), None)


def unsafe_members(members: Sequence[Member]) -> list[tuple[str, str]]:
    """(member name, reason) for every member that could write or point outside the code dir.

    Members are taken in archive order, as extraction writes them. Rules: no absolute names, no
    '..' components, no device files or FIFOs; nothing extracted through a symlink of the
    archive (a link is a way out that no path check sees); a name used again only by a file
    after a file or a directory after a directory (a symlink or hard link in the place of an
    earlier member redirects what is written there); a symlink must lead inside the code
    directory when followed through the archive's other links, both those extracted before it
    and all of them; a hard link only to a regular file extracted before it.
    """
    problems: list[tuple[str, str]] = []
    paths: dict[int, tuple[str, ...]] = {}
    for index, member in enumerate(members):
        parts = _normal_parts(member.name)
        if isinstance(parts, str):
            problems.append((member.name, parts))
        else:
            paths[index] = parts
    every_link = {
        paths[i]: members[i].link_target for i in paths if members[i].kind is MemberKind.SYMLINK
    }
    earlier_links: dict[tuple[str, ...], str] = {}
    # What is at each path so far. A name used again keeps its first kind: a file written
    # over a symlink goes through it (the link stays), and other pairs are refused.
    kinds: dict[tuple[str, ...], MemberKind] = {}
    for index, member in enumerate(members):
        if index not in paths:
            continue
        parts = paths[index]
        if member.kind is MemberKind.SYMLINK:
            earlier_links[parts] = member.link_target
        problem = _member_problem(member, parts, kinds, earlier_links, every_link)
        if problem is not None:
            problems.append((member.name, problem))
        kinds.setdefault(parts, member.kind)
    return problems


def _member_problem(
    member: Member,
    parts: tuple[str, ...],
    kinds: Mapping[tuple[str, ...], MemberKind],
    earlier_links: Links,
    every_link: Links,
) -> str | None:
    """Why this member is unsafe, given what the members before it made (`kinds`)."""
    through = _under_link(parts, every_link)
    if through is not None:
        return f"lies under the symlink {through}"
    if member.kind is MemberKind.OTHER:
        return "is a device file or FIFO"
    earlier = kinds.get(parts)
    if earlier is not None and (
        earlier is not member.kind or member.kind not in (MemberKind.FILE, MemberKind.DIRECTORY)
    ):
        return f"is a {member.kind.value} with the same name as an earlier {earlier.value}"
    if member.kind is MemberKind.SYMLINK:
        target = member.link_target
        if target.startswith("/"):
            return f"is a symlink to the absolute path {target}"
        if not parts:
            return f"is a symlink to {target}, outside the code"
        for links in (earlier_links, every_link):
            leads = _follow(parts[:-1], target, links)
            if isinstance(leads, str):
                return f"is a symlink to {target}, {leads}"
    elif member.kind is MemberKind.HARDLINK:
        target_parts = _normal_parts(member.link_target)
        if isinstance(target_parts, str) or target_parts not in kinds:
            return f"is a hard link to {member.link_target}, not a file of the code"
        through = _under_link(target_parts, every_link)
        if through is not None:
            return f"is a hard link to {member.link_target}, under the symlink {through}"
        if kinds[target_parts] is not MemberKind.FILE:
            return f"is a hard link to the {kinds[target_parts].value} {member.link_target}"
    return None


# ------------------------------------------------------------------------ pure: entry point


def is_python_package(names: Collection[str], pyproject_text: str | None) -> bool:
    """setup.py (what sagemaker-training looks for), or a pyproject.toml that builds a package."""
    if "setup.py" in names:
        return True
    if pyproject_text is None:
        return False
    # Imported here: most jobs have no pyproject.toml, and every host imports this module.
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib

    try:
        pyproject = tomllib.loads(pyproject_text)
    except tomllib.TOMLDecodeError:
        return False
    return "project" in pyproject or "build-system" in pyproject


def program_problem(program: str) -> str | None:
    """Why `sagemaker_program` cannot name a file inside the code directory, if it cannot."""
    parts = _normal_parts(program)
    if isinstance(parts, str):
        return f"{program!r} {parts}; it must be a path relative to the code directory"
    if not parts:
        return f"{program!r} names the code directory itself, not a file in it"
    return None


def pip_install_argv(python: str, requirements: bool, package_dir: str | None) -> list[str] | None:
    """pip's command line for this code, or None when there is nothing to install."""
    if not requirements and package_dir is None:
        return None
    argv = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    argv += ["--progress-bar", "off"]
    if package_dir is not None:
        argv.append(package_dir)
    if requirements:
        argv += ["-r", REQUIREMENTS]
    return argv


def output_tail(text: str, lines: int = OUTPUT_TAIL_LINES) -> str:
    kept = [line.rstrip() for line in text.splitlines() if line.strip()]
    return "\n".join(f"  {line[:200]}" for line in kept[-lines:])


# --------------------------------------------------------------------------------------- I/O


class Stop:
    """SIGTERM (the entry point's stop event) as preparation sees it: work goes on for
    `grace` seconds after it, then is abandoned."""

    def __init__(self, event: threading.Event | None = None, grace: float = STOP_GRACE) -> None:
        self._event = event or threading.Event()
        self._grace = grace
        self._since: float | None = None

    def expired(self) -> bool:
        if not self._event.is_set():
            return False
        if self._since is None:
            self._since = time.monotonic()
        return time.monotonic() - self._since >= self._grace


def prepare(
    source: SourceConfig,
    stop_event: threading.Event | None = None,
    *,
    download_timeout: float = DOWNLOAD_TIMEOUT,
    install_timeout: float = INSTALL_TIMEOUT,
    stop_grace: float = STOP_GRACE,
    python: str | None = None,
) -> None:
    """Fetch and extract the code if it is an archive, install its requirements, check it.

    Raises ConfigError (exit 78) for anything wrong with the code, PreparationStopped (143)
    when `stop_event` is set while downloading or installing and the work does not end within
    `stop_grace` seconds.
    """
    stop = Stop(stop_event, stop_grace)
    code_dir = Path(source.code_dir)
    if source.command:  # a whole command line: nothing to fetch or install
        log.log(f"command: {source.program} in {code_dir}")
        return
    if source.module is not None:  # `-m package.module`: found on the path when it runs
        if source.code_archive is not None:
            fetch_and_extract(source.code_archive, code_dir, download_timeout, stop)
        names = set(os.listdir(code_dir)) if code_dir.is_dir() else set()
        pyproject = code_dir / "pyproject.toml"
        text = _read_text(pyproject) if "pyproject.toml" in names else None
        kind = EntryPointKind.PYTHON_PACKAGE if is_python_package(names, text) else None
        log.log(f"entry point: module {source.module} (python -m) in {code_dir}")
        install(
            code_dir,
            kind or EntryPointKind.PYTHON_SCRIPT,
            install_timeout,
            stop,
            python or sys.executable,
        )
        return
    problem = program_problem(source.program)
    if problem is not None:
        raise ConfigError(PROGRAM, problem)
    extracted = source.code_archive is not None
    if source.code_archive is not None:
        fetch_and_extract(source.code_archive, code_dir, download_timeout, stop)
    program = code_dir / source.program
    if not program.is_file():
        origin = f" (extracted from {source.code_archive})" if extracted else ""
        raise ConfigError(
            PROGRAM,
            f"{source.program!r} not found in the code directory {code_dir}{origin}; "
            f"it holds: {_listing(code_dir)}",
        )
    names = set(os.listdir(code_dir))
    pyproject = code_dir / "pyproject.toml"
    package = is_python_package(names, _read_text(pyproject) if "pyproject.toml" in names else None)
    kind = entry_point_kind(source.program, package)
    if kind is EntryPointKind.EXECUTABLE and extracted and not os.access(program, os.X_OK):
        program.chmod(program.stat().st_mode | 0o111)  # as sagemaker-training does
    log.log(f"entry point {source.program} ({kind.value}) in {code_dir}")
    install(code_dir, kind, install_timeout, stop, python or sys.executable)


def fetch_and_extract(source: str, code_dir: Path, timeout: float, stop: Stop) -> None:
    started = time.monotonic()
    if source.startswith("s3://"):
        with tempfile.TemporaryDirectory(prefix="ringleader-source-") as scratch:
            archive = Path(scratch) / "sourcedir.tar.gz"
            size = download_s3(source, archive, timeout, stop)
            log.log(f"downloaded {source} ({size} bytes) in {time.monotonic() - started:.1f} s")
            extract(archive, source, code_dir)
    else:
        archive = Path(source)
        if not archive.is_file():
            raise ConfigError(SUBMIT_DIRECTORY, f"{source!r}: no such file")
        extract(archive, source, code_dir)
    log.log(f"extracted {source} into {code_dir} in {time.monotonic() - started:.1f} s")


def download_s3(uri: str, destination: Path, timeout: float, stop: Stop) -> int:
    """Stream one S3 object into `destination`; returns its size. Bounded by `timeout` overall
    and by connect/read timeouts per request, so a stalled transfer cannot hang the host."""
    import botocore.exceptions

    from ringleader.aws import client as aws  # boto3: a slow import, only when code is in S3
    from ringleader.aws.errors import error_code, http_status

    try:
        bucket, key = parse_s3_object_uri(uri, SOURCEDIR_OBJECT)
    except S3UriError as error:
        raise ConfigError(SUBMIT_DIRECTORY, str(error)) from None
    deadline = time.monotonic() + timeout
    client = aws.make_client(
        "s3",
        aws.client_config(
            total_attempts=S3_ATTEMPTS,
            connect_timeout=S3_CONNECT_TIMEOUT,
            read_timeout=S3_READ_TIMEOUT,
        ),
        endpoint_url=aws.s3_endpoint(os.environ),
    )
    where = f" (S3 endpoint {client.meta.endpoint_url})"
    size = 0
    try:
        response = client.get_object(Bucket=bucket, Key=key)
        with destination.open("wb") as handle:
            for chunk in response["Body"].iter_chunks(_CHUNK):
                handle.write(chunk)
                size += len(chunk)
                if stop.expired():
                    raise PreparationStopped(SUBMIT_DIRECTORY, f"downloading {uri}")
                if time.monotonic() > deadline:
                    raise ConfigError(
                        SUBMIT_DIRECTORY,
                        f"downloading {uri} did not finish within {timeout:g} s "
                        f"(download timeout); {size} bytes arrived{where}",
                    )
    except botocore.exceptions.ClientError as error:
        message = str(error.response.get("Error", {}).get("Message", ""))
        problem = _s3_error(uri, bucket, key, error_code(error), http_status(error), message)
        raise ConfigError(SUBMIT_DIRECTORY, problem + where) from None
    except botocore.exceptions.NoCredentialsError:
        raise ConfigError(
            SUBMIT_DIRECTORY, f"no AWS credentials to download {uri}{where}"
        ) from None
    except (botocore.exceptions.BotoCoreError, OSError) as error:
        raise ConfigError(SUBMIT_DIRECTORY, f"cannot download {uri}: {error}{where}") from None
    return size


def _s3_error(uri: str, bucket: str, key: str, code: str, status: int, message: str) -> str:
    """What GetObject's failure means, naming the bucket or key."""
    if code == "NoSuchBucket":
        return f"{uri}: the bucket {bucket!r} does not exist"
    if code in ("NoSuchKey", "404") or status == 404:
        return f"{uri}: no object {key!r} in the bucket {bucket!r}"
    if code in ("AccessDenied", "403") or status == 403:
        return f"{uri}: access denied"
    return f"cannot download {uri}: {code or status or None} {message}".rstrip()


def extract(archive: Path, source: str, code_dir: Path) -> None:
    """Check every member of the tarball, then extract it into `code_dir`, where each member
    is checked again against what is on disk just before it is written."""
    import tarfile  # here: only jobs with a source tarball need it

    # Python's own check, where it has one (3.12+, 3.10.12+, 3.11.4+; not Debian bookworm's
    # 3.11.2): ours run on every Python, its own on top.
    filter_error = getattr(tarfile, "FilterError", ())
    try:
        with tarfile.open(archive, "r:*") as tar:
            infos = tar.getmembers()
            problems = unsafe_members([member_of(info) for info in infos])
            if problems:
                shown = "; ".join(f"{name!r} {reason}" for name, reason in problems[:3])
                more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
                raise ConfigError(
                    SUBMIT_DIRECTORY,
                    f"{source} has unsafe members, nothing was extracted: {shown}{more}",
                )
            code_dir.mkdir(parents=True, exist_ok=True)
            members = _checked_on_disk(_sanitized(infos), code_dir, source)
            if hasattr(tarfile, "data_filter"):
                tar.extractall(code_dir, members=members, filter="data")
            else:
                tar.extractall(code_dir, members=members)  # noqa: S202 (checked above and on disk)
    except ConfigError:
        raise
    except filter_error as error:
        raise ConfigError(
            SUBMIT_DIRECTORY,
            f"{source}: Python's tar data filter refused {error.tarinfo.name!r}: {error}; "
            f"{_STOPPED.format(code_dir=code_dir)}",
        ) from None
    except (tarfile.TarError, EOFError, zlib.error, OSError, ValueError) as error:
        raise ConfigError(
            SUBMIT_DIRECTORY,
            f"{source} is not a valid (gzip-compressed) tar archive: {error}",
        ) from None


_STOPPED = "extraction stopped there, and {code_dir} may hold the members before it"


def _sanitized(infos: Iterable["tarfile.TarInfo"]) -> Iterator["tarfile.TarInfo"]:
    """Owned by us, no setuid/setgid/sticky bits, not writable by others."""
    uid, gid = os.getuid(), os.getgid()
    for info in infos:
        info.uid, info.gid, info.uname, info.gname = uid, gid, "", ""
        if info.isdir():
            info.mode = 0o755
        elif not info.issym():
            info.mode = (info.mode & 0o755) | 0o600
        yield info


def _checked_on_disk(
    infos: Iterable["tarfile.TarInfo"], code_dir: Path, source: str
) -> Iterator["tarfile.TarInfo"]:
    """Each member just before tarfile writes it (extractall takes one member at a time from
    this), refused when, with what is on disk by then, it would be written or point outside
    the code directory: what the standard library's data filter checks, for a Python without
    it, and for links that were on disk before the archive."""
    root = os.path.realpath(code_dir)
    for info in infos:
        problem = escape_on_disk(root, info.name, info.linkname, info.issym(), info.islnk())
        if problem is not None:
            raise ConfigError(
                SUBMIT_DIRECTORY,
                f"{source}: {info.name!r} {problem}; {_STOPPED.format(code_dir=code_dir)}",
            )
        yield info


def escape_on_disk(root: str, name: str, link: str, symlink: bool, hardlink: bool) -> str | None:
    """Why the member `name` (a link to `link`) would land or lead outside `root` (a real
    path), with the symlinks now on disk followed; None when it stays inside."""
    written = os.path.realpath(os.path.join(root, name))
    if not _inside(written, root):
        return f"would be written at {written}, outside the code directory"
    if not (symlink or hardlink):
        return None
    if os.path.isabs(link):
        return f"is a link to the absolute path {link}"
    base = os.path.join(root, os.path.dirname(name)) if symlink else root
    leads = os.path.realpath(os.path.join(base, link))
    if not _inside(leads, root):
        return f"would be a link to {leads}, outside the code directory"
    return None


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root


def install(code_dir: Path, kind: EntryPointKind, timeout: float, stop: Stop, python: str) -> None:
    requirements = (code_dir / REQUIREMENTS).is_file()
    with contextlib.ExitStack() as stack:
        package_dir = None
        if kind is EntryPointKind.PYTHON_PACKAGE:
            # pip builds in the source tree, which may be a read-only mount: build a copy.
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rl-pkg-")))
            package_dir = str(scratch / "package")
            shutil.copytree(code_dir, package_dir, symlinks=True)
        argv = pip_install_argv(python, requirements, package_dir)
        if argv is None:
            return
        field = REQUIREMENTS if requirements else SUBMIT_DIRECTORY
        what = " and ".join(
            name
            for name, present in (("the package", package_dir), (REQUIREMENTS, requirements))
            if present
        )
        log.log(f"installing {what} with pip")
        started = time.monotonic()
        code, output = run_bounded(argv, code_dir, timeout, stop, field, f"installing {what}")
        if code != 0:
            raise ConfigError(
                field,
                f"pip could not install {what} (exit code {code}); pip said:\n"
                + output_tail(output),
            )
        log.log(f"installed {what} in {time.monotonic() - started:.1f} s")


def run_bounded(
    argv: Sequence[str],
    cwd: Path,
    timeout: float,
    stop: Stop,
    field: str,
    activity: str,
) -> tuple[int, str]:
    """Run a command (no shell) to its end, within `timeout`; stop early after SIGTERM.

    Returns (exit code, output). On timeout or stop the whole process group is killed.
    """
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(
            list(argv),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            while True:
                try:
                    code = process.wait(timeout=min(0.2, max(deadline - time.monotonic(), 0)))
                    return code, _read(output)
                except subprocess.TimeoutExpired:
                    pass
                if stop.expired():
                    raise PreparationStopped(field, activity)
                if time.monotonic() >= deadline:
                    raise ConfigError(
                        field,
                        f"{activity} did not finish within {timeout:g} s (install timeout); "
                        "output so far:\n" + output_tail(_read(output)),
                    )
        finally:
            if process.poll() is None:
                signal_group(process.pid, signal.SIGKILL)
                process.wait()


def _read(handle: IO[bytes]) -> str:
    handle.seek(0)
    return handle.read().decode(errors="replace")


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _listing(code_dir: Path, limit: int = 8) -> str:
    try:
        names = sorted(entry.name + ("/" if entry.is_dir() else "") for entry in code_dir.iterdir())
    except OSError:
        return "nothing (it does not exist)"
    if not names:
        return "nothing"
    more = f", ... ({len(names)} entries)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more
