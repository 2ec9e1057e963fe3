"""JSON text from configuration files and values, parsed with one rule for what is invalid."""

import json
from typing import Any


def parse_json(text: str) -> Any:
    """json.loads, where JSON nested deeper than the parser can go (a RecursionError) is
    invalid JSON like any other: a ValueError, so callers report the field, not a crash."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to parse") from None
