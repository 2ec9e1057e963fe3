"""Artifacts at the end of every job: each host's output and model, archived and delivered.

Before the job starts (only when `ringleader_output_uri` is set):

    uri = parse_output_uri(value)      # ConfigError naming ringleader_output_uri
    check_output_uri(uri)              # the bucket exists / the directory can be made

At the end of every job, on every host, after the result files are written (only when
`ringleader_output_uri` is set):

    report = collect(OUTPUT_DIR, MODEL_DIR, uri, host, log=log.log)  # each retry: a line
    for line in report.summary_lines():
        log.log(line)
    append_note(FAILURE_FILE, report.failure_note())

`collect` never raises for a delivery problem and never changes the job's exit code. Its
retries and failures go to `log` as they happen (the entry point passes the toolkit's log,
`ringleader.output.log.log`), so that this package need not import ringleader.output. The output URI
itself is configuration (ringleader.config.output_uri), re-exported here.
"""

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from ringleader.artifacts.archive import (
    MODEL_ARCHIVE,
    OUTPUT_ARCHIVE,
    Archive,
    ArchiveError,
    build_archive,
    verify_archive,
)
from ringleader.artifacts.delivery import (
    ClientFactory,
    Log,
    TransferSettings,
    check_output_uri,
    deliver,
    make_s3_client,
)
from ringleader.artifacts.manifest import MANIFEST_NAME
from ringleader.artifacts.report import ArchiveResult, DeliveryReport, append_note
from ringleader.aws.redact import redact, secret_values
from ringleader.config.output_uri import OutputUri, parse_output_uri
from ringleader.core import paths

MODEL_DIR = paths.MODEL_DIR
WORK_DIR = paths.ML_ROOT / "artifacts"  # archives are built here; failed ones stay here

__all__ = [
    "MANIFEST_NAME",
    "MODEL_ARCHIVE",
    "MODEL_DIR",
    "OUTPUT_ARCHIVE",
    "WORK_DIR",
    "Archive",
    "ArchiveError",
    "ArchiveResult",
    "DeliveryReport",
    "OutputUri",
    "TransferSettings",
    "append_note",
    "build_archive",
    "check_output_uri",
    "collect",
    "deliver",
    "parse_output_uri",
    "verify_archive",
]


def collect(
    output_dir: Path,
    model_dir: Path,
    uri: OutputUri,
    host: str,
    *,
    work_dir: Path = WORK_DIR,
    settings: TransferSettings | None = None,
    client_factory: ClientFactory = make_s3_client,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    log: Log,
    secrets: Iterable[str] | None = None,
) -> DeliveryReport:
    """Build output.tar.gz (of `output_dir`) and model.tar.gz (of `model_dir`) and deliver them.

    An archive that cannot be built is reported as not delivered; the other still goes.
    `log` receives a line per retry and failure.
    """
    shown = tuple(secrets) if secrets is not None else secret_values(os.environ)
    archives: list[Archive] = []
    failures: list[ArchiveResult] = []
    for name, source in ((OUTPUT_ARCHIVE, output_dir), (MODEL_ARCHIVE, model_dir)):
        try:
            archives.append(build_archive(source, name, work_dir))
        except (ArchiveError, OSError) as error:
            failures.append(
                ArchiveResult(
                    name=name,
                    destination=uri.destination(host, name),
                    error=redact(f"could not build the archive: {error}", shown),
                )
            )
    report = deliver(
        archives,
        uri,
        host,
        settings=settings,
        client_factory=client_factory,
        sleep=sleep,
        clock=clock,
        log=log,
        secrets=shown,
    )
    order = {OUTPUT_ARCHIVE: 0, MODEL_ARCHIVE: 1}
    results = sorted((*report.results, *failures), key=lambda result: order[result.name])
    return DeliveryReport(report.uri, host, tuple(results))
