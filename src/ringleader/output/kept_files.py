"""Files a job configured to keep (Horovod's timeline and autotune log), copied after the job
into /opt/ml/output/data, the only part of /opt/ml/output that SageMaker uploads.

Which files they are is configuration (ringleader.config.horovod.files_to_keep, checked to be
under /opt/ml/output); copying them is this module's job.
"""

import shutil
from collections.abc import Sequence
from pathlib import Path

from ringleader.core import paths


def keep_files(written: Sequence[str], data_dir: Path = paths.DATA_DIR) -> list[str]:
    """Copy the files into data_dir (if not already there); notes for the log."""
    notes = []
    for name in written:
        source = Path(name)
        if not source.is_file():
            notes.append(f"warning: {source} was configured but not written")
            continue
        target = source if source.parent == data_dir else data_dir / source.name
        if target != source:
            data_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            notes.append(f"copied {source} to {target} (SageMaker uploads only output/data)")
        if "autotune" in source.name.lower() and autotune_rows(target) == 0:
            notes.append(
                f"warning: the autotune log {target} has no data rows: Horovod writes one per "
                "finished sample, which takes a few hundred steps"
            )
    return notes


def autotune_rows(path: Path) -> int:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return max(len(lines) - 1, 0)  # the first line is the header
