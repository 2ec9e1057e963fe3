"""Decoding of SageMaker hyperparameter values, which arrive JSON-encoded or as plain strings.

SageMaker writes every value as a string ("2", "\"train.py\"", "true"); people writing
hyperparameters.json by hand write real JSON (2, true). Both must mean the same thing.
"""

import re
from collections.abc import Mapping
from typing import Any

from ringleader.core.errors import ConfigError
from ringleader.core.jsontext import parse_json

_TRUE = {"true", "1", "yes"}
_WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")
MAX_SECONDS = 1_000_000.0  # about 11.5 days
_FALSE = {"false", "0", "no"}
_SIZE = re.compile(r"(\d+(\.\d+)?)([bkmg]?)", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def decode_value(value: Any) -> Any:
    """A string holding JSON becomes that JSON value; anything else is returned as it is."""
    if isinstance(value, str):
        try:
            return parse_json(value)
        except ValueError:
            return value
    return value


def decode_all(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {str(key): decode_value(value) for key, value in raw.items()}


def as_bool(field: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(field, f"expected true or false, got {value!r}")


def as_positive_int(field: str, value: Any) -> int:
    return as_count(field, value, minimum=1)


def as_count(field: str, value: Any, minimum: int = 0) -> int:
    """A whole number of at least `minimum` (by default a count that may be none)."""
    if isinstance(value, str) and _WHOLE_NUMBER.fullmatch(value.strip()):
        number: Any = int(value.strip())
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    else:
        number = value
    if isinstance(number, bool) or not isinstance(number, int) or number < minimum:
        raise ConfigError(field, f"expected a whole number of at least {minimum}, got {value!r}")
    return number


def as_seconds(field: str, value: Any, *, zero: bool = True) -> float:
    """A number of seconds up to MAX_SECONDS, from 0 (none) or, without `zero`, above it.
    Never inf or nan: no unbounded waits."""
    if not isinstance(value, bool):
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            pass
        else:
            lowest_ok = seconds >= 0 if zero else seconds > 0
            if lowest_ok and seconds <= MAX_SECONDS:
                return seconds
    lowest = "from 0 to" if zero else "above 0 and at most"
    raise ConfigError(
        field, f"expected a number of seconds {lowest} {MAX_SECONDS:g}, got {value!r}"
    )


def as_positive_seconds(field: str, value: Any) -> float:
    return as_seconds(field, value, zero=False)


def as_port(field: str, value: Any) -> int:
    port = as_positive_int(field, value)
    if port > 65535:
        raise ConfigError(field, f"expected a TCP port from 1 to 65535, got {value!r}")
    return port


def as_size(field: str, value: Any) -> int:
    """Docker's size syntax (`1g`, `512m`, `100000000`: bytes), above 0, in bytes."""
    match = _SIZE.fullmatch(str(value).strip()) if not isinstance(value, bool) else None
    if match is None or float(match.group(1)) <= 0:
        raise ConfigError(field, f"expected a size such as 512m or 2g, got {value!r}")
    return int(float(match.group(1)) * _UNITS[match.group(3).lower()])


def as_switch(field: str, value: Any) -> bool:
    """on or off (true or false, too)."""
    text = str(value).strip().lower()
    if text in ("on", "off"):
        return text == "on"
    try:
        return as_bool(field, value)
    except ConfigError:
        raise ConfigError(field, f"expected on or off, got {value!r}") from None
