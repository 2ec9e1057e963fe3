"""Steps and the status line: a rank's step from its heartbeat or its output, what its wrapper
reports, the job's progress, rate and ETA on the leader, and the settings' bad input."""

import os
import queue
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ringleader
from ringleader.config.job import JobConfig, parse_job_config
from ringleader.config.topology import parse_topology
from ringleader.core.errors import ConfigError
from ringleader.core.frozen import evolve
from ringleader.core.pmap import PMap
from ringleader.core.progress import (
    MAX_SAMPLES,
    RankStep,
    StatusSample,
    duration,
    kept,
    metric_line,
    parse_heartbeat,
    report_interval,
    sample,
    status_line,
)
from ringleader.launch.strategy import rank_command
from ringleader.rank.capture import RankOutput
from ringleader.rank.progress import ProgressWatch
from ringleader.rank.steps import Seen, StepFinder, moved
from ringleader.supervise.eventloop import Now
from ringleader.supervise.leading.effects import Log, RecordStatus
from ringleader.supervise.leading.state import Attempt, LeaderSetup, LeaderState, Phase
from ringleader.supervise.leading.status import say_status, status_from_launch
from ringleader.wire.messages import Progress

HOSTS = ["algo-1", "algo-2", "algo-3"]


def config(**settings: Any) -> JobConfig:
    topology = parse_topology({}, {"hosts": HOSTS, "current_host": "algo-1"})
    values = {
        "sagemaker_program": "train.py",
        "sagemaker_mpi_enabled": "true",
        **{f"ringleader_{key}": value for key, value in settings.items()},
    }
    return parse_job_config(topology, values, {})


# ------------------------------------------------------------------------------ a rank's step
@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("1200 5000", (1200, 5000)),
        ("1200" + " " * 44, (1200, None)),
        ("", None),  # touched: a heartbeat without a step
        ("step 3", None),
        ("1 2 3", None),
        ("-4", None),
    ],
)
def test_a_heartbeat_file_holds_a_step_and_maybe_a_total(
    text: str, found: tuple[int, int | None] | None
) -> None:
    assert parse_heartbeat(text) == found


def test_the_progress_api_writes_the_step_and_never_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    heartbeat = tmp_path / "heartbeat"
    heartbeat.touch()
    monkeypatch.setenv("RINGLEADER_PROGRESS_FILE", str(heartbeat))
    ringleader.progress(step=123456, total=500000)
    assert parse_heartbeat(heartbeat.read_text()) == (123456, 500000)
    ringleader.progress(step=7)  # shorter: no leftovers of the longer one
    assert parse_heartbeat(heartbeat.read_text()) == (7, None)
    before = os.stat(heartbeat).st_mtime_ns
    os.utime(heartbeat, ns=(0, 0))
    ringleader.progress()  # a plain heartbeat keeps the step
    assert os.stat(heartbeat).st_mtime_ns >= before
    assert parse_heartbeat(heartbeat.read_text()) == (7, None)
    ringleader.progress(step="many")  # type: ignore[arg-type]  # never raises
    ringleader.progress(step=10**40)  # too long for the record: cut, never raises
    monkeypatch.delenv("RINGLEADER_PROGRESS_FILE")
    ringleader.progress(step=1)  # outside a job: nothing


def test_a_step_regex_reads_the_step_from_the_ranks_lines() -> None:
    finder = StepFinder(r"step (\d+)")
    output = RankOutput("algo-2", 3, None, relay=False, steps=finder)
    output.put("stdout", ["loading", "epoch 1 step 41 loss 0.3", "step 42.0 done"])
    assert finder.step == 42
    output.put("stderr", ["warning: nothing here"])
    assert finder.step == 42
    metric = StepFinder(r"iteration=([0-9.e+]+);")
    metric.look("iteration=1.5e3;")
    assert metric.step == 1500


def test_once_a_rank_has_a_step_only_a_new_step_is_progress() -> None:
    plain, stepped = Seen(3, 10, None, None), Seen(3, 10, None, RankStep(3, 7))
    assert moved(plain, Seen(4, 10, None, None))  # a line
    assert moved(plain, Seen(3, 11, None, None))  # a heartbeat
    assert not moved(plain, Seen(3, 10, None, None))
    assert moved(plain, stepped)  # the first step
    assert not moved(stepped, Seen(9, 12, None, RankStep(3, 7)))  # lines, the same step
    assert moved(stepped, Seen(9, 12, None, RankStep(3, 8)))


