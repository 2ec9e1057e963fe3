"""The leader's last steps: the verdict to every worker first, then the job's files.

The workers stay until the leader has gone (under docker compose the first container to exit
stops the others), so telling them first costs nothing and a full disk cannot keep the verdict
from them. Each file is written best-effort: a write that fails is logged with its reason and
never changes the job's exit code.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ringleader.core import paths
from ringleader.core import timeline as phases
from ringleader.core.attempts import AttemptRecord
from ringleader.core.health import Report
from ringleader.core.outcome import Outcome
from ringleader.core.progress import StatusSample
from ringleader.core.records import RankRecord
from ringleader.core.results import write_job_summary, write_result
from ringleader.core.straggler import Straggler
from ringleader.core.timeline import Timeline

Logger = Callable[[str], None]


@dataclass(frozen=True)
class ResultFiles:
    """Where the leader writes the job's result; tests point it at a temporary directory."""

    job_file: Path = paths.JOB_FILE
    output_dir: Path = paths.OUTPUT_DIR
    hang_dir: Path = paths.HANG_DIR  # every rank's stacks after a hang


class ConcludingLeader(Protocol):
    @property
    def records(self) -> tuple[RankRecord, ...]: ...

    @property
    def world_size(self) -> int: ...

    @property
    def attempts(self) -> list[AttemptRecord]: ...

    @property
    def health(self) -> dict[str, Report]: ...

    @property
    def progress(self) -> tuple[StatusSample, ...]: ...

    @property
    def stragglers(self) -> tuple[Straggler, ...]: ...

    def announce(self, outcome: Outcome) -> None: ...

    def await_confirmations(self) -> None: ...


def best_effort(what: str, write: Callable[[], object], log: Logger) -> bool:
    """Run `write`; a failure (a full disk, say) is logged with its reason, never raised."""
    try:
        write()
    except OSError as error:
        log(f"could not write {what}: {error.strerror or error}")
        return False
    return True


def write_outcome(output_dir: Path, outcome: Outcome, log: Logger) -> None:
    """This host's result file (failure or success), best-effort."""
    best_effort(
        f"the result file in {output_dir}",
        lambda: write_result(outcome.exit_code, outcome.failure, output_dir),
        log,
    )


def conclude(
    leader: ConcludingLeader,
    outcome: Outcome,
    host: str,
    hosts: Sequence[str],
    timeline: Timeline,
    files: ResultFiles,
    log: Logger,
) -> None:
    """Tell the workers, write the result files, then job.json again with their confirmations
    (the first write must not wait for them)."""
    leader.announce(outcome)
    write_outcome(files.output_dir, outcome, log)

    def write_summary() -> list[phases.Mark]:
        marks = [*timeline.marks(), *phases.rank_marks(leader.records)]
        best_effort(
            str(files.job_file),
            lambda: write_job_summary(
                files.job_file,
                outcome,
                leader.records,
                hosts,
                leader.world_size,
                marks,
                leader.attempts,
                leader.health,
                leader.progress,
                leader.stragglers,
            ),
            log,
        )
        return marks

    if (summary := phases.summary_line(write_summary())) is not None:
        log(summary)
    leader.await_confirmations()
    timeline.mark(host, phases.EXITED)
    write_summary()
