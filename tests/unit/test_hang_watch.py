"""The hang watch on the leader's and a worker's state machines, with fake collaborators: no
progress for ringleader_hang_timeout takes every rank's stacks, then ends the job hung (124);
progress of any rank, output still arriving, or a heartbeat keeps it going; SIGQUIT shows the
stacks and the job goes on. No containers, no sleeps: the fake clock jumps."""

import dataclasses
import os
import queue
from dataclasses import replace
from pathlib import Path

import pytest

import ringleader
from ringleader.config.timeouts import parse_timeouts
from ringleader.core import exitcodes
from ringleader.core.errors import ConfigError
from ringleader.core.hang import HangReport
from ringleader.core.outcome import Outcome
from ringleader.core.stacks import PY_SPY, Frame, ProcessStacks, RankStacks, ThreadStack
from ringleader.rank.capture import RankOutput
from ringleader.rank.progress import ProgressWatch
from ringleader.supervise.leader import Leader
from ringleader.supervise.worker import Worker, WorkerParts
from ringleader.wire.events import (
    Event,
    LauncherExited,
    LeaderMessage,
    RankEnded,
    RanksProgressed,
    StacksRequested,
    StacksTaken,
)
from ringleader.wire.messages import HANG, ON_DEMAND, DumpStacks, Exit, Progress
from tests.unit.test_supervise_faults import (
    HOSTS,
    TIMEOUTS,
    FakeClock,
    FakeLink,
    FakeLocal,
    LeaderRig,
    ScriptedEvents,
    record,
)

HANG_TIMEOUT = 20.0
WATCHED = replace(TIMEOUTS, hang=HANG_TIMEOUT, stack_dump=10.0)
CODE = "/opt/ml/code/train.py"
LIBRARY = "/opt/venv/lib/python3.11/site-packages/collectives.py"
WAITING = (
    Frame("wait", "/usr/lib/python3.11/threading.py", 320),
    Frame("allreduce", LIBRARY, 10),
    Frame("main", CODE, 17),
    Frame("<module>", CODE, 30),
)
STUCK = (
    Frame("load_batch_forever", CODE, 12),
    Frame("main", CODE, 15),
    Frame("<module>", CODE, 30),
)


