"""The exception a rank recorded with torch's `@record` (TORCHELASTIC_ERROR_FILE).

torch.distributed.elastic's error handler writes
`{"message": {"message": "Type: text", "extraInfo": {"py_callstack": "Traceback ..."}}}`;
the failure file then shows the exception and the last frames instead of the stderr tail.
"""

import contextlib
import json
from pathlib import Path
from typing import Any

ERROR_FILE_VARIABLE = "TORCHELASTIC_ERROR_FILE"
TRACEBACK_LINES = 12  # the last frames and the exception line
_MAX_BYTES = 1_000_000  # a file larger than this was not written by @record


def read_error_file(path: Path) -> tuple[str, ...]:
    """The recorded error as lines ending with the exception; () when there is none."""
    try:
        with path.open("rb") as handle:
            data = json.loads(handle.read(_MAX_BYTES))
    except (OSError, ValueError):
        return ()
    return error_lines(data)


def error_lines(data: Any) -> tuple[str, ...]:
    message: Any = data.get("message") if isinstance(data, dict) else None
    callstack = ""
    if isinstance(message, dict):
        extra = message.get("extraInfo")
        if isinstance(extra, dict) and isinstance(extra.get("py_callstack"), str):
            callstack = extra["py_callstack"]
        message = message.get("message")
    if not isinstance(message, str) or not message.strip():
        return ()
    lines = [line for line in callstack.rstrip().splitlines() if line.strip()]
    lines = lines[-TRACEBACK_LINES:]
    if not lines or lines[-1].strip() != message.strip().splitlines()[-1].strip():
        lines.append(message.strip())
    return tuple(lines)


def clear_error_file(path: Path) -> None:
    """A file left from an earlier run of the rank must not be taken for this run's error."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
