"""ringleader's driver for SageMaker Python SDK v3: ModelTrainer(distributed=Ringleader(...)).

The SDK's sm_train.sh runs it in every container, in the source directory, with v3's
environment sourced (SM_DISTRIBUTED_CONFIG, SM_ENTRY_SCRIPT, SM_SOURCE_DIR, SM_HPS, ...). It
hands the job to ringleader's entry point, which reads it from that environment. It runs under
the image's python3, which need not be the Python ringleader is installed in: the standard
library only, and nothing newer than Python 3.7.
"""

from __future__ import annotations

import os
import shutil
import sys

ENTRYPOINT = "/usr/local/bin/ringleader-entrypoint"  # what `ringleader image setup` makes
DRIVER_MARK = "RINGLEADER_SDK3_DRIVER"  # ringleader.config.sdk3.DRIVER_MARK
CONFIG_ERROR = 78  # ringleader.core.exitcodes.CONFIG_ERROR
FAILURE_FILE = "/opt/ml/output/failure"


def find_entrypoint() -> str | None:
    if os.access(ENTRYPOINT, os.X_OK):
        return ENTRYPOINT
    return shutil.which("ringleader-entrypoint")


def not_installed(failure_file: str) -> int:
    message = (
        "Configuration error in training_image: ringleader is not installed in this image "
        f"(no {ENTRYPOINT}, no ringleader-entrypoint on PATH), and "
        "ModelTrainer(distributed=Ringleader(...)) runs its jobs. Prepare the image: "
        "`pip install ringleader && ringleader image setup` in its Dockerfile "
        "(docs/own-image.md), or use the SDK's own MPI(...) or Torchrun(...).\n"
    )
    sys.stderr.write(message)
    sys.stderr.flush()
    try:
        with open(failure_file, "a") as failure:
            failure.write(message)
    except OSError as error:  # the exit code still says it
        sys.stderr.write(f"cannot write {failure_file}: {error}\n")
    return CONFIG_ERROR


def main() -> int:
    entrypoint = find_entrypoint()
    if entrypoint is None:
        return not_installed(os.environ.get("SM_OUTPUT_FAILURE", FAILURE_FILE))
    sys.stdout.flush()
    os.environ[DRIVER_MARK] = "1"
    os.execv(entrypoint, [entrypoint, "train"])  # noqa: S606 (no shell: the path and "train")
    return 0  # not reached: execv replaces this process or raises


if __name__ == "__main__":
    sys.exit(main())
