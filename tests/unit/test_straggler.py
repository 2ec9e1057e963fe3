"""The straggler watch: a rank's wait samples (which stacks wait in a collective), the shares
over a window, the verdict, and the leader's warning, status line and episodes."""

import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringleader.config.job import parse_job_config
from ringleader.config.topology import parse_topology
from ringleader.core import exitcodes
from ringleader.core.attempts import failure_cause
from ringleader.core.frozen import evolve
from ringleader.core.outcome import JobFacts, decide
from ringleader.core.pmap import PMap
from ringleader.core.progress import RankStep
from ringleader.core.stacks import Frame
from ringleader.core.straggler import (
    ALPHA,
    MIN_SAMPLES,
    Shares,
    Straggler,
    WaitCount,
    chance_of_so_few,
    shares,
    straggler,
    window_counts,
)
from ringleader.launch.strategy import rank_command
from ringleader.rank.stacks import py_spy_path
from ringleader.rank.waits import WaitSampler, next_start, tally, waits
from ringleader.supervise.eventloop import Now
from ringleader.supervise.leading.effects import Log, TerminateEverywhere
from ringleader.supervise.leading.hang_watch import progressed
from ringleader.supervise.leading.state import Attempt, LeaderSetup, LeaderState, Phase
from ringleader.supervise.leading.status import close_episode, say_status, status_from_launch
from ringleader.wire.events import RanksProgressed

HOSTS = ["algo-1", "algo-2", "algo-3"]


def config(**settings: Any):  # type: ignore[no-untyped-def]
    topology = parse_topology({}, {"hosts": HOSTS, "current_host": "algo-1"})
    values = {
        "sagemaker_program": "train.py",
        "sagemaker_mpi_enabled": "true",
        **{f"ringleader_{key}": value for key, value in settings.items()},
    }
    return parse_job_config(topology, values, {})


# ------------------------------------------------------------------------ which stacks wait
def stack(*names: str, files: tuple[str, ...] = ()) -> tuple[Frame, ...]:
    frames = [Frame(name, "libmpi.so.40", native=True) for name in names]
    frames += [Frame("step", file) for file in files]
    return tuple(frames)


@pytest.mark.parametrize(
    "frames",
    [
        ("opal_progress", "ompi_request_default_wait_all", "PMPI_Allreduce"),
        ("mca_coll_tuned_allreduce_intra_dispatch",),
        ("gloo::transport::tcp::UnboundBuffer::waitRecv",),
        ("c10d::ProcessGroupGloo::AsyncWork::wait",),
        ("horovod::common::WaitAndClear",),
    ],
)
def test_a_stack_in_a_collective_waits(frames: tuple[str, ...]) -> None:
    assert waits(stack(*frames))


def test_torch_distributeds_python_waits_and_the_users_code_does_not() -> None:
    assert waits(stack(files=("/usr/lib/python3/site-packages/torch/distributed/c10d.py",)))
    assert not waits(stack("clock_nanosleep", "time_sleep", files=("/opt/ml/code/train.py",)))
    assert not waits(stack("dgemm_kernel", files=("/opt/ml/code/train.py",)))


MAIN = "thread (41): MainThread;<module> (/opt/ml/code/train.py);step (/opt/ml/code/train.py)"
TORCH = "/usr/lib/python3/site-packages/torch"
RAW = "\n".join(
    [
        f"{MAIN};PMPI_Allreduce (/usr/lib/libmpi.so.40);opal_progress (libopen-pal.so.40) 7",
        f"{MAIN};all_reduce ({TORCH}/distributed/distributed_c10d.py) 2",
        f"{MAIN};at::native::addmm ({TORCH}/lib/libtorch_cpu.so) 5",
        f"thread (417): MainThread;gloo::transport::tcp::Loop::run ({TORCH}/lib/libtorch_cpu.so) 4",
        "thread (43): Thread-1 (load);PMPI_Barrier (/usr/lib/libmpi.so.40) 9",
        "thread (41): MainThread;c10d::ProcessGroupGloo::AsyncWork::wait(std::chrono::duration"
        f"<long, std::ratio<1l, 1000l> >) ({TORCH}/lib/libtorch_cpu.so) 3",
    ]
)


