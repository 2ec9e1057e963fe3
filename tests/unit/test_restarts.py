"""Restarts in place (ringleader_max_restarts): the budget's rules, the failure file across
attempts, and the leader's and a worker's state machines between two attempts, with the fake
collaborators of test_supervise_faults (no containers, no sleeps)."""

import dataclasses
import json
from collections.abc import Callable

import pytest

from ringleader.config.job import RestartConfig
from ringleader.core import exitcodes
from ringleader.core.attempts import (
    AttemptRecord,
    Refusal,
    failure_cause,
    refusal,
    with_history,
)
from ringleader.core.errors import ConfigError
from ringleader.core.health import FAILED as CHECK_FAILED
from ringleader.core.health import CheckResult, Report
from ringleader.core.jobfile import JobSummary, job_file_text, parse_job_file
from ringleader.core.outcome import FAILURE_FILE_LIMIT, Hang, HostLoss, JobFacts, Outcome
from ringleader.core.restart_policy import (
    CAUSES,
    DEFAULT_POLICY,
    FIELD,
    RestartPolicy,
    parse_restart_on,
)
from ringleader.launch.strategy import LaunchPlan
from ringleader.supervise.common import RunningLauncher
from ringleader.supervise.leader import Leader
from ringleader.supervise.worker import Worker, WorkerParts
from ringleader.wire.events import (
    LauncherExited,
    LeaderLost,
    LeaderMessage,
    RankEnded,
    RanksProgressed,
    RankStarted,
    SigtermReceived,
    WorkerBye,
    WorkerLost,
    WorkerReady,
)
from ringleader.wire.messages import Exit, Launched, Restart

from .test_supervise_faults import (
    HOSTS,
    SPEC,
    TIMEOUTS,
    LeaderRig,
    SpawningWorkerRig,
    Strategy,
    WorkerRig,
    record,
)

FAILED = JobFacts(records=(record(4, 3),), world_size=6)


def attempt(number: int, *, progressed: bool = True, code: int = 3) -> AttemptRecord:
    cause = None if code == 0 else f"Rank 4 on host algo-3 exited with code {code}. It ran 2.0 s."
    return AttemptRecord(number, 1000.0 + number, 1002.0 + number, code, cause, HOSTS, progressed)


# ----------------------------------------------------------------------------- the budget
def test_a_failed_rank_or_a_hang_is_restarted_until_the_budget_is_spent() -> None:
    assert refusal([attempt(0)], FAILED, max_restarts=2) is None
    assert refusal([attempt(0), attempt(1)], FAILED, max_restarts=2) is None
    assert refusal([attempt(0), attempt(1), attempt(2)], FAILED, 2) == Refusal(
        "no restart left (ringleader_max_restarts 2)", spent=True
    )
    hung = JobFacts(hang=Hang("Rank 4 waits in train.py:12", (), 1003.0))
    assert failure_cause(hung) == "hang"
    assert refusal([attempt(0, code=exitcodes.HUNG)], hung, max_restarts=1) is None


@pytest.mark.parametrize(
    "facts",
    [
        JobFacts(error_code=78, error_message="Configuration error in x: y"),
        JobFacts(error_code=69, error_message="Only 4 of 6 ranks started"),
        JobFacts(records=(record(4, 3),), stopped_on="algo-2", stopped_at=1003.0),
        JobFacts(records=(record(4, 0),)),  # nothing failed: the launcher's own failure
    ],
    ids=["configuration", "a host never started", "SIGTERM", "no rank failed"],
)
def test_what_a_restart_cannot_cure_is_never_restarted(facts: JobFacts) -> None:
    assert failure_cause(facts) is None
    assert refusal([attempt(0)], facts, max_restarts=5) == Refusal(
        "not a failure a restart can cure"
    )


def test_a_lost_host_is_not_restarted_in_place() -> None:
    facts = JobFacts(records=(record(4, 3),), lost_hosts=(HostLoss("algo-3", "gone", 1002.0),))
    assert failure_cause(facts) == "lost-host"
    refused = refusal([attempt(0)], facts, max_restarts=5)
    assert refused is not None and not refused.do_not_retry
    assert "only a spare" in refused.why


