"""MANIFEST.sha256: the first member of every archive, in `sha256sum` format.

One line per regular file, sorted by path, paths relative to the archive root, so that
`tar xzf model.tar.gz && sha256sum -c MANIFEST.sha256` verifies an extracted archive.
"""

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import IO

MANIFEST_NAME = "MANIFEST.sha256"
CHUNK = 1024 * 1024


def manifest_line(path: str, digest: str) -> str:
    """One line as GNU sha256sum writes it, escaping a backslash, newline or CR in the name."""
    if any(char in path for char in "\\\n\r"):
        escaped = path.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
        return f"\\{digest}  {escaped}\n"
    return f"{digest}  {path}\n"


def manifest_text(entries: Iterable[tuple[str, str]]) -> str:
    """The manifest of (relative path, sha256 hex digest) pairs, sorted by path."""
    return "".join(manifest_line(path, digest) for path, digest in sorted(entries))


def parse_manifest(text: str) -> dict[str, str]:
    """Path -> digest from manifest text (the inverse of manifest_text); ValueError if malformed."""
    entries: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        escaped = line.startswith("\\")
        body = line[1:] if escaped else line
        digest, separator, path = body.partition("  ")
        if not separator or len(digest) != 64 or not _is_hex(digest) or not path:
            raise ValueError(f"line {number} of {MANIFEST_NAME} is not `<sha256>  <path>`")
        entries[_unescape(path) if escaped else path] = digest
    return entries


def encode_manifest(text: str) -> bytes:
    """Bytes of the manifest: file names that are not UTF-8 keep their original bytes."""
    return text.encode("utf-8", "surrogateescape")


def sha256_of_stream(stream: IO[bytes]) -> tuple[str, int]:
    """(hex digest, size) of everything left in `stream`."""
    digest = hashlib.sha256()
    size = 0
    while chunk := stream.read(CHUNK):
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def sha256_of_file(path: Path) -> tuple[str, int]:
    with path.open("rb") as stream:
        return sha256_of_stream(stream)


def _is_hex(text: str) -> bool:
    return all(char in "0123456789abcdef" for char in text)


def _unescape(path: str) -> str:
    out: list[str] = []
    chars = iter(path)
    for char in chars:
        if char != "\\":
            out.append(char)
            continue
        following = next(chars, "")
        out.append({"n": "\n", "r": "\r", "\\": "\\"}.get(following, "\\" + following))
    return "".join(out)