def test_a_recording_counts_the_main_threads_samples_and_those_that_wait() -> None:
    """Only the thread whose id is the PID counts (not thread 417, nor another thread)."""
    assert tally(RAW, 41) == (17, 12)
    assert tally("", 41) == (0, 0)
    assert tally("thread (41): MainThread;partial line without a count\n", 41) == (0, 0)


def test_every_ranks_periods_start_on_the_same_multiples_of_the_wall_clock() -> None:
    assert next_start(1000.0, 60.0) == 1020.0
    assert next_start(1020.0, 60.0) == 1080.0
    assert next_start(7.2, 3.0) == 9.0


CHILD = """\
import threading, time
def synchronize():  # the name of Horovod's wait: a wait
    time.sleep(0.05)
def compute():
    deadline = time.monotonic() + 0.05
    while time.monotonic() < deadline:
        pass
def forever(work):
    while True:
        work()
waiter, worker = (synchronize, compute) if "{main}" == "waits" else (compute, synchronize)
threading.Thread(target=forever, args=(worker,), daemon=True).start()
print("ready", flush=True)
forever(waiter)
"""


@pytest.mark.parametrize("main", ["waits", "computes"])
def test_the_sampler_records_the_main_thread_with_py_spy_period_after_period(
    main: str, tmp_path: Path
) -> None:
    found = py_spy_path()
    assert found, "py-spy is in the dev extra: pip install -e '.[dev]'"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(main=main)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        problems: list[str] = []
        sampler = WaitSampler(5, found, 1.0, 1, tmp_path / "waits", problems.append)
        sampler.start(child.pid)
        assert sampler.wait_for_samples(3, timeout=60), sampler.count()
        sampler.stop()
    finally:
        child.kill()
        child.wait()
    count = sampler.count()
    assert count.samples >= 3 and problems == []
    # the other thread does the opposite: counting it would blur the share
    assert count.waiting == (count.samples if main == "waits" else 0)
    assert not list((tmp_path / "waits").iterdir())  # each period's file is read, then gone


def test_the_sampler_stops_after_three_periods_py_spy_cannot_record_and_says_why(
    tmp_path: Path,
) -> None:
    refusing = tmp_path / "py-spy"
    refusing.write_text("#!/bin/sh\necho 'Error: Permission Denied' >&2\nexit 1\n")
    refusing.chmod(0o755)
    said = threading.Event()
    problems: list[str] = []

    def on_problem(problem: str) -> None:
        problems.append(problem)
        said.set()

    sampler = WaitSampler(5, str(refusing), 0.05, 1, tmp_path / "waits", on_problem)
    sampler.start(os.getpid())
    assert said.wait(30)
    sampler.stop()
    assert problems == ["Permission Denied"]
    assert sampler.count() == WaitCount(5, 0, 0)


def test_stopping_the_sampler_ends_its_py_spy_at_once(tmp_path: Path) -> None:
    """A py-spy that would record for ten minutes more is ended by stop(), not left behind."""
    started = tmp_path / "started"
    os.mkfifo(started)
    lasting = tmp_path / "py-spy"
    lasting.write_text(f"#!/bin/sh\necho $$ > {started}\nexec sleep 600\n")
    lasting.chmod(0o755)
    # a period of 10 min whose first starts now: its py-spy is recording when stop() comes
    base = time.time() - 599.9
    sampler = WaitSampler(
        5,
        str(lasting),
        600,
        1,
        tmp_path / "waits",
        lambda _: None,
        clock=lambda: time.time() - base,
    )
    reader = os.open(started, os.O_RDONLY | os.O_NONBLOCK)
    try:
        sampler.start(os.getpid())
        assert select.select([reader], [], [], 30)[0], "the fake py-spy never started"
        pid = int(os.read(reader, 64).split()[0])
    finally:
        os.close(reader)
    sampler.stop()
    assert not Path(f"/proc/{pid}").exists()


