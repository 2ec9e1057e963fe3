"""One atomic write: temporary name beside the target, flushed, then renamed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ringleader.core.files import atomic_output, write_atomically


def names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def test_write_replaces_the_file(tmp_path: Path) -> None:
    target = tmp_path / "failure"
    target.write_text("old")
    write_atomically(target, "new ✓\n")
    assert target.read_text(encoding="utf-8") == "new ✓\n"
    write_atomically(target, b"\x00bytes")
    assert target.read_bytes() == b"\x00bytes"
    assert names(tmp_path) == ["failure"]


def test_a_failed_write_keeps_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "model.tar.gz"
    target.write_bytes(b"earlier")
    with pytest.raises(OSError, match="disk full"), atomic_output(target, suffix=".partial") as out:
        out.write(b"half")
        assert [n for n in names(tmp_path) if n.endswith(".partial")]  # .model.tar.gz.XXXX.partial
        raise OSError("disk full")
    assert target.read_bytes() == b"earlier"
    assert names(tmp_path) == ["model.tar.gz"]


def test_mode_is_exact_and_default_follows_the_umask(tmp_path: Path) -> None:
    write_atomically(tmp_path / "private", "x", mode=0o600)
    assert stat.S_IMODE((tmp_path / "private").stat().st_mode) == 0o600
    write_atomically(tmp_path / "shared", "x", mode=0o644)
    assert stat.S_IMODE((tmp_path / "shared").stat().st_mode) == 0o644
    previous = os.umask(0o027)
    try:
        write_atomically(tmp_path / "default", "x")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "default").stat().st_mode) == 0o640