def test_two_attempts_in_a_row_without_progress_end_the_restarts() -> None:
    """A job that fails as it starts fails so every time (pytorch#60910): the second such
    attempt in a row ends the restarts, whatever budget is left; one alone does not."""
    assert refusal([attempt(0, progressed=False)], FAILED, 5) is None
    assert refusal([attempt(0), attempt(1, progressed=False)], FAILED, 5) is None
    stuck = [attempt(0), attempt(1, progressed=False), attempt(2, progressed=False)]
    assert refusal(stuck, FAILED, 5) == Refusal(
        "2 attempts in a row failed before any progress", do_not_retry=True
    )
    between = [attempt(0, progressed=False), attempt(1), attempt(2, progressed=False)]
    assert refusal(between, FAILED, 5) is None


def test_success_ends_the_job() -> None:
    assert refusal([attempt(0), attempt(1, code=0)], JobFacts(), 5) == Refusal("it succeeded")


# ----------------------------------------------------------------------------- the failure file
def test_the_failure_file_names_the_final_cause_then_every_earlier_attempt() -> None:
    final = Outcome(
        3, "Rank 4 on host algo-3 exited with code 3. It ran 2.0 s.\nLast lines:\n  boom\n"
    )
    earlier = [attempt(0, progressed=False), attempt(1)]
    text = with_history(final, earlier).failure
    assert text is not None
    assert text.splitlines() == [
        "Rank 4 on host algo-3 exited with code 3. It ran 2.0 s.",
        "Earlier attempt 0: exit code 3 (before any progress): Rank 4 on host algo-3 exited "
        "with code 3. It ran 2.0 s.",
        "Earlier attempt 1: exit code 3: Rank 4 on host algo-3 exited with code 3. It ran 2.0 s.",
        "Last lines:",
        "  boom",
    ]
    assert with_history(final, []) == final
    assert with_history(Outcome(0, None), earlier) == Outcome(0, None)


def test_many_attempts_still_fit_the_failure_file() -> None:
    final = Outcome(3, "Rank 4 failed.\n" + "".join(f"  line {n}\n" for n in range(100)))
    text = with_history(final, [attempt(n) for n in range(50)]).failure
    assert text is not None and len(text.encode()) <= FAILURE_FILE_LIMIT
    assert text.startswith("Rank 4 failed.\nEarlier attempt 0: exit code 3")
    assert text.endswith("\n")


def test_job_json_lists_every_attempt_and_reads_it_back() -> None:
    summary = JobSummary(0, None, HOSTS, 6, None, (), attempts=(attempt(0), attempt(1, code=0)))
    data = json.loads(job_file_text(summary))
    assert [item["attempt"] for item in data["attempts"]] == [0, 1]
    assert data["attempts"][1]["cause"] is None and data["attempts"][0]["exit_code"] == 3
    assert parse_job_file(job_file_text(summary)).attempts == summary.attempts
    data["attempts"].append({"attempt": "x"})
    read = parse_job_file(json.dumps(data))
    assert len(read.attempts) == 2 and read.problems[0].startswith("an attempt cannot be read")


# ----------------------------------------------------------------------------- the leader
class RestartingRig(LeaderRig):
    def __init__(
        self,
        max_restarts: int,
        backoff: float,
        policy: RestartPolicy = DEFAULT_POLICY,
        check_health: Callable[[int], Report] = lambda attempt: (),
    ) -> None:
        super().__init__()
        self.launches: list[float] = []  # when each attempt's launcher started
        start = self.leader_parts.start_launcher

        def counting(plan: LaunchPlan) -> RunningLauncher:
            self.launches.append(self.clock.now)
            return start(plan)

        parts = dataclasses.replace(
            self.leader_parts, start_launcher=counting, check_health=check_health
        )
        restart = RestartConfig(max_restarts, backoff, policy)
        self.leader = Leader(HOSTS[0], HOSTS[1:], TIMEOUTS, parts, restart)
        self.hellos()


def restarting_rig(
    max_restarts: int = 2,
    backoff: float = 1.0,
    restart_on: str | None = None,
    check_health: Callable[[int], Report] = lambda attempt: (),
) -> RestartingRig:
    policy = RestartPolicy() if restart_on is None else parse_restart_on(FIELD, restart_on)
    return RestartingRig(max_restarts, backoff, policy, check_health)