def test_the_wrapper_reports_its_ranks_step_with_its_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = ProgressWatch(tmp_path / "ranks" / "3")
    output = RankOutput("algo-2", 3, None, relay=False, steps=StepFinder(r"step (\d+)"))
    channel = SentMessages()
    watch.report_to(channel, "algo-2", 3, output, 0.01)  # type: ignore[arg-type]
    try:
        output.put("stdout", ["step 5"])
        assert channel.sent.get(timeout=10) == Progress("algo-2", (3,), (RankStep(3, 5),))
        monkeypatch.setenv("RINGLEADER_PROGRESS_FILE", str(watch.heartbeat))
        ringleader.progress(step=6, total=100)  # the heartbeat's step comes first
        assert channel.sent.get(timeout=10) == Progress("algo-2", (3,), (RankStep(3, 6, 100),))
    finally:
        watch.stop()


class SentMessages:
    def __init__(self) -> None:
        self.sent: queue.Queue[object] = queue.Queue()

    def send(self, message: object) -> None:
        self.sent.put(message)


# ------------------------------------------------------------------------- the job's progress
def steps(*values: int, total: int | None = None) -> PMap[int, RankStep]:
    return PMap({rank: RankStep(rank, step, total) for rank, step in enumerate(values)})


def test_the_jobs_step_is_its_lowest_ranks_with_rate_and_eta() -> None:
    first = sample(steps(100, 101, 100), 1000.0, 500, None)
    assert first is not None and first.step == 100 and first.total == 500
    assert first.rate is None and first.eta is None
    later = sample(steps(160, 161, 160), 1020.0, 500, first)
    assert later is not None and later.rate == pytest.approx(3.0)
    assert later.eta == pytest.approx((500 - 160) / 3.0)
    assert status_line(later) == "progress: step 160/500 (32%), 3.0 steps/s, ETA 2 min"
    assert metric_line(later) == (
        "ringleader_step=160; ringleader_total_steps=500; ringleader_steps_per_second=3.0; "
        "ringleader_eta_seconds=113;"
    )


def test_a_total_from_the_ranks_and_none_at_all() -> None:
    said = sample(steps(10, 10, total=40), 5.0, None, None)
    assert said is not None and said.total == 40
    assert status_line(said) == "progress: step 10/40 (25%)"
    bare = sample(steps(7), 5.0, None, None)
    assert bare is not None and status_line(bare) == "progress: step 7"
    assert metric_line(bare) == "ringleader_step=7;"
    stuck = sample(steps(7), 65.0, 100, bare)
    assert stuck is not None and status_line(stuck) == (
        "progress: step 7/100 (7%), 0.00 steps/s, no step since the last status"
    )
    assert sample(PMap(), 5.0, 100, None) is None  # no step source: nothing to say


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(5, "5 s"), (89, "89 s"), (1200, "20 min"), (5400, "1 h 30 min"), (11100, "3 h 5 min")],
)
def test_durations_read_as_a_person_would_say_them(seconds: float, said: str) -> None:
    assert duration(seconds) == said


@settings(deadline=None, database=None, max_examples=50)
@given(st.integers(1, 3 * MAX_SAMPLES))
def test_job_json_keeps_a_bounded_history_with_the_first_and_the_latest(count: int) -> None:
    history: tuple[StatusSample, ...] = ()
    for at in range(count):
        history = kept(history, StatusSample(float(at), at, None, None, None, {}))
    assert len(history) <= MAX_SAMPLES
    assert history[0].at == 0.0 and history[-1].at == count - 1
    assert [s.at for s in history] == sorted(s.at for s in history)


def test_a_status_sample_round_trips_through_json() -> None:
    said = StatusSample(12.5, 40, 100, 2.5, 24.0, {0: 40, 5: 41})
    assert StatusSample.from_json(said.to_json()) == said


# ----------------------------------------------------------------------------- on the leader
def running_leader(interval: float, total: int | None = None) -> LeaderState:
    setup = LeaderSetup("algo-1", ("algo-2",), config().timeouts)
    progress = evolve(config().progress, status_interval=interval, total_steps=total)
    setup = evolve(setup, progress=progress)
    attempt = status_from_launch(LeaderState(setup), Attempt(0, 1000.0), Now(100.0, 1000.0))
    return LeaderState(setup, phase=Phase.RUNNING, world_size=4, attempt=attempt)


