"""The job's result files: /opt/ml/output/failure or /opt/ml/output/success."""

import contextlib
from pathlib import Path

from ringleader import paths


def write_result(exit_code: int, failure: str | None, output_dir: Path = paths.OUTPUT_DIR) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    failure_file = output_dir / paths.FAILURE_FILE.name
    success_file = output_dir / paths.SUCCESS_FILE.name
    if exit_code == 0:
        with contextlib.suppress(FileNotFoundError):
            failure_file.unlink()
        success_file.write_text("")
        return
    with contextlib.suppress(FileNotFoundError):
        success_file.unlink()
    text = failure or f"The job failed with exit code {exit_code}.\n"
    temporary = failure_file.with_suffix(".tmp")
    temporary.write_text(text)
    temporary.replace(failure_file)