# -------------------------------------------------------------------------------- the verdict
def counts(**by_rank: tuple[int, int]) -> PMap[int, WaitCount]:
    return PMap({int(r[1:]): WaitCount(int(r[1:]), s, w) for r, (s, w) in by_rank.items()})


def test_the_rank_that_waits_least_by_the_threshold_is_the_straggler() -> None:
    history = (
        counts(r0=(0, 0), r1=(0, 0), r2=(0, 0), r5=(0, 0)),
        counts(r0=(120, 36), r1=(120, 34), r2=(120, 38), r5=(120, 3)),
    )
    found = shares(window_counts(history, 1))
    assert found is not None and found.by_rank[5] == pytest.approx(3 / 120)
    assert found.median == pytest.approx(35 / 120)
    assert found.counts[5] == (120, 3)
    assert straggler(found, 0.15) == 5
    assert straggler(found, 0.30) is None  # not by that margin


def judged(samples: int = 200, **by_rank: float) -> Shares:
    """Shares from `samples` samples of each rank (r0=0.3: rank 0 waited in 30% of them)."""
    found = shares({int(r[1:]): (samples, round(share * samples)) for r, share in by_rank.items()})
    assert found is not None
    return found


def test_a_job_that_slows_down_as_a_whole_has_no_straggler() -> None:
    assert straggler(judged(r0=0.30, r1=0.28, r2=0.31, r3=0.29), 0.15) is None


def test_two_ranks_that_hardly_wait_name_neither() -> None:
    """No clear margin between them: neither is named."""
    assert straggler(judged(r0=0.30, r1=0.28, r2=0.31, r4=0.0, r5=0.02), 0.15) is None
    assert straggler(judged(r0=0.30, r1=0.28, r2=0.31, r4=0.09, r5=0.0), 0.15) == 5


def test_the_same_shares_from_too_few_samples_name_no_one() -> None:
    """Of 12 samples none waited: ranks that wait 30% of the time give that one time in 70
    (and the least of many ranks' noisy shares is that low by chance): not shown. Of 120,
    it is."""
    shares_now = {"r0": 0.33, "r1": 0.33, "r2": 0.33, "r3": 0.33, "r4": 0.33, "r5": 0.0}
    assert straggler(judged(12, **shares_now), 0.15) is None
    assert straggler(judged(120, **shares_now), 0.15) == 5


def test_the_chance_of_so_few_waiting_samples_is_fishers_exact_test() -> None:
    """Worked by hand: of 2 + 2 samples 2 waited; both of the rank's did not: 1 way in 6."""
    assert chance_of_so_few((2, 0), (2, 2)) == pytest.approx(1 / 6)
    assert chance_of_so_few((2, 1), (2, 1)) == pytest.approx(5 / 6)
    assert chance_of_so_few((5, 5), (5, 0)) == pytest.approx(1.0)
    assert chance_of_so_few((0, 0), (9, 3)) == pytest.approx(1.0)


COUNT = st.integers(MIN_SAMPLES, 300).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n)))


@given(st.lists(COUNT, min_size=3, max_size=12), st.sampled_from([0.05, 0.15, 0.3]))
def test_a_rank_is_named_only_when_its_samples_show_it(
    ranks: list[tuple[int, int]], threshold: float
) -> None:
    """Whatever the counts: the rank named waits least, by the threshold below the median,
    with a chance of at most ALPHA shared among the ranks that so few of its samples waited;
    and with ten times the samples at the same shares it is still named."""
    found = shares(dict(enumerate(ranks)))
    assert found is not None
    named = straggler(found, threshold)
    if named is None:
        return
    others = [count for rank, count in enumerate(ranks) if rank != named]
    pooled = (sum(n for n, _ in others), sum(w for _, w in others))
    assert chance_of_so_few(ranks[named], pooled) <= ALPHA / len(ranks)
    assert found.by_rank[named] == min(found.by_rank.values())
    assert found.median - found.by_rank[named] >= threshold
    more = shares({rank: (10 * n, 10 * w) for rank, (n, w) in enumerate(ranks)})
    assert more is not None and straggler(more, threshold) == named


