"""Where taken stacks go: the console, and after a hang the job's files.

Each host keeps its own ranks' stacks under /opt/ml/output/data/hang/ (SageMaker uploads it);
the leader keeps every rank's, the grouped summary and stacks.json (what `ringleader report`
reads). Every write is best-effort: a full disk never changes the verdict or the exit code.
"""

import json
from pathlib import Path

from ringleader.core.files import write_atomically
from ringleader.core.hang import HangReport, rank_text
from ringleader.core.stacks import RankStacks
from ringleader.supervise.verdict import Logger, best_effort
from ringleader.wire.messages import HANG

SUMMARY_FILE = "summary.txt"
STACKS_FILE = "stacks.json"


def rank_file(directory: Path, stacks: RankStacks) -> Path:
    return directory / f"{stacks.host}.rank-{stacks.rank}.txt"


def keep_rank_stacks(directory: Path, stacks: RankStacks, log: Logger) -> None:
    """One rank's stacks, as its host keeps them."""
    path = rank_file(directory, stacks)
    best_effort(str(path), lambda: _write(path, rank_text(stacks)), log)


def keep_report(directory: Path, report: HangReport, log: Logger) -> None:
    """Every rank's stacks, grouped, to the log; after a hang also to the leader's files."""
    for line in report.summary_lines():
        log(line)
    if report.reason != HANG:
        return
    for stacks in report.stacks:
        keep_rank_stacks(directory, stacks, log)
    summary = "".join(line + "\n" for line in report.summary_lines())
    best_effort(
        str(directory / SUMMARY_FILE), lambda: _write(directory / SUMMARY_FILE, summary), log
    )
    data = json.dumps(report.to_json(), indent=1)
    best_effort(str(directory / STACKS_FILE), lambda: _write(directory / STACKS_FILE, data), log)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, text)
