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
    if isinstance(value, bool):
        raise ConfigError(field, f"expected a whole number of at least 1, got {value!r}")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and _WHOLE_NUMBER.fullmatch(value.strip()):
        number = int(value.strip())
    else:
        raise ConfigError(field, f"expected a whole number of at least 1, got {value!r}")
    if number < 1:
        raise ConfigError(field, f"expected a whole number of at least 1, got {value!r}")
    return number


def as_count(field: str, value: Any) -> int:
    """A whole number of at least 0 (a count that may be none)."""
    expected = f"expected a whole number of at least 0, got {value!r}"
    if isinstance(value, str) and _WHOLE_NUMBER.fullmatch(value.strip()):
        value = int(value.strip())
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(field, expected)
    return value


def as_seconds(field: str, value: Any) -> float:
    """A number of seconds from 0 (none) to MAX_SECONDS."""
    if not isinstance(value, bool):
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            pass
        else:
            if 0 <= seconds <= MAX_SECONDS:
                return seconds
    raise ConfigError(
        field, f"expected a number of seconds from 0 to {MAX_SECONDS:g}, got {value!r}"
    )


def as_positive_seconds(field: str, value: Any) -> float:
    if not isinstance(value, bool):
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            pass
        else:
            if 0 < seconds <= MAX_SECONDS:  # also rules out inf and nan: no unbounded waits
                return seconds
    raise ConfigError(
        field, f"expected a number of seconds above 0 and at most {MAX_SECONDS:g}, got {value!r}"
    )


def as_port(field: str, value: Any) -> int:
    port = as_positive_int(field, value)
    if port > 65535:
        raise ConfigError(field, f"expected a TCP port from 1 to 65535, got {value!r}")
    return port
