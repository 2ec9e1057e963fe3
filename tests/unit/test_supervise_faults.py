"""Every row of the failure table as an event sequence: the leader's and the workers' state
machines with fake collaborators (events, clock, launcher, local ranks, links). No containers,
no sleeps: the fake clock jumps to each scripted event or deadline."""

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pytest

from ringleader.config.job import Timeouts
from ringleader.core import exitcodes
from ringleader.core.errors import ConfigError
from ringleader.core.outcome import Outcome
from ringleader.core.records import RankRecord
from ringleader.launch.spawn import SpawnSpec
from ringleader.launch.strategy import EndPolicy, LaunchPlan, spawned_policy
from ringleader.supervise.leader import (
    KILL_MARGIN_SECONDS,
    LOST_HOST_KILL_MARGIN_SECONDS,
    RECORD_SETTLE_SECONDS,
    Leader,
    LeaderParts,
)
from ringleader.supervise.worker import Worker, WorkerParts
from ringleader.wire.events import (
    Event,
    LauncherExited,
    LeaderLost,
    LeaderMessage,
    RankEnded,
    RanksExited,
    RankStarted,
    SigtermReceived,
    WorkerBye,
    WorkerHello,
    WorkerLost,
)
from ringleader.wire.messages import Exit, Launched, Message, Terminate, encode

HOSTS = ("algo-1", "algo-2", "algo-3")
TIMEOUTS = Timeouts(startup=30, sigterm_grace=30, leader_loss=10, finish=30, abort_grace=0.5)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


class ScriptedEvents:
    """Events at given clock times; waiting past a deadline moves the clock to the deadline."""

    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock
        self._script: list[tuple[float, int, Event]] = []
        self._order = 0

    def at(self, when: float, *events: Event) -> None:
        for event in events:
            self._order += 1
            self._script.append((self._clock.now + when, self._order, event))
        self._script.sort(key=lambda item: (item[0], item[1]))

    def next(self, deadline: float | None) -> Event | None:
        if not self._script or (deadline is not None and self._script[0][0] > deadline):
            assert deadline is not None, "the state machine would wait forever"
            self._clock.now = max(self._clock.now, deadline)
            return None
        when, _, event = self._script.pop(0)
        self._clock.now = max(self._clock.now, when)
        return event


@dataclass
class FakeLauncher:
    events: ScriptedEvents
    exit_code_when_killed: int = 137
    killed_at: list[float] = field(default_factory=list)
    clock: FakeClock | None = None

    def kill(self) -> None:
        assert self.clock is not None
        self.killed_at.append(self.clock.now)
        self.events.at(0.0, LauncherExited(self.exit_code_when_killed))

    aborts: dict[int, int] = field(default_factory=dict)
    tail: tuple[str, ...] = ("mpirun noticed that process rank 4 exited",)

    def output_tail(self) -> tuple[str, ...]:
        return self.tail

    def rank_codes(self) -> dict[int, int]:
        return self.aborts


@dataclass
class FakeLocal:
    terminated: list[float] = field(default_factory=list)  # graces
    reaped: int = 0
    attempts_begun: int = 0
    dumps: list[str] = field(default_factory=list)  # reasons

    def terminate_all(self, grace: float) -> None:
        self.terminated.append(grace)

    def dump_stacks(self, reason: str) -> None:
        self.dumps.append(reason)

    def begin_attempt(self) -> None:
        self.attempts_begun += 1

    def reap(self, abort_grace: float) -> None:
        self.reaped += 1


@dataclass
class FakeLink:
    sent: list[dict] = field(default_factory=list)  # each message as it goes on the wire
    final: tuple[int, str | None] | None = None

    def broadcast(self, message: Message) -> None:
        self.sent.append(json.loads(encode(message)))

    def finish(self, exit_code: int, failure: str | None) -> None:
        self.final = (exit_code, failure)

    def send(self, message: Message) -> None:
        self.sent.append(json.loads(encode(message)))


@dataclass(frozen=True)
class Strategy:
    world_size: int = 6

    def prepare(self, attempt: int = 0) -> LaunchPlan:
        return LaunchPlan(("mpirun", "true"), {})


