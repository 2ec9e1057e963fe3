"""Pure root-cause selection: from what every rank recorded to one exit code and one message.

When one rank fails, mpirun terminates all the others, and under Horovod they fail by
themselves moments later ("Horovod has been shut down"), sometimes before the failing rank has
finished exiting. The root cause is therefore the rank that failed first without having been
told to stop and without such a message; the others are only a fallback.
"""

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ringleader.core import exitcodes
from ringleader.core.records import RankRecord

FAILURE_FILE_LIMIT = 1024  # SageMaker shows the first 1024 bytes of the failure file


@dataclass(frozen=True)
class HostLoss:
    """A host that vanished, went silent or spoke garbage while the job ran."""

    host: str
    reason: str
    last_heard: float  # time.time() when it was last heard from: the loss happened after this
    ranks: tuple[int, ...] = ()  # its ranks that never reported an end
    protocol_error: bool = False

    def describe(self) -> str:
        ranks = ""
        if self.ranks:
            listed = ", ".join(str(rank) for rank in self.ranks)
            ranks = f" (rank{'s' if len(self.ranks) > 1 else ''} {listed})"
        return f"{self.host}{ranks}: {self.reason}"


@dataclass(frozen=True)
class Hang:
    """No rank made progress for ringleader_hang_timeout; every rank's stacks were taken."""

    headline: str  # names the culprit
    details: tuple[str, ...]  # the stacks, grouped
    at: float  # time.time() the job was found hung


@dataclass(frozen=True)
class Straggled:
    """The straggler watch named a rank and the job was stopped for it
    (ringleader_straggler_action=stop)."""

    headline: str  # names the rank, its host and its numbers
    at: float  # time.time() it was named


@dataclass(frozen=True)
class JobFacts:
    records: tuple[RankRecord, ...] = ()
    world_size: int = 0
    launcher_exit_code: int | None = None
    launcher_name: str = "mpirun"
    launcher_output_tail: tuple[str, ...] = ()
    mpi_aborts: tuple[tuple[int, int], ...] = ()  # (rank, error code) that mpirun reported
    stopped_on: str | None = None  # host where SIGTERM arrived
    stopped_at: float = 0.0  # time.time() when it arrived
    sigterm_grace: float = 0.0
    lost_hosts: tuple[HostLoss, ...] = ()  # hosts lost while the job ran, in order
    hang: Hang | None = None
    straggled: Straggled | None = None
    error_code: int | None = None  # a toolkit error before or around the launch
    error_message: str | None = None


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    failure: str | None  # None on success; otherwise the failure file's text
    root_cause: RankRecord | None = None

    @property
    def succeeded(self) -> bool:
        return self.exit_code == exitcodes.SUCCESS


# What a rank prints when it fails only because another rank failed first. Horovod's atexit
# shutdown in the failing rank fails its peers' pending collectives *before* that rank itself
# has finished exiting, so these bystanders often end first. So does gloo (torch.distributed):
# a peer's exit closes its connections while its own teardown still runs ("Connection closed
# by peer ... This is typically caused by a remote worker crashing", or "... reset by peer ...
# a remote worker hanging"; ci31 named such a rank 4 where rank 3 had exited with 3).
COLLATERAL_MARKERS = ("Horovod has been shut down", "This is typically caused by a remote worker")


# Python's report of an exception that did not end the process (an atexit hook, a __del__): the
# traceback that follows, up to its exception line, says nothing about why the rank exited.
IGNORED_EXCEPTION_PREFIX = "Exception ignored in"


def blames_another_rank(record: RankRecord) -> bool:
    """It failed with a known "another rank failed first" message.

    A marker inside an "Exception ignored in ..." block does not count: the failing rank itself
    prints one when its exit shuts Horovod down before MXNet's atexit hook runs.
    """
    return any(
        marker in line
        for line in exit_relevant_lines(record.stderr_tail)
        for marker in COLLATERAL_MARKERS
    )


def exit_relevant_lines(lines: Sequence[str]) -> list[str]:
    """The lines of a stderr tail less the "Exception ignored in" reports Python prints for
    exceptions that did not end the process (the report, its traceback and its exception line)."""
    kept: list[str] = []
    in_ignored = in_traceback = False
    for line in lines:
        if line.startswith(IGNORED_EXCEPTION_PREFIX):
            in_ignored, in_traceback = True, False
            continue
        if in_ignored:
            if line.startswith("Traceback (most recent call last)"):
                in_traceback = True
            elif not in_traceback or not line.startswith(" "):
                # the exception line ends the report (or there was no traceback at all)
                in_ignored = in_traceback = False
            continue
        kept.append(line)
    return kept