@given(st.integers(0, 60), st.integers(1, 60), st.integers(0, 200), st.integers(0, 200))
def test_the_chance_grows_with_the_waiting_samples(
    waiting: int, extra: int, others: int, others_waiting: int
) -> None:
    samples = waiting + extra
    pooled = (max(others, others_waiting), others_waiting)
    fewer = chance_of_so_few((samples, waiting), pooled)
    more = chance_of_so_few((samples, waiting + 1), pooled)
    assert 0.0 <= fewer <= more + 1e-12 and more <= 1.0  # sums of floats: within rounding


def test_only_the_window_counts_and_too_few_samples_are_not_judged() -> None:
    history = (
        counts(r0=(10, 9), r1=(10, 9), r2=(10, 0)),  # long ago: rank 2 was slow then
        counts(r0=(20, 12), r1=(20, 12), r2=(20, 3)),
        counts(r0=(30, 15), r1=(30, 15), r2=(30, 6)),
    )
    assert window_counts(history, 2) == {0: (20, 6), 1: (20, 6), 2: (20, 6)}
    assert shares({0: (2, 1), 1: (2, 0), 2: (9, 3)}) is None  # two ranks too few samples
    assert shares({0: (5, 1), 1: (5, 2)}) is None  # two ranks: no median to judge by


