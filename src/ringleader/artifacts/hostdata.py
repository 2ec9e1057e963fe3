"""Per-host files in /opt/ml/output/data, which SageMaker uploads merged from every host.

SageMaker puts the output/data directories of all hosts into one output.tar.gz (local mode
copies them into one directory), so two hosts writing data/metrics.jsonl overwrite each other.
Every per-host file of the toolkit goes to data/<host>/ instead.
"""

import contextlib
import filecmp
import os
import shutil
from pathlib import Path

from ringleader.artifacts.uri import path_component
from ringleader.core import paths

DATA_DIR = paths.OUTPUT_DIR / "data"
# What SageMaker itself reads in /opt/ml/output, and the result files' temporary names.
NOT_STRAY = frozenset({"data", "failure", "success", "failure.tmp", "success.tmp"})


def host_data_dir(host: str, data_dir: Path = DATA_DIR) -> Path:
    """data/<host>/: where this host's logs, metrics, timeline and autotune log belong."""
    return data_dir / path_component(host)


def keep_stray_outputs(host: str, output_dir: Path = paths.OUTPUT_DIR) -> list[Path]:
    """Link regular files written directly into /opt/ml/output into data/<host>/.

    SageMaker uploads only data/, the model and the failure file, so a Horovod timeline at
    /opt/ml/output/timeline.json would be lost. The original stays in place (hard link, or a
    copy across file systems); directories are left alone, as other tools (SageMaker Debugger)
    own theirs. A name already taken by different content gets a `.1`, `.2` ... suffix.
    Calling it again adds nothing. Returns the new paths.
    """
    target_dir = host_data_dir(host, output_dir / "data")
    added: list[Path] = []
    try:
        names = sorted(os.listdir(output_dir))
    except OSError:
        return added
    for name in names:
        source = output_dir / name
        if name in NOT_STRAY or source.is_symlink() or not source.is_file():
            continue
        target = _free_name(target_dir, name, source)
        if target is None:
            continue
        target_dir.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target)
        except OSError:
            try:
                shutil.copy2(source, target)
            except OSError:
                with contextlib.suppress(OSError):
                    target.unlink()
                continue
        added.append(target)
    return added


def _free_name(directory: Path, name: str, source: Path) -> Path | None:
    """A name in `directory` for `source`, or None when it is already there."""
    stem, dot, suffix = name.partition(".")
    for number in range(1000):
        candidate = directory / (name if number == 0 else f"{stem}.{number}{dot}{suffix}")
        if not candidate.exists():
            return candidate
        if _same(candidate, source):
            return None
    return None


def _same(first: Path, second: Path) -> bool:
    try:
        if os.path.samefile(first, second):
            return True
        return filecmp.cmp(first, second, shallow=False)
    except OSError:
        return False
