"""This machine's installed distributions, packed back into wheels (for `--bootstrap`).

ringleader itself is packed from its package directory, so an editable install works too; any
other distribution from the files its RECORD lists. Compiled distributions keep their original
wheel tag, so a host whose Python (or architecture) differs from this machine's cannot use
them: `plan_bootstrap` ships only the wheels that fit the host and leaves the rest to the host's
own pip and package index (a host's Python may be any supported version).
"""

import base64
import hashlib
import importlib.metadata
import io
import itertools
import re
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import ringleader

_SKIPPED_METADATA = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def requirement_closure(name: str, python: tuple[int, int] | None = None) -> dict[str, str]:
    """`name` and every distribution it needs (extras left out) on a host running Python
    `python` (None: on any supported Python), each with its requirement without the marker,
    e.g. {"ringleader": "ringleader", "tomli": "tomli>=2", ...}. Followed through what is
    installed here; one that is not is listed (the host's pip finds it), but not what it needs
    in turn, and not at all when its marker is one this cannot decide (e.g. sys_platform)."""
    seen: dict[str, str] = {}
    pending = [(name, name, True)]
    while pending:
        current, requirement, decided = pending.pop()
        key = _normalize(current)
        if key in seen:
            continue
        try:
            requires = importlib.metadata.requires(current) or []
        except importlib.metadata.PackageNotFoundError:
            if decided:
                seen[key] = requirement
            continue
        seen[key] = requirement
        for text in requires:
            spec, _, marker = text.partition(";")
            applies = marker_applies(marker, python)
            if applies is not False and (match := _NAME.match(spec.strip())) is not None:
                pending.append((match.group(0), spec.strip(), applies is True))
    return seen


_PYTHON_VERSION_CLAUSE = re.compile(
    r"""^\(?\s*python_version\s*(<=|>=|==|!=|<|>)\s*["'](\d+)\.(\d+)["']\s*\)?$"""
)
_COMPARISONS = {
    "<": tuple.__lt__,
    "<=": tuple.__le__,
    "==": tuple.__eq__,
    "!=": tuple.__ne__,
    ">": tuple.__gt__,
    ">=": tuple.__ge__,
}


def marker_applies(marker: str, python: tuple[int, int] | None) -> bool | None:
    """Whether a requirement with this environment marker is needed on a host running Python
    `python`: extras never; `python_version` clauses joined by `and` are decided for `python`
    (None: any Python, so they apply); None when something else decides (sys_platform, ...),
    and then what is installed here is taken as the answer."""
    marker = marker.strip()
    if not marker:
        return True
    if "extra" in marker:
        return False
    if " or " in marker:
        return None
    decided = True
    for clause in marker.split(" and "):
        match = _PYTHON_VERSION_CLAUSE.match(clause.strip())
        if match is None:
            decided = False
        elif python is not None:
            operator, major, minor = match.groups()
            if not _COMPARISONS[operator](python, (int(major), int(minor))):
                return False
    return True if decided else None


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


def installed_wheel_tag(name: str) -> tuple[str, str] | None:
    """(version, wheel tag) of the distribution as installed here, or None if it is not."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    return dist.version, _wheel_tag(dist)


@dataclass(frozen=True)
class HostPython:
    """What decides whether a compiled wheel installs on a host."""

    version: tuple[int, int]
    implementation: str  # sys.implementation.name
    machine: str  # platform.machine()


def wheel_fits(tag: str, host: HostPython) -> bool:
    """Whether a wheel tagged `tag` (PEP 425, e.g. cp311-cp311-manylinux_2_17_x86_64 or
    py3-none-any, each part possibly a dotted set) installs on `host`. The platform is checked
    by architecture only: the hosts and this machine are taken to be Linux alike."""
    parts = tag.split("-")
    if len(parts) != 3:
        return False
    interpreters, abis, platforms = (part.split(".") for part in parts)
    return any(
        _interpreter_fits(interpreter, abi, host) and _platform_fits(platform, host.machine)
        for interpreter, abi, platform in itertools.product(interpreters, abis, platforms)
    )


def _interpreter_fits(interpreter: str, abi: str, host: HostPython) -> bool:
    major, minor = host.version
    digits = interpreter[2:]
    if interpreter.startswith("py") and abi == "none":  # pure Python: py3, py3X up to ours
        return digits == str(major) or (
            digits[:1] == str(major) and digits[1:].isdigit() and int(digits[1:]) <= minor
        )
    if not interpreter.startswith("cp") or host.implementation != "cpython":
        return False
    if abi == "abi3":  # the stable ABI: built for 3.N, usable from 3.N on
        return digits[:1] == str(major) and digits[1:].isdigit() and int(digits[1:]) <= minor
    return digits == f"{major}{minor}" and (abi == "none" or abi.startswith(interpreter))


def _platform_fits(platform: str, machine: str) -> bool:
    return platform == "any" or platform.endswith(f"_{machine}")


@dataclass(frozen=True)
class BootstrapPlan:
    shipped: tuple[str, ...]  # distributions whose wheels are packed here and fit the host
    from_index: tuple[str, ...]  # requirements the host's pip takes from its package index

    def index_note(self, host: HostPython) -> str:
        """What the host's pip is to fetch and why ("" when nothing)."""
        if not self.from_index:
            return ""
        version = "{}.{}".format(*host.version)
        return (
            f"; from the host's package index (no build here fits its Python {version} on "
            f"{host.machine}): {', '.join(self.from_index)}"
        )


def plan_bootstrap(
    needed: Mapping[str, str],
    host_has: Mapping[str, str | None],
    installed_here: Mapping[str, tuple[str, str] | None],
    host: HostPython,
) -> BootstrapPlan:
    """What to install on a host: ringleader always (it is pure Python), and every other
    distribution in `needed` (name -> requirement, see requirement_closure) that the host
    lacks (`host_has`: its versions): this machine's wheel when it fits the host, else the same
    version from the host's index, or the requirement itself when this machine lacks it."""
    shipped: list[str] = []
    from_index: list[str] = []
    for name, requirement in needed.items():
        if name != "ringleader" and host_has.get(name) is not None:
            continue
        here = installed_here.get(name)
        if name == "ringleader" or (here is not None and wheel_fits(here[1], host)):
            shipped.append(name)
        elif here is not None:
            from_index.append(f"{name}=={here[0]}")
        else:
            from_index.append(requirement)
    return BootstrapPlan(tuple(shipped), tuple(from_index))


def _wheel_tag(dist: importlib.metadata.Distribution) -> str:
    """The wheel's tags as one compressed tag set: py2-none-any and py3-none-any (two `Tag:`
    lines) become py2.py3-none-any, which a Python 3 host accepts (the first alone it refuses)."""
    parts: list[dict[str, None]] = [{}, {}, {}]
    for line in (dist.read_text("WHEEL") or "").splitlines():
        if line.startswith("Tag:"):
            for found, part in zip(parts, line.split(":", 1)[1].strip().split("-"), strict=False):
                found[part] = None
    if not all(parts):
        return "py3-none-any"
    return "-".join(".".join(found) for found in parts)


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
