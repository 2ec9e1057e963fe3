"""What an image has for ringleader, found by one POSIX sh script (files/probe.sh) that runs in
this image (`image setup`) or in another one (`image check`), and parsed here (pure)."""

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources

PROBE_TIMEOUT = 60.0  # seconds; an interpreter that hangs on start-up must not hang setup


def probe_script() -> str:
    return resources.files("ringleader.tools.image").joinpath("files/probe.sh").read_text()


@dataclass(frozen=True)
class PythonFacts:
    path: str
    version: tuple[int, int, int] | None  # None: it does not run
    modules: frozenset[str] = frozenset()  # which of ringleader's and the frameworks' it has

    @property
    def minor(self) -> tuple[int, int] | None:
        return None if self.version is None else self.version[:2]

    def describe(self) -> str:
        if self.version is None:
            return f"{self.path} (does not run)"
        return f"{self.path} (Python {'.'.join(map(str, self.version))})"


@dataclass(frozen=True)
class ImageFacts:
    os_id: str = ""
    os_like: tuple[str, ...] = ()
    os_name: str = ""
    user: str = ""
    tools: dict[str, str] = field(default_factory=dict)  # tool -> path, only those found
    mpirun_version: str = ""
    settings: str | None = None  # the image settings file, when `image setup` ran
    settings_python: str | None = None
    pythons: tuple[PythonFacts, ...] = ()  # in the probe's order, no repeats

    def python(self, path: str) -> PythonFacts | None:
        return next((found for found in self.pythons if found.path == path), None)


def parse_probe(text: str) -> ImageFacts:
    values: dict[str, str] = {}
    tools: dict[str, str] = {}
    pythons: dict[str, PythonFacts] = {}
    for line in text.splitlines():
        key, separator, value = line.partition("=")
        if not separator:
            continue
        if key.startswith("tool:"):
            if value:
                tools[key[5:]] = value
        elif key.startswith("python:"):
            path = key[7:]
            if path not in pythons:
                pythons[path] = _python_facts(path, value)
        else:
            values[key] = value
    return ImageFacts(
        os_id=values.get("os_id", ""),
        os_like=tuple(values.get("os_like", "").split()),
        os_name=values.get("os_name", ""),
        user=values.get("user", ""),
        tools=tools,
        mpirun_version=values.get("mpirun_version", ""),
        settings=values.get("settings") or None,
        settings_python=values.get("settings_python") or None,
        pythons=tuple(pythons.values()),
    )


def _python_facts(path: str, value: str) -> PythonFacts:
    version_text, _, modules = value.partition("|")
    try:
        major, minor, micro = (int(part) for part in version_text.split("."))
    except ValueError:
        return PythonFacts(path, None)
    names = frozenset(name for name in modules.split(",") if name)
    return PythonFacts(path, (major, minor, micro), names)


class ProbeError(Exception):
    pass


def run_probe(command: Sequence[str], timeout: float, where: str) -> ImageFacts:
    """Run the probe script as `command` (a shell reading it from stdin) and parse it."""
    try:
        result = subprocess.run(
            list(command),
            input=probe_script(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ProbeError(f"the probe {where} did not finish within {timeout:g} s") from None
    except OSError as error:
        raise ProbeError(f"cannot run the probe {where}: {error}") from None
    if result.returncode != 0:
        raise ProbeError(
            f"the probe could not run {where} (exit code {result.returncode}): "
            f"{result.stderr.strip() or 'no output'}"
        )
    return parse_probe(result.stdout)


def probe_here(pythons: Sequence[str]) -> ImageFacts:
    """The probe run on this machine (the image being built)."""
    return run_probe(["/bin/sh", "-s", "--", *pythons], PROBE_TIMEOUT, "in this image")
