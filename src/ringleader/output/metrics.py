"""Metric records: lines that match a metric definition become rows of metrics.jsonl."""

import contextlib
import json
import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ringleader.config.metric_definitions import MetricDefinition


def extract(definitions: Iterable[MetricDefinition], line: str) -> list[tuple[str, float]]:
    """(name, value) for every definition whose regex matches the line with a number."""
    found = []
    for definition in definitions:
        if definition.required_text not in line:
            continue
        match = definition.pattern.search(line)
        if match is None:
            continue
        try:
            value = float(match.group(1))
        except (TypeError, ValueError):
            continue
        if math.isfinite(value):  # JSON has no NaN or infinity
            found.append((definition.name, value))
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


JOB_RANK = -1  # the rank of a record about the whole job (the leader's status)


class MetricRecorder:
    """Appends records to metrics.jsonl and keeps a per-metric summary (thread-safe)."""

    def __init__(self, definitions: tuple[MetricDefinition, ...], path: Path) -> None:
        self.definitions = definitions
        self._path = path
        self._file: IO[str] | None = None
        self._lock = threading.Lock()
        self.summary: dict[str, MetricSummary] = {}
        self.stopped: str | None = None  # why metrics.jsonl was given up, when it was
        self._json_strings = {d.name: json.dumps(d.name) for d in definitions}
        self.attempt = 0  # the job's current start of its ranks: every record carries it

    def observe(self, line: str, rank: int, host: str) -> None:
        found = extract(self.definitions, line)
        if not found:
            return
        now = time.time()
        # Formatted by hand: json.dumps per record would cost more than finding the metrics.
        host_json = self._json_strings.get(host) or self._json_strings.setdefault(
            host, json.dumps(host)
        )
        records = "".join(
            f'{{"timestamp": {now!r}, "name": {self._json_strings[name]}, "value": {value!r}, '
            f'"rank": {rank}, "host": {host_json}, "attempt": {self.attempt}}}\n'
            for name, value in found
        )
        with self._lock:
            self._append(records)
            for name, value in found:
                if name in self.summary:
                    self.summary[name].add(value)
                else:
                    self.summary[name] = MetricSummary(value, value, value, 1)

    def record(self, values: Iterable[tuple[str, float]], host: str) -> None:
        """The job's own values (the leader's status: ringleader_step, ...), as rank JOB_RANK:
        they belong to no rank."""
        now = time.time()
        records = "".join(
            json.dumps(
                {
                    "timestamp": now,
                    "name": name,
                    "value": value,
                    "rank": JOB_RANK,
                    "host": host,
                    "attempt": self.attempt,
                }
            )
            + "\n"
            for name, value in values
        )
        with self._lock:
            self._append(records)

    def _append(self, records: str) -> None:
        """Best-effort: a write that fails (a full disk) stops the file, once, with a warning;
        the summary keeps counting and the job never notices."""
        if self.stopped is not None:
            return
        try:
            if self._file is None:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self._path.open("a")
            self._file.write(records)
        except OSError as error:
            self.stopped = f"{self._path} stopped: {error.strerror or error}"
            self._close_quietly()

    def close(self) -> None:
        with self._lock:
            try:
                if self._file is not None:
                    self._file.close()
            except OSError as error:  # the buffered records could not be written
                self.stopped = self.stopped or f"{self._path} stopped: {error.strerror or error}"
            self._file = None

    def _close_quietly(self) -> None:
        with contextlib.suppress(OSError):
            if self._file is not None:
                self._file.close()
        self._file = None

    def summary_lines(self) -> list[str]:
        lines = [
            f"metric {name}: last={s.last:g} min={s.minimum:g} max={s.maximum:g} count={s.count}"
            for name, s in sorted(self.summary.items())
        ]
        if self.stopped is not None:
            lines.append(f"warning: {self.stopped}; the counts above are complete")
        return lines
