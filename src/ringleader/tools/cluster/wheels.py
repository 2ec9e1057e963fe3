"""This machine's installed distributions, packed back into wheels (for `--bootstrap`).

ringleader itself is packed from its package directory, so an editable install works too; any
other distribution from the files its RECORD lists. Compiled distributions keep their original
wheel tag: the remote host must match it (preflight checks the Python version).
"""

import base64
import hashlib
import importlib.metadata
import io
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path

import ringleader

_SKIPPED_METADATA = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def requirement_closure(name: str) -> list[str]:
    """`name` and every distribution it needs (extras left out), as installed here."""
    seen: dict[str, None] = {}
    pending = [name]
    while pending:
        current = pending.pop()
        key = _normalize(current)
        if key in seen:
            continue
        try:
            requires = importlib.metadata.requires(current) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        seen[key] = None
        for requirement in requires:
            if "extra ==" in requirement.split(";", 1)[-1] and ";" in requirement:
                continue
            if (match := _NAME.match(requirement)) is not None:
                pending.append(match.group(0))
    return list(seen)


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pack(name: str) -> tuple[str, bytes]:
    """(wheel file name, wheel bytes) of the installed distribution `name`."""
    dist = importlib.metadata.distribution(name)
    dist_name = re.sub(r"[-.]+", "_", dist.metadata["Name"])
    version = dist.version
    info_dir = f"{dist_name}-{version}.dist-info"
    tag = _wheel_tag(dist)
    if _normalize(name) == "ringleader":
        files = _tree(Path(ringleader.__path__[0]), "ringleader")
    else:
        files = _recorded(dist)
    metadata = [(f"{info_dir}/METADATA", (dist.read_text("METADATA") or "").encode())]
    if entry_points := dist.read_text("entry_points.txt"):
        metadata.append((f"{info_dir}/entry_points.txt", entry_points.encode()))
    purelib = "true" if tag.endswith("-none-any") else "false"
    wheel = f"Wheel-Version: 1.0\nGenerator: ringleader\nRoot-Is-Purelib: {purelib}\nTag: {tag}\n"
    metadata.append((f"{info_dir}/WHEEL", wheel.encode()))
    buffer = io.BytesIO()
    record = []
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for arcname, data in [*files, *metadata]:
            archive.writestr(arcname, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{arcname},sha256={digest.decode()},{len(data)}")
        record.append(f"{info_dir}/RECORD,,")
        archive.writestr(f"{info_dir}/RECORD", "\n".join(record) + "\n")
    return f"{dist_name}-{version}-{tag}.whl", buffer.getvalue()


def _wheel_tag(dist: importlib.metadata.Distribution) -> str:
    for line in (dist.read_text("WHEEL") or "").splitlines():
        if line.startswith("Tag:"):
            return line.split(":", 1)[1].strip()
    return "py3-none-any"


def _tree(root: Path, prefix: str) -> Iterable[tuple[str, bytes]]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            yield f"{prefix}/{path.relative_to(root).as_posix()}", path.read_bytes()


def _recorded(dist: importlib.metadata.Distribution) -> Iterable[tuple[str, bytes]]:
    for entry in dist.files or ():
        parts = entry.parts
        if parts[0] == ".." or "__pycache__" in parts:
            continue  # scripts (pip makes them again) and byte code
        if parts[0].endswith(".dist-info"):
            continue  # written anew above
        path = Path(str(dist.locate_file(entry)))
        if path.is_file():
            yield entry.as_posix(), path.read_bytes()