def stacks_of(rank: int, frames: tuple[Frame, ...] = WAITING) -> RankStacks:
    thread = ThreadStack("MainThread", frames, main=True)
    process = ProcessStacks(100 + rank, "python train.py", PY_SPY, (thread,))
    return RankStacks(rank, HOSTS[rank // 2], 1000.0, (process,))


class WatchedRig(LeaderRig):
    """A leader with the hang watch on, whose kept stack reports the test can read."""

    def __init__(self) -> None:
        super().__init__()
        self.reports: list[HangReport] = []
        self.leader_parts = replace(self.leader_parts, keep_stacks=self.reports.append)
        self.leader = Leader(HOSTS[0], HOSTS[1:], WATCHED, self.leader_parts)

    def progress(self, when: float, ranks: range = range(6)) -> None:
        self.events.at(when, *(RanksProgressed(HOSTS[rank // 2], (rank,)) for rank in ranks))

    def stacks(self, when: float, ranks: range = range(6), stuck: int | None = 4) -> None:
        self.events.at(
            when,
            *(
                StacksTaken(HANG, stacks_of(rank, STUCK if rank == stuck else WAITING))
                for rank in ranks
            ),
        )

    def stopped_ranks_end(self, when: float) -> None:
        ends = (
            RankEnded(record(rank, 143, terminated=True, ended=1000 + when)) for rank in range(6)
        )
        self.events.at(when, *ends, LauncherExited(143))


def dumps_sent(link: FakeLink) -> list[str]:
    return [message["reason"] for message in link.sent if message["type"] == "dump-stacks"]


def test_no_progress_for_the_timeout_takes_every_ranks_stacks_and_names_the_culprit() -> None:
    rig = WatchedRig()
    rig.hellos()
    rig.ranks_start(1.0)
    rig.progress(2.0)  # the last progress: the job hangs from here on
    rig.stacks(23.0)  # asked at 22.0 (2.0 + 20 s); they arrive a second later
    rig.stopped_ranks_end(24.0)
    outcome = rig.run()
    assert rig.local.dumps == [HANG] and dumps_sent(rig.link) == [HANG]
    assert "no rank made progress for 20 s (ringleader_hang_timeout)" in "\n".join(rig.logs)
    assert outcome.exit_code == exitcodes.HUNG
    assert outcome.failure is not None
    headline = outcome.failure.splitlines()[0]
    assert headline.startswith("Rank 4 on host algo-3 is in load_batch_forever (train.py:12)")
    assert rig.local.terminated == [WATCHED.abort_grace]  # a hung rank has nothing to save
    assert [report.reason for report in rig.reports] == [HANG]
    assert len(rig.reports[0].stacks) == 6 and rig.reports[0].headline == headline
    assert rig.link.final is not None and rig.link.final[0] == exitcodes.HUNG


def test_the_hang_is_declared_exactly_one_timeout_after_the_last_progress() -> None:
    rig = WatchedRig()
    rig.hellos()
    rig.ranks_start(1.0)
    for when in (2.0, 15.0, 30.0):  # progress of one rank is progress of the job
        rig.progress(when, range(1))
    asked: list[float] = []
    rig.leader_parts.local.dump_stacks = lambda reason: asked.append(rig.clock.now)  # type: ignore[method-assign]
    rig.stacks(51.0)
    rig.stopped_ranks_end(52.0)
    assert rig.run().exit_code == exitcodes.HUNG
    assert asked == [1000.0 + 30.0 + HANG_TIMEOUT]


def test_stacks_that_never_arrive_are_named_after_the_stack_dump_timeout() -> None:
    rig = WatchedRig()
    rig.hellos()
    rig.ranks_start(1.0)
    rig.progress(2.0)
    rig.stacks(23.0, range(4), stuck=None)  # algo-3's never come
    rig.stopped_ranks_end(40.0)
    outcome = rig.run()
    assert outcome.exit_code == exitcodes.HUNG
    report = rig.reports[0]
    assert report.taken_at == pytest.approx(1000.0 + 22.0 + WATCHED.stack_dump)
    assert [(missing.rank, missing.host) for missing in report.missing] == [
        (4, "algo-3"),
        (5, "algo-3"),
    ]
    assert "ringleader_stack_dump_timeout" in report.missing[0].reason


def test_sigquit_shows_every_ranks_stacks_and_the_job_goes_on() -> None:
    rig = WatchedRig()
    rig.hellos()
    rig.ranks_start(1.0)
    rig.progress(2.0)
    rig.events.at(3.0, StacksRequested("algo-2"))
    rig.events.at(3.5, *(StacksTaken(ON_DEMAND, stacks_of(rank)) for rank in range(6)))
    rig.progress(10.0)
    rig.events.at(12.0, *(RankEnded(record(rank, 0, ended=1012.0)) for rank in range(6)))
    rig.events.at(12.1, LauncherExited(0))
    outcome = rig.run()
    assert outcome.exit_code == 0
    assert rig.local.dumps == [ON_DEMAND] and dumps_sent(rig.link) == [ON_DEMAND]
    assert [report.reason for report in rig.reports] == [ON_DEMAND]
    assert rig.local.terminated == []


def test_without_a_hang_timeout_a_quiet_job_is_never_touched() -> None:
    rig = LeaderRig()
    rig.hellos()
    rig.ranks_start(1.0)
    rig.events.at(5000.0, *(RankEnded(record(rank, 0, ended=6000.0)) for rank in range(6)))
    rig.events.at(5000.1, LauncherExited(0))
    assert rig.run().exit_code == 0
    assert rig.local.dumps == [] and dumps_sent(rig.link) == []


def test_a_rank_failing_while_stacks_are_taken_is_the_verdict() -> None:
    """The failure came with the hang's request: the job is not hung, a rank failed."""
    rig = WatchedRig()
    rig.hellos()
    rig.ranks_start(1.0)
    rig.progress(2.0)
    rig.events.at(22.5, RankEnded(record(4, 3, ended=1022.5)))
    rig.stacks(23.0, range(4), stuck=None)
    ends = (RankEnded(record(rank, 143, terminated=True, ended=1024.0)) for rank in (0, 1, 2, 3, 5))
    rig.events.at(24.0, *ends, LauncherExited(3))
    outcome = rig.run()
    assert outcome.exit_code == 3
    assert rig.reports[0].missing[0].rank == 4
    assert "it ended" in rig.reports[0].missing[0].reason


def test_a_worker_relays_progress_and_takes_its_ranks_stacks_when_told() -> None:
    clock = FakeClock()
    events = ScriptedEvents(clock)
    local, link = FakeLocal(), FakeLink()
    kept: list[RankStacks] = []
    parts = WorkerParts(events, clock, local, link, lambda line: None, keep_stacks=kept.append)
    events.at(1.0, RanksProgressed("algo-2", (2,)))
    events.at(2.0, LeaderMessage(DumpStacks(HANG)))
    events.at(2.5, StacksTaken(HANG, stacks_of(2)), StacksTaken(ON_DEMAND, stacks_of(3)))
    events.at(3.0, StacksRequested("algo-2"))
    events.at(4.0, LeaderMessage(Exit(124, "Rank 4 hung\n")))
    Worker("algo-2", "algo-1", WATCHED, parts).run(on_outcome=lambda outcome: None)
    assert local.dumps == [HANG]
    assert kept == [stacks_of(2)]  # only a hang's stacks are kept in the host's files
    sent = [(message["type"], message.get("reason")) for message in link.sent]
    assert sent[:4] == [
        ("progress", None),
        ("stacks", HANG),
        ("stacks", ON_DEMAND),
        ("stacks-wanted", None),
    ]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("-5", "expected a number of seconds above 0"),
        ("soon", "expected a number of seconds above 0"),
        ("0", "expected a number of seconds above 0"),
        ("1", "shorter than the pulse interval, 2.5 s"),
    ],
)
def test_a_bad_hang_timeout_is_a_configuration_error_naming_it(value: str, problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_timeouts({"ringleader_hang_timeout": value})
    assert raised.value.field == "ringleader_hang_timeout"
    assert problem in str(raised.value)


def test_the_hang_timeout_is_off_by_default_and_reported_a_fifth_at_a_time() -> None:
    assert parse_timeouts({}).hang is None and parse_timeouts({}).progress_interval is None
    watched = parse_timeouts({"ringleader_hang_timeout": "30"})
    assert dataclasses.astuple(watched)[-2:] == (30.0, 10.0)
    assert watched.progress_interval == 6.0


def test_horovods_stall_warnings_are_evidence_not_progress() -> None:
    """Horovod repeats its stall warning while the job hangs: were it progress, a Horovod job
    would never be found hung (it was not, in a container test, before this rule)."""
    output = RankOutput("algo-1", 0, None, relay=False)
    output.start(None)
    output.put("stdout", ["step 3 rank 0 allreduce=15"])
    assert output.progress == 1
    warning = [
        "[2026-11-25 18:57:15.896496: W /tmp/src/horovod-0.28.1/horovod/common/"
        "stall_inspector.cc:107] One or more tensors were submitted to be reduced, gathered "
        "or broadcasted by subset of ranks and are waiting for remainder of ranks for more "
        "than 4 seconds.",
        "Missing ranks:",
        "4: [allreduce.step4]",
    ]
    output.put("stderr", warning)
    output.put("stderr", warning)
    assert output.progress == 1
    assert list(output.evidence) == warning  # the latest warning, once
    output.put("stdout", ["4: [not a stall line once other output came]"])
    assert output.progress == 2


def test_the_heartbeat_api_outside_ringleader_does_nothing_and_never_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RINGLEADER_PROGRESS_FILE", raising=False)
    ringleader.progress()  # not in a job: nothing to tell
    monkeypatch.setenv("RINGLEADER_PROGRESS_FILE", str(tmp_path / "gone" / "heartbeat"))
    ringleader.progress()  # the wrapper's directory is gone (the rank is ending): no error
    assert not (tmp_path / "gone").exists()


class SentMessages:
    def __init__(self) -> None:
        self.sent: queue.Queue[object] = queue.Queue()

    def send(self, message: object) -> None:
        self.sent.put(message)


def test_a_heartbeat_is_reported_as_progress_once_per_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = ProgressWatch(tmp_path / "ranks" / "3")
    os.utime(watch.heartbeat, ns=(0, 0))  # so that the next heartbeat surely differs
    output = RankOutput("algo-2", 3, None, relay=False)
    channel = SentMessages()
    watch.report_to(channel, "algo-2", 3, output, 0.01)  # type: ignore[arg-type]
    try:
        monkeypatch.setenv("RINGLEADER_PROGRESS_FILE", str(watch.heartbeat))
        ringleader.progress()
        assert channel.sent.get(timeout=10) == Progress("algo-2", (3,))
    finally:
        watch.stop()


class LateEvents(ScriptedEvents):
    """A leader starved of CPU: its first wait past `late_from` returns `by` seconds late."""

    def __init__(self, clock: FakeClock, late_from: float, by: float) -> None:
        super().__init__(clock)
        self._late_from, self._by = late_from, by

    def next(self, deadline: float | None) -> Event | None:
        event = super().next(deadline)
        if event is None and self._clock.now >= self._late_from and self._by:
            self._clock.now += self._by
            self._by = 0.0
        return event


def test_a_leader_starved_past_its_deadline_gives_the_reports_the_time_it_lost() -> None:
    """Its own timer ran 8 s late: the threads that read the reports were starved with it, so
    the job is not hung until 8 s more have passed without progress."""
    rig = WatchedRig()
    rig.events = LateEvents(rig.clock, late_from=1022.0, by=8.0)
    rig.leader = Leader(HOSTS[0], HOSTS[1:], WATCHED, replace(rig.leader_parts, events=rig.events))
    asked: list[float] = []
    rig.local.dump_stacks = lambda reason: asked.append(rig.clock.now)  # type: ignore[method-assign]
    rig.hellos()
    rig.ranks_start(1.0)
    rig.progress(2.0)
    rig.stacks(50.0)
    rig.stopped_ranks_end(51.0)
    assert rig.run().exit_code == exitcodes.HUNG
    assert asked == [1000.0 + 2.0 + HANG_TIMEOUT + 8.0 + 8.0]  # noticed at 30, then 8 more


def hung_after(
    progress: tuple[tuple[float, range], ...], stacks_at: float
) -> tuple[WatchedRig, Outcome, list[float]]:
    """Ranks start at 1 s, make progress as given, then none: the outcome, and when the
    leader asked for every rank's stacks."""
    rig = WatchedRig()
    rig.hellos()
    rig.ranks_start(1.0)
    for when, ranks in progress:
        rig.progress(when, ranks)
    asked: list[float] = []
    rig.leader_parts.local.dump_stacks = lambda reason: asked.append(rig.clock.now)  # type: ignore[method-assign]
    rig.stacks(stacks_at)
    rig.stopped_ranks_end(stacks_at + 1.0)
    return rig, rig.run(), asked


def test_a_job_still_starting_gets_the_startup_timeout_before_it_counts_as_hung() -> None:
    """No rank has made progress yet (frameworks importing on a busy machine): the watch waits
    the startup timeout (30 s) rather than the hang timeout (20 s), and says which it was."""
    rig, outcome, asked = hung_after((), stacks_at=40.0)
    launched = rig.launched_at
    assert launched is not None and asked == [launched + WATCHED.startup]
    assert outcome.exit_code == exitcodes.HUNG
    assert "no rank made progress for 30 s (ringleader_startup_timeout)" in (outcome.failure or "")


def test_once_every_rank_made_progress_the_hang_timeout_applies() -> None:
    _, outcome, asked = hung_after(((3.0, range(6)),), stacks_at=24.0)
    assert asked == [1000.0 + 3.0 + HANG_TIMEOUT]
    assert "no rank made progress for 20 s (ringleader_hang_timeout)" in (outcome.failure or "")


def test_a_rank_still_starting_while_others_made_progress_gets_the_startup_window() -> None:
    """Rank 0 printed as its framework imported; rank 5 was still importing 20 s later (one
    host slower than the rest on a busy machine): no verdict before the startup timeout has
    passed since the launch, and the verdict names both timeouts and the silent rank."""
    rig, outcome, asked = hung_after(((3.0, range(5)),), stacks_at=40.0)
    launched = rig.launched_at
    assert launched is not None and asked == [launched + WATCHED.startup]
    assert outcome.exit_code == exitcodes.HUNG
    quiet = round(launched + WATCHED.startup - 1003.0)
    expected = (
        f"no rank made progress for {quiet} s, and rank 5 none in the 30 s since the launch "
        "(ringleader_startup_timeout)"
    )
    assert expected in (outcome.failure or ""), outcome.failure


def test_the_last_rank_s_first_progress_inside_the_window_lets_the_hang_timeout_apply() -> None:
    """Rank 5 catches up at 5 s: every rank made progress, so the job is hung 20 s after the
    last progress, before the startup window would have ended."""
    _, outcome, asked = hung_after(((3.0, range(5)), (5.0, range(5, 6))), stacks_at=40.0)
    assert outcome.exit_code == exitcodes.HUNG
    assert asked == [1000.0 + 5.0 + HANG_TIMEOUT]
