"""Reading each run of a comparison: its output (folder, archive or s3://) through the job
report's own loader, then its RunFacts."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ringleader.core.runfile import RunInfo, parse_run_file
from ringleader.tools.report.compare_model import RunFacts
from ringleader.tools.report.discover import JOB_FILE
from ringleader.tools.report.load import SourceError, find_files, read_inputs
from ringleader.tools.report.model import TextFile, build_report
from ringleader.tools.report.remote import open_run
from ringleader.tools.report.runfacts import EPOCH_METRIC, run_facts

LOCAL_INSTANCE_TYPE = "local"  # what `ringleader local` writes into resourceconfig.json


class CompareInputError(Exception):
    """A RUN cannot take part in the comparison at all (exit code 2); the message names it."""


@dataclass(frozen=True)
class Wanted:
    """What the comparison reads from every run."""

    throughput: str | None = None
    per_rank: bool = False
    epoch_metric: str = EPOCH_METRIC
    instance_type: str | None = None  # for runs that do not say, or say "local"


@dataclass(frozen=True)
class LoadedRun:
    facts: RunFacts
    metrics: tuple[str, ...]  # the names of the metrics it has
    warnings: tuple[str, ...]


def load_run(text: str, wanted: Wanted, out_dir: Path) -> LoadedRun:
    try:
        with open_run(text) as source:
            files = find_files(source, exclude=out_dir)
            if not files.jobs:
                raise CompareInputError(
                    f"--compare {text}: found no {JOB_FILE} below it; expected a job's output "
                    f"folder, its output.tar.gz or an s3:// URI of either, with the leader's "
                    f"data/{JOB_FILE} (a job whose leader never wrote it cannot be compared)"
                )
            inputs = read_inputs(source, files, text, out_dir.resolve())
            runs = [
                TextFile(str(p), (source.root / p).read_text(errors="replace"))
                for p in files.runs[:1]
            ]
    except SourceError as error:
        raise CompareInputError(f"--compare {text}: {error}") from None
    except OSError as error:
        raise CompareInputError(f"--compare {text}: cannot read: {error}") from None
    report = build_report(inputs)
    if report.job is None:
        problems = "; ".join(report.warnings) or f"{JOB_FILE} cannot be read"
        raise CompareInputError(f"--compare {text}: {problems}")
    warnings = [f"{text}: {warning}" for warning in report.warnings]
    info = _run_info(runs, warnings, text)
    if wanted.instance_type and info.instance_type in (None, LOCAL_INSTANCE_TYPE):
        info = replace(info, instance_type=wanted.instance_type)
    facts = run_facts(text, report, info, wanted.throughput, wanted.per_rank, wanted.epoch_metric)
    names = tuple(metric.name for metric in report.metrics.metrics)
    return LoadedRun(facts, names, tuple(warnings))


def _run_info(files: list[TextFile], warnings: list[str], text: str) -> RunInfo:
    if not files:
        return RunInfo()
    try:
        return parse_run_file(files[0].text)
    except ValueError as error:
        warnings.append(f"{text}: {files[0].path}: skipped: {error}")
        return RunInfo()
