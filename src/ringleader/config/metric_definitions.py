"""SageMaker-style metric definitions: parsed and validated, and matched against a line."""

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ringleader.core.errors import ConfigError

_METACHARACTERS = set(".^$*+?{}[]\\|()")


@dataclass(frozen=True)
class MetricDefinition:
    name: str
    pattern: re.Pattern[str]
    # Literal text every match starts with: a cheap `in` test skips most lines.
    required_text: str = ""


def literal_prefix(regex: str) -> str:
    """The plain characters a regex starts with ("loss=([0-9.]+)" -> "loss=")."""
    prefix: list[str] = []
    for index, char in enumerate(regex):
        if char in _METACHARACTERS:
            if char in "*?{" and prefix:
                prefix.pop()  # the quantifier makes the previous character optional
            elif char == "+" and prefix:
                pass  # at least one of the previous character: it stays required
            break
        prefix.append(char)
        if index == len(regex) - 1:
            break
    return "".join(prefix)


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
        definitions.append(MetricDefinition(name, pattern, literal_prefix(regex)))
    return tuple(definitions)


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