def test_every_interval_the_leader_says_the_jobs_progress() -> None:
    state = running_leader(60.0, total=1000)
    assert state.deadline == 160.0
    state = evolve(state, attempt=evolve(state.current, steps=steps(100, 100, 101, 100)))
    state, effects = say_status(state, Now(160.0, 1060.0))
    assert effects[0] == Log("progress: step 100/1000 (10%)")
    assert isinstance(effects[2], RecordStatus) and effects[2].sample.step == 100
    assert state.deadline == 220.0 and len(state.progress) == 1
    state = evolve(state, attempt=evolve(state.current, steps=steps(220, 221, 220, 220)))
    state, effects = say_status(state, Now(220.0, 1120.0))
    assert effects[0] == Log("progress: step 220/1000 (22%), 2.0 steps/s, ETA 6 min")
    assert [sample.step for sample in state.progress] == [100, 220]


def test_no_step_source_no_status_and_interval_zero_no_timer() -> None:
    state = running_leader(60.0)
    state, effects = say_status(state, Now(160.0, 1060.0))
    assert effects == () and state.progress == () and state.deadline == 220.0
    assert running_leader(0.0).deadline is None


def test_a_job_being_stopped_says_one_last_status_and_no_more() -> None:
    state = running_leader(60.0)
    attempt = evolve(state.current, steps=steps(5), stopped_on="a rank failed")
    state, effects = say_status(evolve(state, attempt=attempt), Now(160.0, 1060.0))
    assert effects[0] == Log("progress: step 5")
    assert state.current.status_deadline is None


# ------------------------------------------------------------------------------- the settings
def test_the_ranks_are_told_the_step_regex_and_report_within_a_status_interval() -> None:
    job = config(step_regex=r"step (\d+)", status_interval="30")
    command = rank_command(job, ["python", "train.py"], [])
    assert command[command.index("--step-regex") + 1] == r"step (\d+)"
    assert command[command.index("--progress-interval") + 1] == "5"
    assert report_interval(600) == 10.0 and report_interval(0) is None
    quiet = rank_command(config(status_interval="0"), ["python", "train.py"], [])
    assert "--progress-interval" not in quiet and "--step-regex" not in quiet


def test_a_step_metric_names_one_of_the_jobs_metric_definitions() -> None:
    definitions = '[{"Name": "iteration", "Regex": "iter=([0-9]+)"}]'
    job = config(metric_definitions=definitions, step_metric="iteration")
    assert job.progress.step_pattern(job.output.metric_definitions) == "iter=([0-9]+)"


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("step_regex", "step (", "cannot compile 'step ('"),
        ("step_regex", r"step \d+", "has no group: put ( ) around the step number"),
        ("step_metric", "iteration", "no metric definition is named 'iteration' (the job's: none)"),
        ("total_steps", "0", "expected a whole number of at least 1, got 0"),
        ("status_interval", "-1", "expected a number of seconds"),
        ("straggler_threshold", "0", "expected a share between 0 and 1 (0.2 for 20%), got 0"),
        ("straggler_threshold", "1.5", "expected a share between 0 and 1"),
        ("straggler_threshold", "many", "expected a share between 0 and 1"),
        ("straggler_window", "0", "expected a whole number of at least 1"),
        ("straggler_action", "kill", "expected one of warn, stop, off, got 'kill'"),
        ("straggler_sample_rate", "0", "expected a whole number of at least 1"),
        ("straggler_sample_rate", "2.5", "expected a whole number of at least 1"),
        ("straggler_sample_rate", "101", "expected samples a second from 1 to 100, got 101"),
    ],
)
def test_bad_progress_and_straggler_settings_are_configuration_errors_naming_the_setting(
    key: str, value: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        config(**{key: value})
    assert str(raised.value).startswith(f"Configuration error in ringleader_{key}: ")
    assert problem in str(raised.value)


def test_a_rank_reporting_late_does_not_take_the_jobs_step_back() -> None:
    first = sample(steps(5, 5), 10.0, None, None)
    late = sample(steps(6, 6, 2), 20.0, None, first)  # a third rank's first report: step 2
    assert first is not None and late is not None
    assert late.step == 5 and late.rate == 0.0 and late.steps[2] == 2
