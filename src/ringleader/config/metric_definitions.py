"""SageMaker-style metric definitions: parsed and validated (ringleader.output.metrics matches
them against the ranks' lines)."""

import re
from dataclasses import dataclass
from typing import Any

from ringleader.core.errors import ConfigError
from ringleader.core.jsontext import parse_json

_METACHARACTERS = set(".^$*+?{}[]\\|()")


# Flags under which a plain character in the regex still matches exactly itself. IGNORECASE
# and VERBOSE (whitespace and # comments ignored) do not; re.LOCALE is bytes-only.
_LITERAL_SAFE_FLAGS = re.UNICODE | re.ASCII | re.MULTILINE | re.DOTALL


@dataclass(frozen=True)
class MetricDefinition:
    name: str
    pattern: re.Pattern[str]
    # Text every match contains, or "": a cheap `in` test skips most lines. Only ever what
    # literal_prefix() proved safe; "" turns the prefilter off.
    required_text: str = ""


def literal_prefix(regex: str | re.Pattern[str]) -> str:
    """Plain text every match of `regex` starts with ("loss=([0-9.]+)" -> "loss="), or "".

    Conservative: "" unless provably safe. Only a leading run of plain characters counts,
    and only when nothing can make it optional or change how it matches: no `|` anywhere
    (even in a class or escaped), no `(?` anywhere (inline flags, lookarounds), no
    case-insensitive or verbose flags (inline or on the compiled pattern). A quantifier
    `*`, `?` or `{` after the run makes its last character optional, so that character is
    dropped; `+` keeps it (at least one). A backslash escape or any other metacharacter
    ends the run.
    """
    pattern = regex if isinstance(regex, re.Pattern) else re.compile(regex)
    text = pattern.pattern
    if not isinstance(text, str) or pattern.flags & ~_LITERAL_SAFE_FLAGS:
        return ""
    if "|" in text or "(?" in text:
        return ""
    prefix: list[str] = []
    for char in text:
        if char in _METACHARACTERS:
            if char in "*?{" and prefix:
                prefix.pop()  # the quantifier makes the previous character optional
            # "+": at least one of the previous character, so it stays required
            break
        prefix.append(char)
    return "".join(prefix)


def parse_definitions(field: str, value: Any) -> tuple[MetricDefinition, ...]:
    """A list of {"Name": ..., "Regex": ...} (SageMaker's shape), or its JSON text."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        try:
            value = parse_json(value)
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
        definitions.append(MetricDefinition(name, pattern, literal_prefix(pattern)))
    return tuple(definitions)