def fail_once(
    rig: LeaderRig, start: float, attempt: int, progress: bool = True, signal: int | None = None
) -> None:
    """Attempt `attempt` from `start`: every rank starts, rank 4 fails with 3 (or is killed by
    `signal`) and the others are stopped; the launcher exits."""
    rig.events.at(start, *(RankStarted(rank, HOSTS[rank // 2], attempt) for rank in range(6)))
    if progress:
        rig.events.at(start + 0.5, RanksProgressed("algo-3", (4,)))
    ended = rig.clock.now + start + 1.0
    code = 3 if signal is None else exitcodes.signal_exit_code(signal)
    failed = dataclasses.replace(record(4, code, signal=signal, ended=ended), attempt=attempt)
    rig.events.at(start + 1.0, RankEnded(failed))
    stopped = [
        dataclasses.replace(record(rank, 143, terminated=True, ended=ended + 0.1), attempt=attempt)
        for rank in (0, 1, 2, 3, 5)
    ]
    rig.events.at(start + 1.1, *(RankEnded(each) for each in stopped), LauncherExited(3))


def succeed(rig: LeaderRig, start: float, attempt: int) -> None:
    rig.events.at(start, *(RankStarted(rank, HOSTS[rank // 2], attempt) for rank in range(6)))
    done = [dataclasses.replace(record(rank, 0), attempt=attempt) for rank in range(6)]
    rig.events.at(start + 1.0, *(RankEnded(each) for each in done), LauncherExited(0))
    rig.events.at(start + 1.1, WorkerBye("algo-2"), WorkerBye("algo-3"))


def ready(rig: LeaderRig, when: float, attempt: int) -> None:
    rig.events.at(when, WorkerReady("algo-2", attempt), WorkerReady("algo-3", attempt))


def test_a_rank_that_fails_once_is_restarted_in_place_and_the_job_succeeds() -> None:
    rig = restarting_rig()
    fail_once(rig, 1.0, attempt=0)
    ready(rig, 2.5, attempt=1)
    succeed(rig, 5.0, attempt=1)
    outcome = rig.run()
    assert outcome == Outcome(0, None)
    assert len(rig.launches) == 2
    # the next attempt starts once the backoff has passed and every worker is ready
    assert rig.launches[1] - rig.launches[0] >= 1.0
    assert [message for message in rig.link.sent if message["type"] == "restart"] == [
        {"type": "restart", "attempt": 1}
    ]
    assert rig.local.attempts_begun == 1
    assert [(each.attempt, each.exit_code) for each in rig.leader.attempts] == [(0, 3), (1, 0)]
    assert rig.leader.attempts[0].cause is not None
    assert rig.leader.attempts[0].cause.startswith("Rank 4 on host algo-3 exited with code 3")
    assert all(each.attempt == 1 for each in rig.leader.records)
    assert any("restarting every rank in 1 s" in line for line in rig.logs)


def test_stale_events_of_the_last_attempt_are_ignored() -> None:
    rig = restarting_rig()
    fail_once(rig, 1.0, attempt=0)
    ready(rig, 2.5, attempt=1)
    # a rank of attempt 0 whose end arrives late must not count for attempt 1
    late = dataclasses.replace(record(0, 9, ended=1005.0), attempt=0)
    rig.events.at(5.0, RankEnded(late))
    succeed(rig, 5.5, attempt=1)
    assert rig.run() == Outcome(0, None)


def test_a_rank_that_fails_every_time_ends_with_its_code_after_the_budget() -> None:
    rig = restarting_rig(max_restarts=2)
    fail_once(rig, 1.0, attempt=0)
    ready(rig, 2.5, attempt=1)
    fail_once(rig, 5.0, attempt=1)
    ready(rig, 6.5, attempt=2)
    fail_once(rig, 9.0, attempt=2)
    rig.events.at(12.0, WorkerBye("algo-2"), WorkerBye("algo-3"))
    outcome = rig.run()
    assert outcome.exit_code == 3
    assert rig.link.final is not None and rig.link.final[0] == 3
    lines = (outcome.failure or "").splitlines()
    assert lines[0].startswith("Rank 4 on host algo-3 exited with code 3")
    assert lines[1] == "Not restarted: no restart left (ringleader_max_restarts 2)."
    assert lines[2].startswith("Earlier attempt 0: exit code 3 (rank-failure): Rank 4")
    assert lines[3].startswith("Earlier attempt 1: exit code 3 (rank-failure): Rank 4")
    assert len(rig.leader.attempts) == 3
    assert [each.restart for each in rig.leader.attempts] == [
        "allowed",
        "allowed",
        "no restart left (ringleader_max_restarts 2)",
    ]
    assert any("no restart: no restart left (ringleader_max_restarts 2)" in x for x in rig.logs)


def test_two_attempts_without_progress_stop_the_restarts_early() -> None:
    """Restarting cannot help: the job ends with the do-not-retry code on every host, the
    rank's own code named in the failure file."""
    rig = restarting_rig(max_restarts=5)
    fail_once(rig, 1.0, attempt=0, progress=False)
    ready(rig, 2.5, attempt=1)
    fail_once(rig, 5.0, attempt=1, progress=False)
    rig.events.at(8.0, WorkerBye("algo-2"), WorkerBye("algo-3"))
    outcome = rig.run()
    assert outcome.exit_code == exitcodes.DO_NOT_RETRY
    assert rig.link.final is not None and rig.link.final[0] == exitcodes.DO_NOT_RETRY
    assert len(rig.leader.attempts) == 2
    lines = (outcome.failure or "").splitlines()
    assert lines[0].startswith("Rank 4 on host algo-3 exited with code 3")
    assert lines[1] == (
        "Not retried: 2 attempts in a row failed before any progress; exit code 79 "
        "(do not retry) instead of 3."
    )
    assert "(before any progress)" in lines[2]
    assert any("2 attempts in a row failed before any progress" in line for line in rig.logs)


def test_sigterm_during_the_backoff_ends_the_job_with_143_and_no_further_attempt() -> None:
    rig = restarting_rig(backoff=30.0)
    fail_once(rig, 1.0, attempt=0)
    ready(rig, 2.5, attempt=1)
    rig.events.at(4.0, SigtermReceived("algo-2"))
    rig.events.at(4.5, WorkerBye("algo-2"), WorkerBye("algo-3"))
    outcome = rig.run()
    assert outcome.exit_code == exitcodes.SIGTERM_EXIT
    lines = (outcome.failure or "").splitlines()
    assert lines[0].startswith("Job stopped by SIGTERM received on host algo-2")
    assert lines[1].startswith("Earlier attempt 0: exit code 3")
    assert len(rig.leader.attempts) == 1
    assert rig.link.final is not None and rig.link.final[0] == exitcodes.SIGTERM_EXIT
    assert len(rig.launches) == 1
    assert rig.clock.now < 1000.0 + 30.0  # it did not sit out the backoff


@pytest.mark.parametrize("max_restarts", [2, 0], ids=["restarts", "no restarts"])
def test_sigterm_while_the_last_records_settle_ends_the_job_with_143_and_no_restart(
    max_restarts: int,
) -> None:
    """mpirun has exited after rank 4 failed; 0.05 s later, while the other ranks' records are
    still on their way, a stop from outside arrives: the job was told to stop, so it ends with
    143 on every host, with no further attempt (it was restarted, or ended 3, before)."""
    rig = restarting_rig(max_restarts)
    rig.events.at(1.0, *(RankStarted(rank, HOSTS[rank // 2]) for rank in range(6)))
    rig.events.at(1.5, RanksProgressed("algo-3", (4,)))
    rig.events.at(2.0, RankEnded(record(4, 3, ended=1002.0)))
    stopped = [RankEnded(record(rank, 143, terminated=True, ended=1002.1)) for rank in range(4)]
    rig.events.at(2.1, *stopped, LauncherExited(3))
    rig.events.at(2.15, SigtermReceived("algo-2"))
    rig.events.at(2.3, RankEnded(record(5, 143, terminated=True, ended=1002.2)))
    rig.events.at(2.5, WorkerBye("algo-2"), WorkerBye("algo-3"))
    outcome = rig.run()
    assert outcome.exit_code == exitcodes.SIGTERM_EXIT
    assert (outcome.failure or "").startswith("Job stopped by SIGTERM received on host algo-2")
    assert len(rig.launches) == 1 and len(rig.leader.attempts) == 1
    assert rig.link.final is not None and rig.link.final[0] == exitcodes.SIGTERM_EXIT
    assert any(line.startswith("SIGTERM received on algo-2") for line in rig.logs)


def test_a_worker_lost_between_attempts_ends_the_job_with_the_host_loss_code() -> None:
    rig = restarting_rig()
    fail_once(rig, 1.0, attempt=0)
    rig.events.at(2.5, WorkerReady("algo-2", 1), WorkerLost("algo-3", "no pulse for 10 s"))
    rig.events.at(3.0, WorkerBye("algo-2"))
    outcome = rig.run()
    assert outcome.exit_code == exitcodes.HOST_LOST
    assert (outcome.failure or "").startswith("Host algo-3: no pulse for 10 s.")


def test_a_worker_never_ready_ends_the_job_within_the_startup_timeout() -> None:
    rig = restarting_rig()
    fail_once(rig, 1.0, attempt=0)
    rig.events.at(2.5, WorkerReady("algo-2", 1))
    rig.events.at(40.0, WorkerBye("algo-2"), WorkerBye("algo-3"))
    outcome = rig.run()
    assert outcome.exit_code == exitcodes.HOST_UNREACHABLE
    assert (outcome.failure or "").startswith(
        "Host(s) algo-3 did not get ready for attempt 1 within 30 s (ringleader_startup_timeout)."
    )


def test_without_restarts_a_failure_ends_the_job_as_before() -> None:
    rig = restarting_rig(max_restarts=0)
    fail_once(rig, 1.0, attempt=0)
    rig.events.at(3.0, WorkerBye("algo-2"), WorkerBye("algo-3"))
    outcome = rig.run()
    assert outcome.exit_code == 3
    assert len((outcome.failure or "").splitlines()) == 1  # no earlier attempt to name
    assert not [message for message in rig.link.sent if message["type"] == "restart"]
    assert not any("no restart" in line for line in rig.logs)


# ----------------------------------------------------------------------------- a worker
def test_a_worker_ends_its_last_attempt_then_says_ready_and_launches_again() -> None:
    rig = WorkerRig()
    rig.events.at(1.0, LeaderMessage(Launched()), RankStarted(2, "algo-2"))
    rig.events.at(2.0, RankEnded(record(2, 3)))
    rig.events.at(3.0, LeaderMessage(Restart(1)))
    rig.events.at(4.0, LeaderMessage(Launched()), RankStarted(2, "algo-2", 1))
    rig.events.at(5.0, LeaderMessage(Exit(0, None)))
    rig.events.at(5.1, LeaderLost("control connection closed (connection closed)"))
    outcome = rig.run()
    assert outcome == Outcome(0, None)
    assert rig.local.reaped >= 1 and rig.local.attempts_begun == 1
    sent = [message["type"] for message in rig.link.sent]
    assert sent.index("ready") < len(sent) - 1
    assert {"type": "ready", "host": "algo-2", "attempt": 1} in rig.link.sent
    assert {"type": "rank-start", "rank": 2, "host": "algo-2", "attempt": 1} in rig.link.sent


def test_the_strategy_is_asked_for_each_attempts_launcher() -> None:
    asked: list[int] = []

    @dataclasses.dataclass(frozen=True)
    class Counting(Strategy):
        def prepare(self, attempt: int = 0):  # type: ignore[no-untyped-def]
            asked.append(attempt)
            return super().prepare(attempt)

    rig = restarting_rig()
    fail_once(rig, 1.0, attempt=0)
    ready(rig, 2.5, attempt=1)
    succeed(rig, 5.0, attempt=1)
    outcome = rig.leader.run(Counting())
    rig.leader.tell_workers(outcome)
    assert outcome == Outcome(0, None) and asked == [0, 1]


# ----------------------------------------------------------------------------- earlier runs
def test_earlier_attempts_of_a_cluster_job_continue_the_numbering_and_the_history() -> None:
    earlier = (dataclasses.replace(attempt(0), lost=("algo-3",)),)
    rig = LeaderRig()
    restart = RestartConfig(max_restarts=2, history=earlier)
    rig.leader = Leader(HOSTS[0], HOSTS[1:], TIMEOUTS, rig.leader_parts, restart)
    rig.hellos()
    fail_once(rig, 1.0, attempt=1)
    ready(rig, 2.5, attempt=2)
    fail_once(rig, 5.0, attempt=2)
    rig.events.at(8.0, WorkerBye("algo-2"), WorkerBye("algo-3"))
    outcome = rig.run()
    assert [each.attempt for each in rig.leader.attempts] == [0, 1, 2]
    assert rig.leader.attempts[0].lost == ("algo-3",)
    lines = (outcome.failure or "").splitlines()
    assert lines[1] == "Not restarted: no restart left (ringleader_max_restarts 2)."
    assert [line.split(":")[0] for line in lines[2:4]] == [
        "Earlier attempt 0",
        "Earlier attempt 1",
    ]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("[{", "expected a JSON list of attempts"),
        ('{"attempt": 0}', "expected a JSON list of attempts"),
        ('[{"attempt": 0}]', "expected a JSON list of attempts"),
        (json.dumps([attempt(1).to_json()]), "expected attempts numbered 0, 1, ... in order"),
    ],
)
def test_bad_earlier_attempts_are_a_configuration_error(value: str, problem: str) -> None:
    from ringleader.core.attempts import parse_history
    from ringleader.core.errors import ConfigError

    with pytest.raises(ConfigError) as error:
        parse_history("ringleader_earlier_attempts", value)
    assert error.value.field == "ringleader_earlier_attempts"
    assert problem in str(error.value)
    assert parse_history("x", json.dumps([attempt(0).to_json()])) == (attempt(0),)


# ----------------------------------------------------------------------------- the options
@pytest.mark.parametrize("command", [["local"], ["cluster", "run", "-H", "a"]])
@pytest.mark.parametrize(
    ("flag", "value", "problem"),
    [
        ("--max-restarts", "-1", "expected a whole number of at least 0, got '-1'"),
        ("--max-restarts", "two", "expected a whole number of at least 0, got 'two'"),
        ("--max-restarts", "1.5", "expected a whole number of at least 0, got '1.5'"),
        ("--restart-backoff", "-2", "expected a number of seconds from 0 to 1e+06, got '-2'"),
        ("--restart-backoff", "inf", "expected a number of seconds from 0 to 1e+06, got 'inf'"),
    ],
)
def test_bad_restart_options_are_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str], command: list[str], flag: str, value: str, problem: str
) -> None:
    from ringleader.tools.cli import build_parser

    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*command, flag, value, "--", "x"])
    assert exited.value.code == 2
    assert f"argument {flag}: {problem}" in capsys.readouterr().err


def test_restart_options_become_the_jobs_settings() -> None:
    from ringleader.tools.cli import build_parser
    from ringleader.tools.local.options import restart_settings

    local = ["local", "--source-dir", ".", "--entry-point", "train.py"]
    args = build_parser().parse_args([*local, "--max-restarts", "3", "--restart-backoff", "0"])
    assert restart_settings(args) == {"max_restarts": "3", "restart_backoff": "0"}
    assert restart_settings(build_parser().parse_args(local)) == {}


def test_a_spawning_worker_runs_each_attempts_ranks_from_the_leaders_spec() -> None:
    rig = SpawningWorkerRig()
    again = dataclasses.replace(SPEC, attempt=1)
    rig.events.at(1.0, LeaderMessage(Launched(SPEC)), RankStarted(2, "algo-2"))
    rig.events.at(2.0, RankEnded(record(2, 3)), LauncherExited(3))
    rig.events.at(3.0, LeaderMessage(Restart(1)))
    rig.events.at(4.0, LeaderMessage(Launched(again)), RankStarted(2, "algo-2", 1))
    rig.events.at(5.0, LauncherExited(0), LeaderMessage(Exit(0, None)))
    assert rig.run() == Outcome(0, None)
    assert rig.plans == [SPEC, again]
    assert rig.local.attempts_begun == 1


def test_a_worker_stopped_by_sigterm_starts_no_ranks_when_a_restart_crosses_the_stop() -> None:
    """SIGTERM on this host while the leader restarts: the stop stays (a rank mpirun's daemon
    starts here anyway is stopped at once) and no spawned rank is started; the leader, told
    of the SIGTERM, ends the job with 143."""
    rig = SpawningWorkerRig()
    rig.events.at(1.0, LeaderMessage(Launched(SPEC)), RankStarted(2, "algo-2"))
    rig.events.at(2.0, RankEnded(record(2, 3)), LauncherExited(3))
    rig.events.at(2.5, SigtermReceived("algo-2"))
    rig.events.at(3.0, LeaderMessage(Restart(1)))
    rig.events.at(3.5, LeaderMessage(Launched(dataclasses.replace(SPEC, attempt=1))))
    rig.events.at(4.0, LeaderMessage(Exit(143, "Job stopped by SIGTERM ...\n")))
    assert rig.run().exit_code == 143
    assert rig.plans == [SPEC]
    assert rig.local.attempts_begun == 0
    assert {"type": "sigterm", "host": "algo-2"} in rig.link.sent
    assert {"type": "ready", "host": "algo-2", "attempt": 1} in rig.link.sent


# ----------------------------------------------------------------------------- the policy
def test_a_policy_of_codes_restarts_after_a_segfault_but_not_after_a_python_exception() -> None:
    """ringleader_restart_on=codes:137,139: a rank killed by SIGSEGV (139) is restarted; the
    same rank exiting 3 the next time ends the job with the do-not-retry code, its own code
    named, and job.json's attempts say what the policy allowed."""
    rig = restarting_rig(max_restarts=5, restart_on="codes:137,139")
    fail_once(rig, 1.0, attempt=0, signal=11)
    ready(rig, 2.5, attempt=1)
    fail_once(rig, 5.0, attempt=1)
    rig.events.at(8.0, WorkerBye("algo-2"), WorkerBye("algo-3"))
    outcome = rig.run()
    assert len(rig.launches) == 2
    assert outcome.exit_code == exitcodes.DO_NOT_RETRY
    assert rig.link.final is not None and rig.link.final[0] == exitcodes.DO_NOT_RETRY
    lines = (outcome.failure or "").splitlines()
    assert lines[0].startswith("Rank 4 on host algo-3 exited with code 3.")
    assert lines[1] == (
        "Not retried: exit code 3 is not in ringleader_restart_on's codes:137,139; exit code 79 "
        "(do not retry) instead of 3."
    )
    assert lines[2].startswith("Earlier attempt 0: exit code 139 (rank-failure): Rank 4 on host")
    first, last = rig.leader.attempts
    assert (first.kind, first.restart) == ("rank-failure", "allowed")
    assert (last.kind, last.exit_code) == ("rank-failure", 3)
    assert last.restart == "exit code 3 is not in ringleader_restart_on's codes:137,139"
    summary = JobSummary(79, outcome.failure, HOSTS, 6, None, (), attempts=(first, last))
    assert parse_job_file(job_file_text(summary)).attempts == (first, last)


def test_a_policy_refusal_is_do_not_retry_even_without_restarts() -> None:
    """With no restart in place the policy still tells whatever runs the job (Slurm's requeue,
    a rerun) that retrying cannot help; a failure it allows keeps the rank's own code."""
    refused = restarting_rig(max_restarts=0, restart_on="not-codes:1,3")
    fail_once(refused, 1.0, attempt=0)
    refused.events.at(4.0, WorkerBye("algo-2"), WorkerBye("algo-3"))
    assert refused.run().exit_code == exitcodes.DO_NOT_RETRY
    allowed = restarting_rig(max_restarts=0, restart_on="not-codes:1")
    fail_once(allowed, 1.0, attempt=0)
    allowed.events.at(4.0, WorkerBye("algo-2"), WorkerBye("algo-3"))
    outcome = allowed.run()
    assert outcome.exit_code == 3
    assert len((outcome.failure or "").splitlines()) >= 1
    assert "Not re" not in (outcome.failure or "")


@pytest.mark.parametrize(
    ("restart_on", "cause", "code", "refused"),
    [
        ("rank-failure", "hang", 124, "ringleader_restart_on does not name hang"),
        ("hang", "rank-failure", 1, "ringleader_restart_on does not name rank-failure"),
        ("codes:139", "hang", 124, "ringleader_restart_on does not name hang"),
        ("hang,codes:139", "hang", 124, None),
        ("codes:137, 139 ,hang", "rank-failure", 139, None),
        (
            "not-codes:1,2",
            "rank-failure",
            2,
            "exit code 2 is in ringleader_restart_on's not-codes:1,2",
        ),
        ("rank-failure,hang", "lost-host", 75, "ringleader_restart_on does not name lost-host"),
    ],
)
def test_the_policy_names_what_it_refuses(
    restart_on: str, cause: str, code: int, refused: str | None
) -> None:
    assert parse_restart_on(FIELD, restart_on).refuses(cause, code) == refused


def test_the_default_policy_refuses_nothing_a_restart_can_cure() -> None:
    policy = RestartPolicy()
    assert policy.describe() == "rank-failure,hang,lost-host,health,straggler"
    assert all(policy.refuses(cause, code) is None for cause in CAUSES for code in (1, 139))


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (
            "segfault",
            "unknown cause 'segfault': expected rank-failure, hang, lost-host, health, straggler",
        ),
        ("rank-failure,,hang", "unknown cause ''"),
        ("codes:", "'codes:': expected exit codes from 1 to 255"),
        ("codes:1,x", "unknown cause 'x'"),
        ("codes:0", "'codes:0': expected exit codes from 1 to 255"),
        ("codes:256", "'codes:256': expected exit codes from 1 to 255"),
        ("codes:1,not-codes:2", "'not-codes:2': give one of codes: or not-codes:, once"),
        ("", "expected causes and code filters"),
        (3, "expected causes and code filters"),
    ],
)
def test_a_malformed_policy_is_a_configuration_error_naming_the_setting(
    value: object, problem: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_restart_on(FIELD, value)
    assert raised.value.field == FIELD
    assert problem in str(raised.value)


# ----------------------------------------------------------------------- health before a restart
SHM = CheckResult("/dev/shm", CHECK_FAILED, "1.0 MiB in all, at least 64.0 MiB wanted")


def test_a_worker_failing_its_checks_before_a_restart_ends_the_job_with_71() -> None:
    rig = restarting_rig(max_restarts=2)
    fail_once(rig, 1.0, attempt=0)
    rig.events.at(2.5, WorkerReady("algo-2", 1), WorkerReady("algo-3", 1, (SHM,)))
    rig.events.at(4.0, WorkerBye("algo-2"), WorkerBye("algo-3"))
    outcome = rig.run()
    assert outcome.exit_code == exitcodes.HEALTH_CHECK_FAILED
    assert len(rig.launches) == 1
    lines = (outcome.failure or "").splitlines()
    assert lines[0] == (
        "Host algo-3 failed its health check before attempt 1: /dev/shm: 1.0 MiB in all, at "
        "least 64.0 MiB wanted. Attempt 1 was not started."
    )
    assert lines[1].startswith("Earlier attempt 0: exit code 3 (rank-failure): Rank 4")
    assert rig.link.final is not None and rig.link.final[0] == exitcodes.HEALTH_CHECK_FAILED


def test_the_leaders_own_checks_run_before_each_restart() -> None:
    asked: list[int] = []

    def check(attempt: int) -> Report:
        asked.append(attempt)
        return (SHM,) if attempt == 2 else ()

    rig = restarting_rig(max_restarts=2, check_health=check)
    fail_once(rig, 1.0, attempt=0)
    ready(rig, 2.5, attempt=1)
    fail_once(rig, 5.0, attempt=1)
    ready(rig, 6.5, attempt=2)
    rig.events.at(8.0, WorkerBye("algo-2"), WorkerBye("algo-3"))
    outcome = rig.run()
    assert asked == [1, 2]
    assert outcome.exit_code == exitcodes.HEALTH_CHECK_FAILED
    assert (outcome.failure or "").startswith(
        "Host algo-1 failed its health check before attempt 2: /dev/shm: "
    )


def test_a_worker_checks_itself_after_its_last_attempt_ended_and_says_ready_with_it() -> None:
    rig = WorkerRig()
    asked: list[tuple[int, int]] = []

    def check(attempt: int) -> Report:
        asked.append((attempt, rig.local.reaped))
        return (SHM,)

    rig.worker = Worker(
        "algo-2",
        "algo-1",
        TIMEOUTS,
        WorkerParts(
            rig.events, rig.clock, rig.local, rig.link, lambda line: None, check_health=check
        ),
    )
    rig.events.at(1.0, LeaderMessage(Launched()), RankStarted(2, "algo-2"))
    rig.events.at(2.0, RankEnded(record(2, 3)))
    rig.events.at(3.0, LeaderMessage(Restart(1)))
    rig.events.at(4.0, LeaderMessage(Exit(71, "Host algo-2 failed its health check ...\n")))
    rig.events.at(4.1, LeaderLost("control connection closed (connection closed)"))
    assert rig.run().exit_code == 71
    assert asked == [(1, 1)]  # after this host's ranks of attempt 0 were reaped
    assert {
        "type": "ready",
        "host": "algo-2",
        "attempt": 1,
        "health": [SHM.to_json()],
    } in rig.link.sent
