"""How many examples each property test runs. RINGLEADER_PROPERTY_SCALE (a number above 0,
default 1) scales them: scripts/test-pythons.sh runs the other Pythons at 0.1, as they check
that the code runs there, while the .venv's run checks the properties in full."""

import os

_VALUE = os.environ.get("RINGLEADER_PROPERTY_SCALE", "1")
try:
    SCALE = float(_VALUE)
except ValueError:
    raise ValueError(
        f"RINGLEADER_PROPERTY_SCALE: expected a number above 0, got {_VALUE!r}"
    ) from None
if not SCALE > 0:
    raise ValueError(f"RINGLEADER_PROPERTY_SCALE: expected a number above 0, got {_VALUE!r}")


def examples(count: int) -> int:
    """`count` examples, scaled (at least 20)."""
    return max(20, round(count * SCALE))