class LeaderRig:
    def __init__(self, workers: Sequence[str] = HOSTS[1:]) -> None:
        self.clock = FakeClock()
        self.events = ScriptedEvents(self.clock)
        self.launcher = FakeLauncher(self.events, clock=self.clock)
        self.local = FakeLocal()
        self.link = FakeLink()
        self.logs: list[str] = []
        self.launched_at: float | None = None

        def start(plan: LaunchPlan) -> FakeLauncher:
            self.launched_at = self.clock.now
            return self.launcher

        self.leader_parts = parts = LeaderParts(
            events=self.events,
            clock=self.clock,
            start_launcher=start,
            check_ssh=lambda host, host_key, timeout: None,
            post=lambda event: self.events.at(0.0, event),
            in_background=lambda work: work(),  # the check ends before the next event
            log=self.logs.append,
            local=self.local,
            link=self.link,
        )
        self.leader = Leader(HOSTS[0], workers, TIMEOUTS, parts)

    def hellos(self) -> None:
        self.events.at(0.1, *(WorkerHello(host) for host in HOSTS[1:]))

    def ranks_start(self, when: float = 1.0) -> None:
        self.events.at(when, *(RankStarted(rank, HOSTS[rank // 2]) for rank in range(6)))

    def run(self) -> Outcome:
        outcome = self.leader.run(Strategy())
        self.leader.tell_workers(outcome)
        return outcome


def record(
    rank: int,
    code: int,
    *,
    signal: int | None = None,
    terminated: bool = False,
    ended: float = 1005.0,
    tail: tuple[str, ...] = (),
) -> RankRecord:
    return RankRecord(
        rank=rank,
        host=HOSTS[rank // 2],
        exit_code=code,
        signal=signal,
        started_at=1001.0,
        ended_at=ended,
        terminated=terminated,
        stderr_tail=tail,
    )


def test_records_behind_a_backlog_of_output_are_waited_for_while_output_arrives() -> None:
    """A leader seconds behind its ranks' output (128,000 lines/s from 32 hosts) gets their
    ends after that output; it waits as long as output keeps arriving, not a fixed 2 s."""
    rig = LeaderRig()
    taken = {"frames": 0}

    def output_taken() -> int:
        # the backlog drains until 10 s after the start: a frame more at every look
        if rig.clock.now < 1010.0:
            taken["frames"] += 1
        return taken["frames"]

    rig.leader = Leader(
        HOSTS[0], HOSTS[1:], TIMEOUTS, replace(rig.leader_parts, output_taken=output_taken)
    )
    rig.hellos()
    rig.ranks_start()
    rig.events.at(5.0, *(RankEnded(record(rank, 0)) for rank in range(4)), LauncherExited(0))
    rig.events.at(9.5, *(RankEnded(record(rank, 0)) for rank in (4, 5)))  # 4.5 s later
    rig.events.at(9.6, WorkerBye("algo-2"), WorkerBye("algo-3"))
    outcome = rig.run()
    assert outcome == Outcome(0, None)
    assert [record.rank for record in rig.leader.records] == [0, 1, 2, 3, 4, 5]


def test_records_that_never_come_are_given_up_once_no_output_arrives() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    rig.events.at(5.0, *(RankEnded(record(rank, 0)) for rank in range(4)), LauncherExited(0))
    rig.events.at(30.0, WorkerBye("algo-2"), WorkerBye("algo-3"))
    rig.leader.run(Strategy())
    assert [record.rank for record in rig.leader.records] == [0, 1, 2, 3]
    # concluded once the settle time passed without output: not waiting for the byes at 30 s
    assert 1005.0 + RECORD_SETTLE_SECONDS <= rig.clock.now < 1005.0 + RECORD_SETTLE_SECONDS + 0.5


def first_line(outcome: Outcome) -> str:
    assert outcome.failure is not None
    return outcome.failure.splitlines()[0]


def test_success_every_worker_told_zero() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    rig.events.at(5.0, *(RankEnded(record(rank, 0)) for rank in range(6)), LauncherExited(0))
    rig.events.at(5.1, WorkerBye("algo-2"), WorkerBye("algo-3"))
    outcome = rig.run()
    assert outcome == Outcome(0, None)
    assert rig.link.final == (0, None)
    assert rig.logs[-1] == "every worker has the exit code"


def test_rank_exits_with_its_code_and_bystanders_are_not_blamed() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    rig.events.at(
        5.0,
        RankEnded(record(1, 143, terminated=True, ended=1005.1)),  # killed by mpirun, earlier
        RankEnded(record(4, 3, ended=1005.2, tail=("ValueError: bad batch",))),
        *(RankEnded(record(r, 143, terminated=True, ended=1005.3)) for r in (0, 2, 3, 5)),
        LauncherExited(3),
    )
    outcome = rig.run()
    assert outcome.exit_code == 3
    assert first_line(outcome).startswith("Rank 4 on host algo-3 exited with code 3.")
    assert "ValueError: bad batch" in (outcome.failure or "")
    assert rig.link.final is not None and rig.link.final[0] == 3


def test_rank_killed_by_signal() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    rig.events.at(
        5.0,
        RankEnded(record(2, 137, signal=9)),
        *(RankEnded(record(r, 143, terminated=True, ended=1006.0)) for r in (0, 1, 3, 4, 5)),
        LauncherExited(137),
    )
    outcome = rig.run()
    assert outcome.exit_code == 137
    assert first_line(outcome).startswith("Rank 2 on host algo-2 was killed by signal 9 (SIGKILL)")


def test_sigterm_on_one_worker_stops_every_rank_with_the_full_grace() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    rig.events.at(3.0, SigtermReceived("algo-2"))
    rig.events.at(
        4.0,
        *(RankEnded(record(r, 143, terminated=True, signal=None)) for r in range(6)),
        LauncherExited(143),
    )
    outcome = rig.run()
    assert outcome.exit_code == exitcodes.SIGTERM_EXIT == 143
    assert first_line(outcome).startswith("Job stopped by SIGTERM received on host algo-2")
    assert rig.local.terminated == [30]
    assert {"type": "terminate", "grace": 30} in rig.link.sent


def test_worker_killed_names_the_host_and_its_ranks_not_a_bystander() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    rig.events.at(
        4.0,
        RankEnded(record(4, 0, ended=1002.0)),  # one of algo-3's ranks had already finished
        WorkerLost("algo-3", "control connection closed (connection closed)", 1004.0),
    )
    # mpirun notices its daemon is gone and stops the others: they die from its SIGTERM
    rig.events.at(
        4.2,
        *(RankEnded(record(r, 143, signal=15, terminated=True, ended=1004.2)) for r in range(4)),
        LauncherExited(1),
    )
    rig.events.at(4.3, WorkerBye("algo-2"))
    outcome = rig.run()
    assert outcome.exit_code == exitcodes.HOST_LOST == 75
    assert first_line(outcome).startswith("Host algo-3 (rank 5): control connection closed")
    assert rig.local.terminated == [TIMEOUTS.abort_grace]
    assert {"type": "terminate", "grace": TIMEOUTS.abort_grace} in rig.link.sent
    assert rig.link.final is not None and rig.link.final[0] == 75


def test_partitioned_worker_launcher_killed_soon_after_the_loss() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    # Pulses stopped at 1003; the loss is noticed leader_timeout later. mpirun hangs on.
    rig.events.at(
        13.0, WorkerLost("algo-3", "no pulse for 10 s (ringleader_leader_timeout)", 1003.0)
    )
    rig.events.at(13.2, *(RankEnded(record(r, 143, terminated=True)) for r in range(4)))
    rig.events.at(13.3, WorkerBye("algo-2"))
    noticed = rig.clock.now + 13.0
    outcome = rig.run()
    assert outcome.exit_code == 75
    assert first_line(outcome) == (
        "Host algo-3 (ranks 4, 5): no pulse for 10 s (ringleader_leader_timeout). "
        "Every other rank was stopped."
    )
    assert len(rig.launcher.killed_at) == 1
    assert rig.launcher.killed_at[0] - noticed <= TIMEOUTS.abort_grace + 1.0


def test_leader_partitioned_loses_every_worker_with_one_code() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    reason = "no pulse for 10 s (ringleader_leader_timeout)"
    rig.events.at(12.0, WorkerLost("algo-2", reason, 1002.5), WorkerLost("algo-3", reason, 1002.0))
    rig.events.at(12.1, *(RankEnded(record(r, 143, terminated=True)) for r in (0, 1)))
    outcome = rig.run()
    assert outcome.exit_code == 75
    assert first_line(outcome).startswith(
        "Hosts lost: algo-3 (ranks 4, 5): no pulse for 10 s (ringleader_leader_timeout); "
        "algo-2 (ranks 2, 3): no pulse"
    )
    # Nobody is left to confirm: the leader does not wait for the finish timeout.
    assert rig.logs[-1] == "every worker has the exit code"


def test_partition_noticed_seconds_apart_still_names_every_lost_host() -> None:
    """On a busy machine the second silence is noticed late (6 s here): the verdict waits for
    it, bounded by the leader timeout, instead of naming one host only."""
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    reason = "no pulse for 10 s (ringleader_leader_timeout)"
    rig.events.at(12.0, WorkerLost("algo-2", reason, 1002.5))
    rig.events.at(12.1, *(RankEnded(record(r, 143, terminated=True)) for r in (0, 1)))
    rig.events.at(18.0, WorkerLost("algo-3", reason, 1002.0))
    outcome = rig.run()
    assert outcome.exit_code == 75
    assert first_line(outcome).startswith("Hosts lost: ")
    assert "algo-2 (ranks 2, 3)" in first_line(outcome)
    assert "algo-3 (ranks 4, 5)" in first_line(outcome)


def test_rank_that_failed_before_a_host_was_lost_stays_the_cause() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    rig.events.at(4.0, RankEnded(record(1, 3, ended=1004.0)))
    rig.events.at(4.5, WorkerLost("algo-3", "control connection closed", 1004.5))
    rig.events.at(4.6, *(RankEnded(record(r, 143, terminated=True)) for r in (0, 2, 3)))
    rig.events.at(4.7, LauncherExited(3), WorkerBye("algo-2"))
    outcome = rig.run()
    assert outcome.exit_code == 3
    assert first_line(outcome).startswith("Rank 1 on host algo-1 exited with code 3.")


def test_host_that_never_starts_is_named() -> None:
    rig = LeaderRig()
    rig.events.at(0.1, WorkerHello("algo-2"))
    outcome = rig.run()
    assert outcome.exit_code == exitcodes.HOST_UNREACHABLE == 69
    assert first_line(outcome).startswith(
        "Host(s) algo-3 never answered within 30 s (ringleader_startup_timeout)"
    )
    assert rig.launched_at is None


def test_configuration_error_on_a_worker_ends_the_job_with_its_code() -> None:
    rig = LeaderRig()
    message = "Host algo-3: Configuration error in sagemaker_program: 'x.py' not found"
    rig.events.at(0.1, WorkerHello("algo-2"), WorkerHello("algo-3", 78, message))
    rig.events.at(0.2, WorkerBye("algo-2"))
    outcome = rig.run()
    assert outcome == Outcome(78, message + "\n")
    assert rig.launched_at is None


def test_launcher_crash_without_a_failed_rank_is_an_internal_error() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.events.at(2.0, LauncherExited(1))
    rig.events.at(2.1, WorkerBye("algo-2"), WorkerBye("algo-3"))
    outcome = rig.run()
    assert outcome.exit_code == exitcodes.INTERNAL_ERROR == 70
    assert first_line(outcome).startswith("mpirun exited with code 1 although no rank reported")
    assert "mpirun noticed" in (outcome.failure or "")


# What mpirun printed in CI when a worker's MPI daemon went away under load (its ssh session
# dropped): no rank had failed; mpirun tore the job down and exited 255.
DAEMONS_LOST = (
    "ORTE was unable to reliably start one or more daemons.",
    "This usually is caused by:",
    "An MPI communication peer process has unexpectedly disconnected.",
    "  Peer host: algo-1",
)


def test_ranks_mpirun_took_down_after_losing_a_daemon_are_not_the_cause() -> None:
    """mpirun SIGTERMs the ranks it started (their wrappers record being stopped: killed by
    signal 15), reports its daemon trouble and exits 255; the other ranks never report. No
    SIGTERM came from outside and no rank failed on its own: a launcher failure, not 143."""
    rig = LeaderRig()
    rig.launcher.tail = DAEMONS_LOST
    rig.hellos()
    rig.ranks_start()
    rig.events.at(
        22.0,
        RankEnded(record(1, 143, signal=15, terminated=True, ended=1022.0)),
        RankEnded(record(0, 143, signal=15, terminated=True, ended=1022.1)),
        LauncherExited(255),
    )
    rig.events.at(22.2, WorkerBye("algo-2"), WorkerBye("algo-3"))
    outcome = rig.run()
    assert outcome.exit_code == exitcodes.INTERNAL_ERROR == 70
    assert first_line(outcome) == (
        "mpirun exited with code 255 although no rank failed on its own (taken down with the "
        "job: 0, 1; 4 of 6 ranks never reported)."
    )
    assert "ORTE was unable to reliably start one or more daemons." in (outcome.failure or "")
    assert "SIGTERM" not in (outcome.failure or "")
    assert rig.link.final is not None and rig.link.final[0] == 70


def test_a_lost_daemon_named_by_mpirun_is_named_in_the_verdict() -> None:
    rig = LeaderRig()
    rig.launcher.tail = (
        "ORTE has lost communication with a remote daemon.",
        "  HNP daemon   : [[1234,0],0] on node algo-1",
        "  Remote daemon: [[1234,0],2] on node algo-3",
    )
    rig.hellos()
    rig.ranks_start()
    rig.events.at(
        8.0,
        *(RankEnded(record(r, 143, signal=15, terminated=True)) for r in range(4)),
        LauncherExited(1),
    )
    rig.events.at(8.1, WorkerBye("algo-2"), WorkerBye("algo-3"))
    outcome = rig.run()
    assert outcome.exit_code == 70
    assert first_line(outcome).startswith(
        "mpirun exited with code 1 after losing its daemon on host algo-3 although no rank "
        "failed on its own"
    )


def test_a_launcher_wedged_after_every_rank_succeeded_is_killed_after_its_timeout() -> None:
    """Every rank exited 0 but mpirun does not exit (a wedged orted): after
    ringleader_launcher_exit_timeout its tree is killed, and the job is what its ranks say."""
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    rig.events.at(5.0, *(RankEnded(record(rank, 0)) for rank in range(6)))
    rig.events.at(40.0, WorkerBye("algo-2"), WorkerBye("algo-3"))
    outcome = rig.run()
    assert outcome == Outcome(0, None)
    assert rig.launcher.killed_at == [1005.0 + TIMEOUTS.launcher_exit]
    assert "every rank has ended; killing mpirun, still running" in rig.logs


def test_a_strategy_that_cannot_size_the_job_is_a_configuration_error() -> None:
    """parameter_server in an image with neither TensorFlow nor MXNet: the strategy cannot
    say how many ranks the job has; every host gets 78 naming the field, no crash."""
    message = "Configuration error in sagemaker_parameter_server_enabled: neither"

    class Unsized:
        @property
        def world_size(self) -> int:
            raise ConfigError("sagemaker_parameter_server_enabled", "neither")

        def prepare(self, attempt: int = 0) -> LaunchPlan:
            raise AssertionError("never prepared")

    rig = LeaderRig()
    rig.hellos()
    outcome = rig.leader.run(Unsized())
    rig.leader.tell_workers(outcome)
    assert outcome == Outcome(78, message + "\n")
    assert rig.link.final == (78, message + "\n")
    assert rig.launched_at is None


def test_garbled_worker_is_a_protocol_error_naming_it() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    rig.events.at(3.0, WorkerLost("algo-2", "protocol error: garbled message: b'xx'", 1003.0, True))
    rig.events.at(3.1, *(RankEnded(record(r, 143, terminated=True)) for r in (0, 1, 4, 5)))
    rig.events.at(3.2, WorkerBye("algo-3"))
    outcome = rig.run()
    assert outcome.exit_code == exitcodes.PROTOCOL_ERROR == 76
    assert first_line(outcome).startswith("Host algo-2 (ranks 2, 3): protocol error: garbled")


def test_ranks_that_never_start_end_the_launch_with_the_startup_timeout() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.events.at(1.0, *(RankStarted(rank, HOSTS[rank // 2]) for rank in range(4)))
    rig.events.at(40.0, WorkerBye("algo-2"), WorkerBye("algo-3"))
    outcome = rig.run()
    assert outcome.exit_code == 69
    assert "no MPI daemon or rank came up on: algo-3" in first_line(outcome)
    assert len(rig.launcher.killed_at) == 1


def test_sigterm_before_launch_stops_without_launching() -> None:
    rig = LeaderRig()
    rig.events.at(0.1, WorkerHello("algo-2"), SigtermReceived("algo-1"))
    outcome = rig.run()
    assert outcome.exit_code == 143
    assert rig.launched_at is None


class WorkerRig:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.events = ScriptedEvents(self.clock)
        self.local = FakeLocal()
        self.link = FakeLink()
        self.written: list[Outcome] = []
        self.logs: list[str] = []
        parts = WorkerParts(self.events, self.clock, self.local, self.link, self.logs.append)
        self.worker = Worker("algo-2", "algo-1", TIMEOUTS, parts)

    def run(self) -> Outcome:
        return self.worker.run(self.written.append)


def test_worker_follows_the_leaders_verdict_and_says_bye_after_writing_files() -> None:
    rig = WorkerRig()
    rig.events.at(1.0, LeaderMessage(Launched()), RankStarted(2, "algo-2"))
    rig.events.at(2.0, RankEnded(record(2, 0)))
    rig.events.at(3.0, LeaderMessage(Exit(3, "Rank 4 ...\n")))
    rig.events.at(3.1, LeaderLost("control connection closed (connection closed)"))

    def write_files(written: Outcome) -> None:
        rig.written.append(written)
        rig.clock.now += 0.25  # writing the result files takes time

    outcome = rig.worker.run(write_files)
    assert outcome == Outcome(3, "Rank 4 ...\n")
    assert rig.written == [outcome]
    # The bye carries the worker's own marks: verdict received, and done once files are written.
    assert rig.link.sent[-1] == {
        "type": "bye",
        "host": "algo-2",
        "timeline": [
            {"host": "algo-2", "phase": "verdict received", "at": 1003.0},
            {"host": "algo-2", "phase": "exited", "at": 1003.25},
        ],
    }
    assert {"type": "rank-start", "rank": 2, "host": "algo-2"} in rig.link.sent


@pytest.mark.parametrize(
    "reason",
    [
        "control connection closed (connection closed)",
        "no pulse for 10 s (ringleader_leader_timeout)",
    ],
)
def test_worker_that_loses_the_leader_exits_with_the_host_lost_code(reason: str) -> None:
    rig = WorkerRig()
    rig.events.at(1.0, LeaderMessage(Launched()), RankStarted(2, "algo-2"))
    rig.events.at(11.0, LeaderLost(reason))
    outcome = rig.run()
    assert outcome.exit_code == exitcodes.HOST_LOST
    assert first_line(outcome) == (
        f"Host algo-1 (the leader): {reason}; noticed by algo-2, which stopped its ranks."
    )
    assert rig.local.terminated == [TIMEOUTS.abort_grace]
    assert rig.written == [outcome]


def test_worker_terminate_uses_the_grace_the_leader_sent() -> None:
    rig = WorkerRig()
    rig.events.at(1.0, LeaderMessage(Terminate(0.5)))
    rig.events.at(2.0, LeaderMessage(Exit(75, "Host algo-3 ...\n")))
    outcome = rig.run()
    assert outcome.exit_code == 75
    assert rig.local.terminated == [0.5]


def test_worker_sigterm_is_reported_and_the_leaders_verdict_wins() -> None:
    """The ranks here stop when the leader's stop comes, as every other host's do."""
    rig = WorkerRig()
    rig.events.at(1.0, LeaderMessage(Launched()), SigtermReceived("algo-2"))
    rig.events.at(1.3, LeaderMessage(Terminate(TIMEOUTS.sigterm_grace)))
    rig.events.at(2.5, LeaderMessage(Exit(143, "Job stopped\n")))
    outcome = rig.run()
    assert outcome.exit_code == 143
    assert {"type": "sigterm", "host": "algo-2"} in rig.link.sent
    assert rig.local.terminated == [TIMEOUTS.sigterm_grace]


def test_worker_sigterm_without_the_leaders_stop_stops_the_ranks_here_within_a_second() -> None:
    rig = WorkerRig()
    rig.events.at(1.0, LeaderMessage(Launched()), SigtermReceived("algo-2"))
    rig.events.at(3.0, LeaderMessage(Exit(143, "Job stopped\n")))
    outcome = rig.run()
    assert outcome.exit_code == 143
    assert rig.local.terminated == [TIMEOUTS.sigterm_grace]
    assert any("no stop from the leader within 1 s of SIGTERM" in line for line in rig.logs)


def test_worker_whose_ranks_never_start_gives_up_after_the_startup_timeout() -> None:
    rig = WorkerRig()
    rig.events.at(1.0, LeaderMessage(Launched()))
    outcome = rig.run()
    assert outcome.exit_code == 69
    assert "never started a rank on algo-2 within 30 s" in first_line(outcome)


def test_failing_rank_killed_while_aborting_keeps_the_code_it_aborted_with() -> None:
    """Horovod: rank 3 exits 3, its peers fail saying Horovod has been shut down, and mpirun's
    stop kills rank 3 while its own exit is still running: mpirun saw it abort with 3."""
    rig = LeaderRig()
    rig.launcher.aborts = {3: 3, 0: 143}
    rig.hellos()
    rig.ranks_start()
    shut_down = ("HorovodInternalError: Horovod has been shut down.",)
    rig.events.at(
        5.0,
        *(RankEnded(record(r, 1, ended=1005.0, tail=shut_down)) for r in (0, 1, 2, 4, 5)),
        RankEnded(record(3, 143, signal=15, terminated=True, ended=1005.3, tail=("failing",))),
        LauncherExited(3),
        WorkerBye("algo-2"),
        WorkerBye("algo-3"),
    )
    outcome = rig.run()
    assert outcome.exit_code == 3
    assert first_line(outcome).startswith("Rank 3 on host algo-2 exited with code 3.")


# --- spawned ranks (torch_distributed): every host runs its own launcher --------------------

SPEC = SpawnSpec(
    hosts=HOSTS,
    processes_per_host=2,
    master_addr="algo-1",
    master_port=7777,
    run_id="job",
    interface="eth0",
    torch=True,
)


@dataclass(frozen=True)
class SpawnStrategy:
    world_size: int = 6

    def prepare(self, attempt: int = 0) -> LaunchPlan:
        argv = ("python", "-m", "ringleader.launch.spawn", "--", "rank")
        return LaunchPlan(argv, {}, SPEC, spawned_policy(SPEC, HOSTS[0], "mpirun"))


def run_spawned(rig: LeaderRig) -> Outcome:
    outcome = rig.leader.run(SpawnStrategy())
    rig.leader.tell_workers(outcome)
    return outcome


def test_spawned_job_ends_when_every_hosts_launcher_exited() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    rig.events.at(5.0, *(RankEnded(record(rank, 0)) for rank in range(6)))
    rig.events.at(5.1, LauncherExited(0), RanksExited("algo-2", 0))
    rig.events.at(9.0, RanksExited("algo-3", 0))  # the last host is waited for
    rig.events.at(9.1, WorkerBye("algo-2"), WorkerBye("algo-3"))
    outcome = run_spawned(rig)
    assert outcome == Outcome(0, None)
    assert {"type": "launched", "spawn": SPEC.to_json()} in rig.link.sent
    assert rig.local.terminated == []
    assert rig.clock.now >= 1009.0


def test_spawned_rank_failing_stops_every_other_rank_like_mpirun() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    rig.events.at(5.0, RankEnded(record(3, 3, ended=1005.0, tail=("boom",))))
    rig.events.at(
        5.3,
        *(RankEnded(record(r, 143, terminated=True, ended=1005.3)) for r in (0, 1, 2, 4, 5)),
        LauncherExited(143),
        RanksExited("algo-2", 3),
        RanksExited("algo-3", 143),
    )
    rig.events.at(5.4, WorkerBye("algo-2"), WorkerBye("algo-3"))
    assert_rank_3_stopped_every_other_rank(rig, run_spawned(rig))


def assert_rank_3_stopped_every_other_rank(rig: LeaderRig, outcome: Outcome) -> None:
    assert outcome.exit_code == 3
    assert first_line(outcome).startswith("Rank 3 on host algo-2 exited with code 3.")
    assert rig.local.terminated == [TIMEOUTS.abort_grace]
    assert rig.link.sent.count({"type": "terminate", "grace": TIMEOUTS.abort_grace}) == 1
    assert rig.launcher.killed_at == []  # everyone ended within the abort grace


def test_spawned_rank_with_a_recorded_exception_names_it_first() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    error = ('  File "train.py", line 9, in main', "ValueError: bad shape")
    failed = dataclasses.replace(record(4, 1, tail=("noise",)), error=error)
    rig.events.at(5.0, RankEnded(failed))
    rig.events.at(
        5.2,
        *(RankEnded(record(r, 143, terminated=True, ended=1005.3)) for r in (0, 1, 2, 3, 5)),
        LauncherExited(143),
        RanksExited("algo-2", 143),
        RanksExited("algo-3", 1),
    )
    outcome = run_spawned(rig)
    assert first_line(outcome).startswith(
        "Rank 4 on host algo-3 exited with code 1: ValueError: bad shape. It ran"
    )
    assert "Its error (recorded by @record):" in (outcome.failure or "")
    assert "noise" not in (outcome.failure or "")


def test_spawned_job_with_a_lost_worker_ends_without_its_launcher() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    rig.events.at(4.0, WorkerLost("algo-3", "control connection closed (connection closed)", 1004))
    rig.events.at(
        4.3,
        *(RankEnded(record(r, 143, terminated=True, ended=1004.3)) for r in range(4)),
        LauncherExited(143),
        RanksExited("algo-2", 143),
    )
    outcome = run_spawned(rig)
    assert outcome.exit_code == exitcodes.HOST_LOST
    assert first_line(outcome).startswith("Host algo-3 (ranks 4, 5): control connection closed")


def test_spawned_job_needs_no_ssh_check() -> None:
    rig = LeaderRig()
    rig.leader = Leader(
        HOSTS[0], HOSTS[1:], TIMEOUTS, dataclasses.replace(rig.leader_parts, check_ssh=None)
    )
    rig.hellos()
    rig.ranks_start()
    rig.events.at(
        5.0,
        *(RankEnded(record(rank, 0)) for rank in range(6)),
        LauncherExited(0),
        RanksExited("algo-2", 0),
        RanksExited("algo-3", 0),
    )
    assert run_spawned(rig).exit_code == 0


class SpawningWorkerRig(WorkerRig):
    def __init__(self) -> None:
        super().__init__()
        self.launcher = FakeLauncher(self.events, clock=self.clock)
        self.plans: list[SpawnSpec] = []

        def plan(spec: SpawnSpec) -> LaunchPlan:
            self.plans.append(spec)
            return LaunchPlan(("spawn",), {}, spec)

        parts = WorkerParts(
            self.events,
            self.clock,
            self.local,
            self.link,
            lambda line: None,
            plan,
            lambda plan: self.launcher,
        )
        self.worker = Worker("algo-2", "algo-1", TIMEOUTS, parts)


def test_worker_spawns_its_ranks_and_reports_when_they_exited() -> None:
    rig = SpawningWorkerRig()
    rig.events.at(1.0, LeaderMessage(Launched(SPEC)))
    rig.events.at(1.5, RankStarted(2, "algo-2"), RankStarted(3, "algo-2"))
    rig.events.at(5.0, RankEnded(record(2, 0)), RankEnded(record(3, 0)), LauncherExited(0))
    rig.events.at(5.1, LeaderMessage(Exit(0, None)))
    outcome = rig.run()
    assert outcome == Outcome(0, None)
    assert rig.plans == [SPEC]
    sent = [message["type"] for message in rig.link.sent]
    assert sent == ["rank-start", "rank-start", "rank-end", "rank-end", "ranks-exited", "bye"]
    assert rig.link.sent[4] == {"type": "ranks-exited", "host": "algo-2", "code": 0}


def test_worker_kills_its_spawned_ranks_that_outlast_their_grace() -> None:
    rig = SpawningWorkerRig()
    rig.events.at(1.0, LeaderMessage(Launched(SPEC)))
    rig.events.at(1.5, RankStarted(2, "algo-2"), RankStarted(3, "algo-2"))
    rig.events.at(2.0, LeaderMessage(Terminate(0.5)))
    rig.events.at(40.0, LeaderMessage(Exit(3, "Rank 4 ...\n")))
    stopped = rig.clock.now + 2.0
    outcome = rig.run()
    assert outcome.exit_code == 3
    assert rig.local.terminated == [0.5]
    assert rig.launcher.killed_at[0] - stopped == pytest.approx(0.5 + KILL_MARGIN_SECONDS)
    assert {"type": "ranks-exited", "host": "algo-2", "code": 137} in rig.link.sent


# --- TensorFlow parameter servers: stopped once the main task ended, never a failure ----------

TF_SPEC = dataclasses.replace(SPEC, torch=False, tf="parameter_server")


@dataclass(frozen=True)
class TfStrategy:
    world_size: int = 6

    def prepare(self, attempt: int = 0) -> LaunchPlan:
        argv = ("python", "-m", "ringleader.launch.spawn", "--", "rank")
        return LaunchPlan(argv, {}, TF_SPEC, spawned_policy(TF_SPEC, HOSTS[0], "mpirun"))


def tf_record(rank: int, code: int, **kwargs: object) -> RankRecord:
    role = "ps" if rank % 2 else ("master" if rank == 0 else "worker")
    index = rank // 2 if role == "ps" else max(rank // 2 - 1, 0)
    return dataclasses.replace(record(rank, code, **kwargs), role=f"{role}:{index}")  # type: ignore[arg-type]


def test_parameter_servers_are_stopped_when_the_master_ends_and_do_not_fail_the_job() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    rig.events.at(4.0, RankEnded(tf_record(2, 0)), RankEnded(tf_record(4, 0)))
    rig.events.at(5.0, RankEnded(tf_record(0, 0)))  # the master: the job is done
    rig.events.at(
        5.2,
        *(RankEnded(tf_record(r, 143, signal=15, terminated=True)) for r in (1, 3, 5)),
        LauncherExited(143),
        RanksExited("algo-2", 143),
        RanksExited("algo-3", 143),
    )
    outcome = rig.leader.run(TfStrategy())
    assert outcome == Outcome(0, None)
    assert rig.local.terminated == [TIMEOUTS.abort_grace]
    assert "every main task ended: stopping the rest (ranks 1, 3, 5)" in rig.logs


def test_a_parameter_server_that_dies_is_the_root_cause_named_with_its_host() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    rig.events.at(3.0, RankEnded(tf_record(3, 137, signal=9)))  # ps:1 on algo-2 killed
    rig.events.at(
        3.3,
        *(RankEnded(tf_record(r, 143, signal=15, terminated=True)) for r in (0, 1, 2, 4, 5)),
        LauncherExited(143),
        RanksExited("algo-2", 137),
        RanksExited("algo-3", 143),
    )
    outcome = rig.leader.run(TfStrategy())
    assert outcome.exit_code == 137
    assert first_line(outcome).startswith(
        "Rank 3 (ps:1) on host algo-2 was killed by signal 9 (SIGKILL)"
    )


@dataclass(frozen=True)
class MpirunStrategy:
    world_size: int = 6
    stops_all: bool = True

    def prepare(self, attempt: int = 0) -> LaunchPlan:
        policy = EndPolicy(rank_failure_stops_all=self.stops_all)
        return LaunchPlan(("mpirun", "true"), {}, policy=policy)


def test_mpirun_rank_failing_stops_every_other_rank_through_our_channel() -> None:
    # mpirun's own abort reaches 32 hosts' ranks only after seconds; ours at once
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    rig.events.at(5.0, RankEnded(record(3, 3, ended=1005.0, tail=("boom",))))
    rig.events.at(
        5.2,
        LauncherExited(3),
        *(RankEnded(record(r, 143, terminated=True)) for r in (0, 1, 2, 4, 5)),
    )
    rig.events.at(5.4, WorkerBye("algo-2"), WorkerBye("algo-3"))
    outcome = rig.leader.run(MpirunStrategy())
    rig.leader.tell_workers(outcome)
    assert_rank_3_stopped_every_other_rank(rig, outcome)


def test_mpirun_still_running_after_every_stopped_rank_ended_is_killed_at_once() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    rig.events.at(5.0, RankEnded(record(3, 3, ended=1005.0)))
    rig.events.at(5.2, *(RankEnded(record(r, 143, terminated=True)) for r in (0, 1, 2, 4, 5)))
    rig.events.at(60.0, LauncherExited(3))  # tearing its daemons down: not waited for
    outcome = rig.leader.run(MpirunStrategy())
    assert first_line(outcome).startswith("Rank 3 on host algo-2 exited with code 3.")
    assert rig.launcher.killed_at == [pytest.approx(1005.2)]
    assert "every rank has ended; killing mpirun, still running" in rig.logs


def test_mpirun_whose_stopped_ranks_do_not_end_is_killed_after_the_abort_grace() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    rig.events.at(5.0, RankEnded(record(3, 3, ended=1005.0)))
    rig.events.at(5.2, *(RankEnded(record(r, 143, terminated=True)) for r in (0, 1, 2, 4)))
    outcome = rig.leader.run(MpirunStrategy())
    assert outcome.exit_code == 3
    deadline = 1005.0 + TIMEOUTS.abort_grace + LOST_HOST_KILL_MARGIN_SECONDS
    assert rig.launcher.killed_at == [pytest.approx(deadline)]
    assert "ranks did not end within their grace period; killing the launcher" in rig.logs


def test_mpirun_ranks_run_on_when_the_user_turned_the_abort_off() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    rig.events.at(5.0, RankEnded(record(3, 3, ended=1005.0)))
    rig.events.at(9.0, *(RankEnded(record(r, 0)) for r in (0, 1, 2, 4, 5)), LauncherExited(3))
    outcome = rig.leader.run(MpirunStrategy(stops_all=False))
    assert outcome.exit_code == 3
    assert rig.local.terminated == [] and rig.launcher.killed_at == []
    assert not any(message.get("type") == "terminate" for message in rig.link.sent)


def test_mpirun_failure_blaming_another_rank_leaves_the_stop_to_mpirun() -> None:
    # rank 0 may still be inside MPI_Abort: a stop from us would kill it before mpirun reports
    # the code it aborted with
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start()
    collateral = ("RuntimeError: Horovod has been shut down. This was caused by an exception",)
    rig.launcher.aborts = {0: 5}
    rig.events.at(5.0, RankEnded(record(2, 1, ended=1005.0, tail=collateral)))
    rig.events.at(
        5.3,
        RankEnded(record(0, exitcodes.SIGTERM_EXIT, signal=15, terminated=True, ended=1005.2)),
        *(RankEnded(record(r, 143, terminated=True)) for r in (1, 3, 4, 5)),
        LauncherExited(5),
    )
    outcome = rig.leader.run(MpirunStrategy())
    assert outcome.exit_code == 5
    assert first_line(outcome).startswith("Rank 0 on host algo-1 exited with code 5.")
    assert rig.local.terminated == [] and rig.launcher.killed_at == []
    assert not any(message.get("type") == "terminate" for message in rig.link.sent)


def still_checking(rig: LeaderRig) -> None:
    """ssh checks that have not ended yet (a worker slow to answer ssh)."""
    rig.leader = Leader(
        HOSTS[0], HOSTS[1:], TIMEOUTS, replace(rig.leader_parts, in_background=lambda work: None)
    )


def test_sigterm_while_ssh_checks_run_stops_the_job_at_once() -> None:
    rig = LeaderRig()
    still_checking(rig)
    rig.hellos()
    rig.events.at(2.0, SigtermReceived("algo-1"))
    outcome = rig.run()
    assert outcome.exit_code == exitcodes.SIGTERM_EXIT
    assert rig.launched_at is None
    assert rig.clock.now < 1000.0 + 2.0 + TIMEOUTS.finish + 1.0  # not after a check's timeout


def test_a_worker_lost_while_ssh_checks_run_ends_the_start_at_once() -> None:
    rig = LeaderRig()
    still_checking(rig)
    rig.hellos()
    rig.events.at(2.0, WorkerLost("algo-3", "pulse connection closed (connection reset)"))
    outcome = rig.run()
    assert outcome.exit_code == exitcodes.HOST_UNREACHABLE
    assert "Host algo-3 was lost before the job started" in first_line(outcome)
    assert rig.launched_at is None


def test_a_failed_ssh_check_names_the_host_and_launches_nothing() -> None:
    rig = LeaderRig()

    def check(host: str, host_key: str | None, timeout: float) -> str | None:
        return f"{host}: Permission denied (publickey)" if host == "algo-3" else None

    rig.leader = Leader(HOSTS[0], HOSTS[1:], TIMEOUTS, replace(rig.leader_parts, check_ssh=check))
    rig.hellos()
    outcome = rig.run()
    assert outcome.exit_code == exitcodes.HOST_UNREACHABLE
    assert "ssh to worker host(s) failed: algo-3: Permission denied" in first_line(outcome)
    assert rig.launched_at is None


def test_ssh_checks_that_never_end_are_bounded_and_named() -> None:
    rig = LeaderRig()
    still_checking(rig)
    rig.hellos()
    outcome = rig.run()
    assert outcome.exit_code == exitcodes.HOST_UNREACHABLE
    assert "ssh to worker host(s) did not finish: algo-2, algo-3" in first_line(outcome)
    assert rig.clock.now <= 1000.1 + TIMEOUTS.startup + 5.0 + TIMEOUTS.finish


def test_failures_on_two_hosts_are_compared_on_the_leaders_clock() -> None:
    """Issue 23: algo-3's clock runs 5 s ahead. Its rank failed first (leader's time 1004.0),
    a rank on algo-2 a second later; by the raw remote clocks algo-3's rank ended at 1009.0
    and the bystander would be named."""
    rig = LeaderRig()
    rig.events.at(0.1, WorkerHello("algo-2"), WorkerHello("algo-3", clock_offset=-5.0))
    rig.ranks_start()
    rig.events.at(
        5.5,
        RankEnded(record(4, 3, ended=1009.0, tail=("ValueError: bad batch",))),
        RankEnded(record(2, 1, ended=1005.0, tail=("RuntimeError: connection reset",))),
        *(RankEnded(record(r, 143, terminated=True, ended=1005.5)) for r in (0, 1, 3)),
        RankEnded(record(5, 143, terminated=True, ended=1010.5)),
        LauncherExited(3),
    )
    outcome = rig.run()
    assert first_line(outcome).startswith("Rank 4 on host algo-3 exited with code 3.")
    (culprit,) = [record for record in rig.leader.records if record.rank == 4]
    assert culprit.ended_at == 1004.0  # job.json has every time on the leader's clock
