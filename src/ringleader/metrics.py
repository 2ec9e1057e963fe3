"""SageMaker-style metric definitions: regexes over rank output lines become metric records."""

import json
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ringleader.errors import ConfigError


@dataclass(frozen=True)
class MetricDefinition:
    name: str
    pattern: re.Pattern[str]


def parse_definitions(field: str, value: Any) -> tuple[MetricDefinition, ...]:
    """A list of {"Name": ..., "Regex": ...} (SageMaker's shape), or its JSON text."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as error:
            raise ConfigError(field, f"not valid JSON: {error}") from None
    if not isinstance(value, list):
        raise ConfigError(field, f'expected a list of {{"Name", "Regex"}} objects, got {value!r}')
    definitions = []
    for index, item in enumerate(value):
        if not isinstance(item, dict) or set(item) != {"Name", "Regex"}:
            raise ConfigError(
                field, f'item {index}: expected {{"Name": str, "Regex": str}}, got {item!r}'
            )
        name, regex = item["Name"], item["Regex"]
        if not isinstance(name, str) or not name or not isinstance(regex, str):
            raise ConfigError(field, f"item {index}: Name and Regex must be non-empty strings")
        try:
            pattern = re.compile(regex)
        except re.error as error:
            raise ConfigError(
                field, f"item {index} ({name}): invalid regex {regex!r}: {error}"
            ) from None
        if pattern.groups < 1:
            raise ConfigError(
                field, f"item {index} ({name}): regex {regex!r} needs a group capturing the value"
            )
        definitions.append(MetricDefinition(name, pattern))
    return tuple(definitions)


def extract(definitions: Iterable[MetricDefinition], line: str) -> list[tuple[str, float]]:
    """(name, value) for every definition whose regex matches the line with a number."""
    found = []
    for definition in definitions:
        match = definition.pattern.search(line)
        if match is None:
            continue
        try:
            found.append((definition.name, float(match.group(1))))
        except (TypeError, ValueError):
            continue
    return found


@dataclass
class MetricSummary:
    last: float
    minimum: float
    maximum: float
    count: int

    def add(self, value: float) -> None:
        self.last = value
        self.minimum = min(self.minimum, value)
        self.maximum = max(self.maximum, value)
        self.count += 1


class MetricRecorder:
    """Appends records to metrics.jsonl and keeps a per-metric summary (thread-safe)."""

    def __init__(self, definitions: tuple[MetricDefinition, ...], path: Path) -> None:
        self.definitions = definitions
        self._path = path
        self._file: IO[str] | None = None
        self._lock = threading.Lock()
        self.summary: dict[str, MetricSummary] = {}

    def observe(self, line: str, rank: int, host: str) -> None:
        found = extract(self.definitions, line)
        if not found:
            return
        now = time.time()
        with self._lock:
            if self._file is None:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self._path.open("a")
            for name, value in found:
                record = {
                    "timestamp": now,
                    "name": name,
                    "value": value,
                    "rank": rank,
                    "host": host,
                }
                self._file.write(json.dumps(record) + "\n")
                if name in self.summary:
                    self.summary[name].add(value)
                else:
                    self.summary[name] = MetricSummary(value, value, value, 1)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def summary_lines(self) -> list[str]:
        return [
            f"metric {name}: last={s.last:g} min={s.minimum:g} max={s.maximum:g} count={s.count}"
            for name, s in sorted(self.summary.items())
        ]