def suspicion(record: RankRecord) -> int:
    """0 for the likeliest root cause, 3 for the least likely.

    0: failed on its own. 1: was being stopped, yet exited with a code of its own rather than
    from the stop (a rank calling MPI_Abort is stopped by mpirun while it exits). 2: ended by
    the stop (a signal, or 128+SIGTERM) without blaming anyone: under Horovod the failing rank
    itself can be caught by mpirun's stop while its shutdown is still running. 3: failed saying
    another rank failed first: by its own word not the cause; or its wrapper was killed before
    it could say anything (the launcher's teardown).
    """
    if blames_another_rank(record) or record.unreported:
        return 3
    if not record.terminated:
        return 0
    if record.signal is None and record.exit_code != exitcodes.SIGTERM_EXIT:
        return 1
    return 2


def root_cause(
    records: Sequence[RankRecord], collateral: frozenset[int] = frozenset()
) -> RankRecord | None:
    """The likeliest cause; the ranks in `collateral` were taken down by another's failure."""
    failed = [record for record in records if record.failed]
    if not failed:
        return None
    return min(
        failed,
        key=lambda record: (_suspicion(record, collateral), record.ended_at, record.rank),
    )


def _suspicion(record: RankRecord, collateral: frozenset[int]) -> int:
    return 3 if record.rank in collateral else suspicion(record)


# Open MPI 5 ends the other ranks of a job one rank aborted (MPI_Abort) through a PMIx event:
# each process's default error handler then exits with MPI_ERR_UNKNOWN, silently (its message
# goes to the dying daemon), often before the aborting rank's own end and before any stop
# reached it. Measured with Open MPI 5.0.7, 3 hosts x 2 ranks, rank 4 aborting with code 3.
MPI_ERR_UNKNOWN = 14


def abort_bystanders(records: Sequence[RankRecord], aborts: dict[int, int]) -> frozenset[int]:
    """Ranks that ended as Open MPI 5's bystanders of another rank's MPI_Abort: exit code
    MPI_ERR_UNKNOWN, no signal, nothing on stderr, while mpirun reported another rank's
    abort."""
    if not aborts:
        return frozenset()
    return frozenset(
        record.rank
        for record in records
        if record.rank not in aborts
        and record.exit_code == MPI_ERR_UNKNOWN
        and record.signal is None
        and not record.stderr_tail
        and not record.error
    )


def decide(facts: JobFacts) -> Outcome:
    """The job's exit code and failure text. The first cause wins: a toolkit error, then a
    stop from outside, a straggler stopped, a hang or a lost host (whichever came first), then
    the root-cause rank;
    ranks taken down after the cause (by ringleader, mpirun or Horovod) are never blamed."""
    if facts.error_code is not None:
        return Outcome(facts.error_code, truncate(facts.error_message or "toolkit error"))
    first_loss = min((loss.last_heard for loss in facts.lost_hosts), default=None)
    hang = facts.hang
    straggled = facts.straggled
    if (
        straggled is not None
        and (facts.stopped_on is None or straggled.at < facts.stopped_at)
        and (first_loss is None or straggled.at < first_loss)
        and (hang is None or straggled.at < hang.at)
    ):
        return Outcome(exitcodes.STRAGGLER, truncate(straggled.headline))
    if (
        hang is not None
        and (facts.stopped_on is None or hang.at < facts.stopped_at)
        and (first_loss is None or hang.at < first_loss)
    ):
        title = "Every rank's stacks are in output/data/hang/; in short:"
        return Outcome(exitcodes.HUNG, truncate(hang.headline, hang.details, title, first=True))
    stopped_first = first_loss is None or facts.stopped_at <= first_loss
    if facts.stopped_on is not None and stopped_first:
        headline = (
            f"Job stopped by SIGTERM received on host {facts.stopped_on}; every rank was sent "
            f"SIGTERM and given {facts.sigterm_grace:g} s before SIGKILL."
        )
        return Outcome(exitcodes.SIGTERM_EXIT, truncate(headline))
    aborts = dict(facts.mpi_aborts)
    records = with_abort_codes(facts.records, aborts)
    collateral = abort_bystanders(records, aborts)
    cause = root_cause(records, collateral)
    if first_loss is not None and not (
        cause is not None and _suspicion(cause, collateral) <= 1 and cause.ended_at < first_loss
    ):
        return lost_hosts_outcome(facts.lost_hosts)
    launcher_failed = facts.launcher_exit_code not in (None, 0)
    if cause is not None and not (launcher_failed and _suspicion(cause, collateral) >= 2):
        ran = f"It ran {cause.ended_at - cause.started_at:.1f} s."
        headline = f"{cause.describe()}. {ran}"
        if cause.error:  # the exception up front: SageMaker shows only the first 1024 bytes
            headline = f"{cause.describe()}: {cause.error[-1]}. {ran}"
            text = truncate(headline, cause.error, "Its error (recorded by @record):")
        else:
            text = truncate(headline, cause.stderr_tail, "Last lines of its stderr:")
        return Outcome(cause.exit_code, text, cause)
    if launcher_failed:
        return launcher_failure(facts)
    return Outcome(exitcodes.SUCCESS, None)