# ------------------------------------------------------------------------------ on the leader
def running(window: int = 2, action: str = "warn") -> LeaderState:
    progress = evolve(
        config().progress,
        status_interval=10.0,
        straggler_window=window,
        straggler_action=action,
    )
    setup = evolve(
        LeaderSetup("algo-1", ("algo-2", "algo-3"), config().timeouts), progress=progress
    )
    started = PMap({rank: HOSTS[rank // 2] for rank in range(6)})
    attempt = status_from_launch(
        LeaderState(setup), Attempt(0, 1000.0, started=started), Now(0.0, 1000.0)
    )
    return LeaderState(setup, phase=Phase.RUNNING, world_size=6, attempt=attempt)


def tick(
    state: LeaderState, at: float, waiting: dict[int, int], samples: int
) -> tuple[LeaderState, tuple[Any, ...]]:
    waits_now = PMap({rank: WaitCount(rank, samples, w) for rank, w in waiting.items()})
    steps = PMap({rank: RankStep(rank, int(at)) for rank in waiting})
    state = evolve(state, attempt=evolve(state.current, waits=waits_now, steps=steps))
    return say_status(state, Now(at, 1000.0 + at))


def test_a_straggler_is_named_after_the_window_then_cleared_when_it_recovers() -> None:
    state = running(window=2)
    slow = {0: 0, 1: 0, 2: 0, 3: 0, 4: 0, 5: 0}
    state, effects = tick(state, 10.0, slow, 0)
    for at, total in ((20.0, 30), (30.0, 60)):  # rank 5 waits in none of its samples
        state, effects = tick(
            state, at, {r: (total // 3 if r != 5 else 0) for r in range(6)}, total
        )
    warnings = [e.text for e in effects if isinstance(e, Log) and "straggler" in e.text]
    assert warnings[0] == (
        "warning: straggler: rank 5 on algo-3 waits 0% of the time, the median rank 33% over "
        "the last 2 status intervals (ringleader_straggler_window; 0 of its 60 samples "
        "waited), 15% or more below (ringleader_straggler_threshold); the other ranks wait "
        "for it"
    )
    assert warnings[1].endswith(
        "; straggler: rank 5 on algo-3 waits 0% of the time, the median rank 33%"
    )
    assert state.current.straggler is not None and state.current.straggler.since == 1030.0
    # it recovers: from now on it waits like the others
    for at, total in ((40.0, 90), (50.0, 120), (60.0, 150)):
        waiting = {r: total // 3 if r != 5 else (total - 60) // 3 for r in range(6)}
        state, effects = tick(state, at, waiting, total)
        if state.current.straggler is None:
            break
    cleared = [
        e.text for e in effects if isinstance(e, Log) and e.text.startswith("straggler cleared")
    ]
    assert cleared and cleared[0].startswith("straggler cleared: rank 5 on algo-3: it waits ")
    (episode,) = state.stragglers
    assert episode.rank == 5 and episode.since == 1030.0 and episode.until is not None


def test_an_episode_still_open_ends_with_its_attempt() -> None:
    named = Straggler(5, "algo-3", 0.01, 0.3, 1030.0)
    state = running()
    state = evolve(state, attempt=evolve(state.current, straggler=named))
    state = close_episode(state, Now(50.0, 1050.0))
    assert state.stragglers == (evolve(named, until=1050.0),)
    assert state.current.straggler is None


def test_with_the_watch_off_nothing_is_sampled_or_judged() -> None:
    """Off is the default: the samples that can name a straggler cost a TensorFlow rank more
    than 1% (bench/sampler_pause.py)."""
    assert config(status_interval="60").progress.sample_period is None
    job = config(straggler_action="off", status_interval="60")
    assert job.progress.sample_period is None
    assert "--wait-period" not in rank_command(job, ["python", "train.py"], [])
    state = running(window=1, action="off")
    for at in (10.0, 20.0, 30.0):
        state, effects = tick(state, at, {0: 9, 1: 9, 5: 0}, 30)
    assert not any("straggler" in e.text for e in effects if isinstance(e, Log))


def test_each_ranks_stacks_are_recorded_in_periods_of_one_status_interval() -> None:
    warn = config(status_interval="60", straggler_action="warn")
    command = rank_command(warn, ["python", "train.py"], [])
    assert command[command.index("--wait-period") + 1] == "60"
    assert command[command.index("--wait-rate") + 1] == "4"
    faster = config(status_interval="60", straggler_sample_rate="10", straggler_action="stop")
    command = rank_command(faster, ["python", "train.py"], [])
    assert command[command.index("--wait-rate") + 1] == "10"
    assert config(status_interval="3", straggler_action="warn").progress.sample_period == 3.0


def test_a_report_of_only_wait_samples_is_kept_and_is_no_progress() -> None:
    """A hung rank's wrapper still samples its stacks: those reports must not keep the job
    alive for the hang watch."""
    state = running()
    state = evolve(state, attempt=evolve(state.current, hang_deadline=50.0))
    only_waits = RanksProgressed("algo-3", (), (), (WaitCount(5, 12, 0),))
    state, _ = progressed(state, only_waits, Now(40.0, 1040.0))
    assert state.current.hang_deadline == 50.0
    assert state.current.waits[5] == WaitCount(5, 12, 0) and 5 not in state.current.progress


def test_with_stop_a_named_straggler_stops_every_rank_and_the_verdict_names_its_host() -> None:
    state = running(window=2, action="stop")
    state, _ = tick(state, 10.0, dict.fromkeys(range(6), 0), 0)
    for at, total in ((20.0, 30), (30.0, 60)):
        waiting = {r: (total // 3 if r != 5 else 0) for r in range(6)}
        state, effects = tick(state, at, waiting, total)
    assert state.phase is Phase.STOPPING
    assert TerminateEverywhere(state.setup.timeouts.sigterm_grace) in effects
    straggled = state.current.straggled
    assert straggled is not None and straggled.at == 1030.0
    facts = JobFacts(straggled=straggled)
    outcome = decide(facts)
    assert outcome.exit_code == exitcodes.STRAGGLER == 72
    assert (outcome.failure or "").startswith(
        "Rank 5 on host algo-3 is a straggler: it waits 0% of the time, the median rank 33%, "
        "over the last 2 status intervals (ringleader_straggler_window; 0 of its 60 samples "
        "waited)"
    )
    assert "(ringleader_straggler_action=stop) so that algo-3 can be replaced." in (
        outcome.failure or ""
    )
    assert failure_cause(facts) == "straggler"
    # a SIGTERM that came first is the verdict
    assert decide(evolve(facts, stopped_on="algo-2", stopped_at=1020.0)).exit_code == 143
