"""output.tar.gz and model.tar.gz of one host, each with MANIFEST.sha256 as its first member.

An archive is written under a temporary name in the work directory and renamed when it is
complete, so its final name never holds a partial archive. Members come in a fixed order
(names sorted within each directory); symlinks are stored as links, never followed; sockets,
FIFOs and devices are left out and listed as skipped. Owners are stored as root (0/0, no names).
"""

import gzip
import hashlib
import os
import stat
import tarfile
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from ringleader.artifacts.manifest import (
    CHUNK,
    MANIFEST_NAME,
    encode_manifest,
    manifest_text,
    parse_manifest,
    sha256_of_file,
    sha256_of_stream,
)
from ringleader.core.files import atomic_output

OUTPUT_ARCHIVE = "output.tar.gz"
MODEL_ARCHIVE = "model.tar.gz"
PARTIAL_SUFFIX = ".partial"
COMPRESSLEVEL = 6  # gzip's own default: most of level 9's ratio at a fraction of its time


class ArchiveError(Exception):
    """An archive could not be written; the message names the file or directory."""


@dataclass(frozen=True)
class Skipped:
    path: str  # relative to the archive root
    reason: str


@dataclass(frozen=True)
class Entry:
    path: str  # relative to the source directory, "/"-separated
    kind: Literal["dir", "file", "symlink"]


@dataclass(frozen=True)
class Archive:
    name: str  # output.tar.gz or model.tar.gz
    path: Path  # the complete archive in the work directory
    size: int
    sha256: str  # of the archive file itself
    files: int  # regular files, each a line of the manifest
    skipped: tuple[Skipped, ...] = ()


def scan(root: Path, exclude: Collection[Path] = ()) -> tuple[list[Entry], list[Skipped]]:
    """Everything under `root` in archive order, and what cannot go into an archive."""
    excluded = {os.path.realpath(path) for path in exclude}
    entries: list[Entry] = []
    skipped: list[Skipped] = []
    if not root.is_dir():
        return entries, skipped
    entries.extend(_walk(root, "", excluded, skipped))
    return entries, skipped


def _walk(
    directory: Path, prefix: str, excluded: set[str], skipped: list[Skipped]
) -> Iterator[Entry]:
    try:
        names = sorted(os.listdir(directory))
    except OSError as error:
        skipped.append(Skipped(prefix or ".", f"cannot be listed: {_os_error(error)}"))
        return
    for name in names:
        path = directory / name
        relative = f"{prefix}{name}"
        try:
            mode = path.lstat().st_mode
        except OSError as error:
            skipped.append(Skipped(relative, f"vanished or unreadable: {_os_error(error)}"))
            continue
        if stat.S_ISLNK(mode):
            yield Entry(relative, "symlink")
        elif stat.S_ISDIR(mode):
            if os.path.realpath(path) in excluded:
                continue
            yield Entry(relative, "dir")
            yield from _walk(path, relative + "/", excluded, skipped)
        elif stat.S_ISREG(mode):
            yield Entry(relative, "file")
        else:
            skipped.append(Skipped(relative, _special_kind(mode)))


def _special_kind(mode: int) -> str:
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "not a regular file"


def build_archive(
    source: Path,
    name: str,
    work_dir: Path,
    *,
    compresslevel: int = COMPRESSLEVEL,
) -> Archive:
    """Write `work_dir/name` (a .tar.gz of the contents of `source`) atomically.

    A missing `source` gives an archive holding only an empty manifest. Files are hashed
    first (the manifest leads the archive), then stored; a file whose first bytes change in
    between makes the archive fail (a file that only grew is stored as it was when hashed).
    """
    if source.exists() and not source.is_dir():
        raise ArchiveError(f"{source} is not a directory")
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ArchiveError(f"cannot create {work_dir}: {_os_error(error)}") from error
    entries, skipped = scan(source, exclude=[work_dir])
    digests: dict[str, tuple[str, int]] = {}
    kept: list[Entry] = []
    for entry in entries:
        if entry.kind == "file":
            try:
                digests[entry.path] = sha256_of_file(source / entry.path)
            except OSError as error:
                skipped.append(Skipped(entry.path, f"vanished or unreadable: {_os_error(error)}"))
                continue
        kept.append(entry)
    manifest = encode_manifest(manifest_text((path, d) for path, (d, _) in digests.items()))
    final = work_dir / name
    try:
        with atomic_output(final, suffix=PARTIAL_SUFFIX, mode=0o600) as raw:
            _write_tar(raw, source, kept, digests, manifest, compresslevel)
    except OSError as error:
        raise ArchiveError(f"cannot write {final}: {_os_error(error)}") from error
    digest, size = sha256_of_file(final)
    return Archive(name, final, size, digest, len(digests), tuple(skipped))