# Open MPI's report of a daemon it lost or could not start names that daemon's host so.
LOST_DAEMON = re.compile(r"Remote daemon:.* on node (\S+)")


def launcher_failure(facts: JobFacts) -> Outcome:
    """The launcher failed and no rank failed on its own: the ranks that did fail were only
    taken down by the launcher's teardown (or blamed another rank), so none is the cause."""
    missing = facts.world_size - len(facts.records)
    stopped = sorted(record.rank for record in facts.records if record.failed)
    lost_on = next(
        (match[1] for line in facts.launcher_output_tail if (match := LOST_DAEMON.search(line))),
        None,
    )
    headline = f"{facts.launcher_name} exited with code {facts.launcher_exit_code}"
    if lost_on:
        headline += f" after losing its daemon on host {lost_on}"
    if stopped:
        listed = ", ".join(str(rank) for rank in stopped)
        headline += (
            f" although no rank failed on its own (taken down with the job: {listed}; "
            f"{missing} of {facts.world_size} ranks never reported)."
        )
    else:
        headline += (
            f" although no rank reported a failure ({missing} of {facts.world_size} ranks "
            "never reported)."
        )
    return Outcome(
        exitcodes.INTERNAL_ERROR,
        truncate(headline, facts.launcher_output_tail, f"Last lines from {facts.launcher_name}:"),
    )


def with_abort_codes(
    records: Sequence[RankRecord], aborts: dict[int, int]
) -> tuple[RankRecord, ...]:
    """A rank that called MPI_Abort with its own code and was then killed by mpirun's stop
    while it exited ended with that code, not with the stop's signal."""
    adjusted = []
    for record in records:
        code = aborts.get(record.rank)
        if (
            code is not None
            and record.signal is not None
            and code not in (0, exitcodes.SIGTERM_EXIT)
            and 0 < code < 256
        ):
            record = dataclasses.replace(record, exit_code=code, signal=None)
        adjusted.append(record)
    return tuple(adjusted)


def lost_hosts_outcome(losses: Sequence[HostLoss]) -> Outcome:
    """Host loss: one documented code on every host, the lost host(s) named first."""
    ordered = sorted(losses, key=lambda loss: loss.last_heard)
    garbled = [loss for loss in ordered if loss.protocol_error]
    if garbled:
        return Outcome(
            exitcodes.PROTOCOL_ERROR,
            truncate(f"Host {garbled[0].describe()}. The job was stopped on every host."),
        )
    if len(ordered) == 1:
        headline = f"Host {ordered[0].describe()}. Every other rank was stopped."
    else:
        listed = "; ".join(loss.describe() for loss in ordered)
        headline = f"Hosts lost: {listed}. Every other rank was stopped."
    return Outcome(exitcodes.HOST_LOST, truncate(headline))


def truncate(
    headline: str, tail: Sequence[str] = (), tail_title: str = "", *, first: bool = False
) -> str:
    """The headline, then as many of the *last* tail lines as fit in the failure-file limit
    (with `first`, as many of the first ones)."""
    # Room for the newline that ends the headline.
    text = headline.encode()[: FAILURE_FILE_LIMIT - 1].decode(errors="ignore")
    if not tail:
        return text + "\n"
    budget = FAILURE_FILE_LIMIT - len(text.encode()) - len(tail_title.encode()) - 2
    kept: list[str] = []
    for line in tail if first else reversed(tail):
        cost = len(line.encode()) + 3
        if cost > budget:
            break
        kept.insert(len(kept) if first else 0, line)
        budget -= cost
    if not kept:
        return text + "\n"
    return text + "\n" + tail_title + "\n" + "".join(f"  {line}\n" for line in kept)
