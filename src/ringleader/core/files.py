"""Files that appear whole or not at all: written under a temporary name, then renamed.

The one way this project replaces a file that someone else may read at any moment (the
failure file, job.json, an archive, a copy of an archive): the bytes go to
`.<name>.<random><suffix>` in the same directory, are flushed to disk, and the temporary file
is renamed over `path`. A reader sees the old file or the new one, never a part; when writing
fails, the temporary file is removed and `path` is left as it was.
"""

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

TEMPORARY_SUFFIX = ".tmp"
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


@contextlib.contextmanager
def atomic_output(
    path: Path, *, suffix: str = TEMPORARY_SUFFIX, mode: int | None = None
) -> Iterator[BinaryIO]:
    """A binary file to write that becomes `path` when the block ends without an exception.

    `mode`: the permission bits `path` gets; None gives what open() would (0o666 less the
    umask). The directory must exist. The temporary file is removed if the block raises.
    """
    handle, temporary = _create(path, suffix, 0o666 if mode is None else 0o600)
    try:
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_atomically(path: Path, data: bytes | str, *, mode: int | None = None) -> None:
    """Replace `path` with `data` (text is written as UTF-8) in one step; see atomic_output."""
    with atomic_output(path, mode=mode) as handle:
        handle.write(data.encode() if isinstance(data, str) else data)


def _create(path: Path, suffix: str, permissions: int) -> tuple[BinaryIO, Path]:
    for _ in range(100):
        temporary = path.with_name(f".{path.name}.{os.urandom(4).hex()}{suffix}")
        try:
            descriptor = os.open(temporary, _FLAGS, permissions)
        except FileExistsError:
            continue
        return os.fdopen(descriptor, "wb"), temporary
    raise FileExistsError(f"no free temporary name for {path}")