def _write_tar(
    raw: IO[bytes],
    source: Path,
    entries: list[Entry],
    digests: dict[str, tuple[str, int]],
    manifest: bytes,
    compresslevel: int,
) -> None:
    # GzipFile with an empty name and mtime 0: the temporary name is not recorded in the header.
    with (
        gzip.GzipFile(
            filename="", mode="wb", compresslevel=compresslevel, fileobj=raw, mtime=0
        ) as compressed,
        tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        info = _owned_by_root(tarfile.TarInfo(MANIFEST_NAME))
        info.size, info.mode, info.mtime = len(manifest), 0o644, int(time.time())
        tar.addfile(info, _BytesReader(manifest))
        for entry in entries:
            _add(tar, source, entry, digests)


def _add(
    tar: tarfile.TarFile, source: Path, entry: Entry, digests: dict[str, tuple[str, int]]
) -> None:
    """Store one entry. Reading errors name the file; writing errors propagate as OSError."""
    path = source / entry.path
    try:
        status = path.lstat()
        linkname = os.readlink(path) if entry.kind == "symlink" else ""
    except OSError as error:  # vanished after it was hashed: the manifest already lists it
        raise ArchiveError(f"cannot read {path}: {_os_error(error)}") from error
    info = _owned_by_root(tarfile.TarInfo(entry.path))
    info.mode, info.mtime = stat.S_IMODE(status.st_mode), int(status.st_mtime)
    if entry.kind == "dir":
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
        return
    if entry.kind == "symlink":
        info.type, info.linkname = tarfile.SYMTYPE, linkname
        tar.addfile(info)
        return
    expected, info.size = digests[entry.path]
    try:
        stream = path.open("rb")
    except OSError as error:
        raise ArchiveError(f"cannot read {path}: {_os_error(error)}") from error
    with stream:
        reader = _HashingReader(stream, path)
        try:
            tar.addfile(info, reader)
        except OSError as error:
            if str(error) == "unexpected end of data":  # tarfile: fewer bytes than hashed
                raise ArchiveError(f"{path} shrank while it was being archived") from error
            raise
    if reader.hexdigest() != expected:
        raise ArchiveError(f"{path} changed while it was being archived")


def _owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self._data, self._offset = data, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._data) if size < 0 else self._offset + size
        chunk = self._data[self._offset : end]
        self._offset += len(chunk)
        return chunk


class _HashingReader:
    """Hashes what tarfile reads: exactly the stored bytes are checked against the manifest."""

    def __init__(self, stream: IO[bytes], path: Path) -> None:
        self._stream, self._path = stream, path
        self._digest = hashlib.sha256()

    def read(self, size: int = CHUNK) -> bytes:
        try:
            chunk = self._stream.read(size)
        except OSError as error:
            raise ArchiveError(f"cannot read {self._path}: {_os_error(error)}") from error
        self._digest.update(chunk)
        return chunk

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


def verify_archive(path: Path) -> list[str]:
    """Problems found when checking an archive against its manifest (none: it is intact)."""
    problems: list[str] = []
    with tarfile.open(path, mode="r:gz") as tar:
        first = tar.next()
        if first is None or first.name != MANIFEST_NAME:
            return [f"the first member is not {MANIFEST_NAME}"]
        stream = tar.extractfile(first)
        assert stream is not None
        listed = parse_manifest(stream.read().decode("utf-8", "surrogateescape"))
        seen: set[str] = set()
        for member in tar:
            if member is first or not member.isfile():
                continue
            data = tar.extractfile(member)
            assert data is not None
            digest, _ = sha256_of_stream(data)
            seen.add(member.name)
            if member.name not in listed:
                problems.append(f"{member.name} is not in the manifest")
            elif listed[member.name] != digest:
                problems.append(f"{member.name} does not match its sha256")
        problems.extend(f"{name} is missing" for name in sorted(set(listed) - seen))
    return problems


def _os_error(error: OSError) -> str:
    return error.strerror or str(error) or type(error).__name__
