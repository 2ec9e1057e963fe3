"""The hang verdict (ringleader.core.hang) on recorded dumps of real hung Python processes.

fixtures/stacks/ holds what py-spy (`dump --json --native`), faulthandler and /proc said of
processes record.py hung on this kind of host: a stand-in all_reduce in a site-packages
library waiting on an event (under a decorator, as torch's is), a rank stuck in its own
load_batch_forever, every rank in wait_forever, a worker process, and `sleep` for /proc. Six
ranks, two per host (algo-1..3), are built from them with the parsers of core/stacks.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from ringleader.core import hang
from ringleader.core.hang import (
    HEADLINE_LIMIT,
    HangReport,
    LastProgress,
    MissingStacks,
    group_stacks,
    hang_headline,
    is_user_frame,
    rank_text,
)
from ringleader.core.stacks import (
    FAULTHANDLER,
    PROC,
    PY_SPY,
    Frame,
    ProcessStacks,
    RankStacks,
    ThreadStack,
    parse_faulthandler,
    parse_py_spy_json,
)

FIXTURES = Path(__file__).parent / "fixtures" / "stacks"
HOSTS = ("algo-1", "algo-2", "algo-3")
NOW = 2000.0  # the verdict, on the leader's clock
TIMEOUT = 20.0
TIMED_OUT = "no rank made progress for 20 s (ringleader_hang_timeout)"
CODE = "/opt/ml/code/train.py"
ALL_REDUCE = "in all_reduce (train.py:27)"  # the stand-in library's call, from main
LOAD_BATCH = "in load_batch_forever (train.py:13)"


def host(rank: int) -> str:
    return HOSTS[rank // 2]


def recorded(name: str) -> str:
    return (FIXTURES / name).read_text()


def py_spy(name: str, rank: int) -> RankStacks:
    text = recorded(f"{name}.py-spy.json")
    [(pid, threads)] = parse_py_spy_json(text).items()
    process = ProcessStacks(pid, "python train.py", PY_SPY, threads, text=text)
    return RankStacks(rank, host(rank), NOW - 1, (process,))


def faulthandler(name: str, rank: int) -> RankStacks:
    """A rank py-spy could not attach to, as the rank wrapper notes it."""
    text = recorded(f"{name}.faulthandler.txt")
    pid = 1000 + rank
    process = ProcessStacks(
        pid, "python train.py", FAULTHANDLER, parse_faulthandler(text), text=text
    )
    refused = "Permission denied: ptrace not allowed"
    note = f"py-spy not usable for pid {pid} ({refused}): used faulthandler"
    return RankStacks(rank, host(rank), NOW - 1, (process,), notes=(note,))


def proc_only(rank: int) -> RankStacks:
    """A rank that is not Python: what /proc said of `sleep`, as the rank wrapper words it."""
    fields = dict(line.split(":\t", 1) for line in recorded("sleep.proc.txt").splitlines())
    state = f"{fields['State']} in {fields['wchan']}"
    text = f"Process {1000 + rank}: sleep 600\nState: {state}\n"
    process = ProcessStacks(1000 + rank, "sleep 600", PROC, state=state, text=text)
    return RankStacks(rank, host(rank), NOW - 1, (process,))


def waiting(rank: int) -> RankStacks:
    """A rank in all_reduce; two recordings of two processes, whose native frames differ."""
    return py_spy(f"allreduce-{rank % 2 + 1}", rank)


def job(
    others: dict[int, RankStacks], rest: Callable[[int], RankStacks] = waiting
) -> list[RankStacks]:
    return [others.get(rank) or rest(rank) for rank in range(6)]


def headline(
    stacks: list[RankStacks],
    missing: tuple[MissingStacks, ...] = (),
    progress: tuple[LastProgress, ...] = (),
) -> str:
    return hang_headline(stacks, missing, progress, TIMED_OUT, NOW)


def main_frames(stacks: RankStacks) -> tuple[Frame, ...]:
    thread = stacks.processes[0].main_thread
    assert thread is not None
    return thread.frames


# ---------------------------------------------------------------------------- user code
def test_user_frames_are_the_users_own_python_code() -> None:
    frames = main_frames(waiting(0))
    user = [frame.function for frame in frames if is_user_frame(frame)]
    assert user == ["main", "<module>"]  # not libc, libpython, threading, site-packages
    assert not is_user_frame(Frame("_find_and_load", "<frozen importlib._bootstrap>", 1024))
    assert not is_user_frame(Frame("allreduce", "/usr/lib/python3/dist-packages/mpi4py/x.py", 3))
    assert not is_user_frame(Frame("progress", str(Path(hang.__file__).with_name("x.py")), 9))
    assert is_user_frame(Frame("load_batch_forever", CODE, 12))


# ---------------------------------------------------------------------------- grouping
def test_native_frames_do_not_split_a_group() -> None:
    first, second = waiting(0), waiting(1)
    assert main_frames(first) != main_frames(second)  # libc's addresses moved with ASLR
    groups = group_stacks(job({4: py_spy("load_batch", 4)}))
    assert [group.ranks for group in groups] == [(0, 1, 2, 3, 5), (4,)]
    assert groups[0].hosts == HOSTS and groups[1].hosts == ("algo-3",)


def test_native_frames_py_spy_could_not_name_do_not_split_a_group() -> None:
    """py-spy gives such a frame (seen under TensorFlow's pybind11 dispatch) no module, its
    address for a name and "?" for a file: a native frame, whose address differs per process."""

    def rank_with_unnamed_frame(rank: int, address: str) -> RankStacks:
        frames = [
            {"name": address, "filename": "?", "module": None, "line": 0},
            {
                "name": "quick_execute",
                "filename": "/opt/venv/site-packages/tf/execute.py",
                "module": None,
                "line": 53,
            },
            {"name": "main", "filename": CODE, "module": None, "line": 17},
        ]
        dump = [
            {
                "pid": 40 + rank,
                "thread_id": 1,
                "thread_name": "MainThread",
                "os_thread_id": 40 + rank,
                "active": False,
                "frames": frames,
            }
        ]
        [(pid, threads)] = parse_py_spy_json(json.dumps(dump)).items()
        process = ProcessStacks(pid, "python train.py", PY_SPY, threads)
        return RankStacks(rank, host(rank), NOW - 1, (process,))

    first, second = (
        rank_with_unnamed_frame(0, "0x7fff0426a420"),
        rank_with_unnamed_frame(1, "0x7fffd902a420"),
    )
    assert main_frames(first)[0].native
    assert [group.ranks for group in group_stacks([first, second])] == [(0, 1)]


def test_faulthandler_ranks_group_with_py_spy_ranks_by_python_frames() -> None:
    dumped = faulthandler("allreduce", 2)
    # py-spy names functions by qualified name, faulthandler by name: the same frames.
    assert [f.function for f in main_frames(dumped)][:2] == ["wait", "wait"]
    assert [f.function for f in main_frames(waiting(0)) if not f.native][:2] == [
        "Condition.wait",
        "Event.wait",
    ]
    stacks = job({2: dumped, 3: faulthandler("allreduce", 3), 4: faulthandler("load_batch", 4)})
    groups = group_stacks(stacks)
    assert [group.ranks for group in groups] == [(0, 1, 2, 3, 5), (4,)]
    # The stack shown is py-spy's, with its native frames.
    assert groups[0].members[0].method == PY_SPY and groups[0].frames == main_frames(waiting(0))


def test_ranks_without_a_python_stack_group_by_their_proc_state() -> None:
    groups = group_stacks(job({3: proc_only(3), 5: proc_only(5)}))
    assert [group.ranks for group in groups] == [(0, 1, 2, 4), (3, 5)]
    assert not groups[1].python and groups[1].state == "S (sleeping) in hrtimer_nanosleep"


def test_groups_go_largest_first_then_by_lowest_rank() -> None:
    stacks = job({0: py_spy("load_batch", 0), 1: py_spy("load_batch", 1), 5: proc_only(5)})
    groups = group_stacks(list(reversed(stacks)))
    assert [group.ranks for group in groups] == [(2, 3, 4), (0, 1), (5,)]


# ---------------------------------------------------------------------------- the headline
def test_one_culprit_among_six_ranks_is_named_first() -> None:
    assert headline(job({4: py_spy("load_batch", 4)})) == (
        f"Rank 4 on host algo-3 is {LOAD_BATCH}, not {ALL_REDUCE} where the other 5 ranks "
        f"wait; {TIMED_OUT}."
    )


def test_two_culprits_in_one_place_are_named_together() -> None:
    stacks = job({2: py_spy("load_batch", 2), 4: faulthandler("load_batch", 4)})
    assert headline(stacks) == (
        f"Ranks 2, 4 on hosts algo-2, algo-3 are {LOAD_BATCH}, not {ALL_REDUCE} where the "
        f"other 4 ranks wait; {TIMED_OUT}."
    )


def test_two_culprits_in_two_places_are_each_named() -> None:
    stacks = job({1: py_spy("wait_forever", 1), 4: py_spy("load_batch", 4)})
    assert headline(stacks) == (
        "Rank 1 on host algo-1 is in wait_forever (train.py:18), rank 4 on host algo-3 is "
        f"{LOAD_BATCH}, not {ALL_REDUCE} where the other 4 ranks wait; {TIMED_OUT}."
    )


def test_the_others_waiting_in_user_code_are_named_by_their_frame() -> None:
    stacks = job({4: py_spy("load_batch", 4)}, rest=lambda rank: py_spy("wait_forever", rank))
    assert headline(stacks).startswith(
        f"Rank 4 on host algo-3 is {LOAD_BATCH}, not at wait_forever (train.py:18) where"
    )


def test_others_in_native_library_code_are_named_by_the_call_user_code_made() -> None:
    """mpi4py's allreduce is C: the outermost native frame of a library below user code,
    not the C library's poll or the MPI progress loop under it."""
    mpi = (
        Frame("poll", "/usr/lib/x86_64-linux-gnu/libc.so.6", native=True),
        Frame("opal_progress", "/usr/lib/x86_64-linux-gnu/libopen-pal.so.40", native=True),
        Frame("PMPI_Allreduce", "/usr/lib/x86_64-linux-gnu/libmpi.so.40", native=True),
        Frame("main", CODE, 17),
        Frame("<module>", CODE, 30),
    )
    thread = ThreadStack("MainThread", mpi, main=True)

    def in_mpi(rank: int) -> RankStacks:
        process = ProcessStacks(100 + rank, "python train.py", PY_SPY, (thread,))
        return RankStacks(rank, host(rank), NOW - 1, (process,))

    stacks = job({4: py_spy("load_batch", 4)}, rest=in_mpi)
    assert "not in PMPI_Allreduce (train.py:17) where the other 5 ranks wait" in headline(stacks)


def test_when_every_rank_waits_in_one_place_the_last_progress_is_named() -> None:
    stacks = [py_spy("wait_forever", rank) for rank in range(6)]
    progress = tuple(LastProgress(rank, host(rank), 1960.0 + rank * 3) for rank in range(6))
    progress = (*progress[:3], LastProgress(3, "algo-2", 1979.7), *progress[4:])
    assert headline(stacks, progress=progress) == (
        "Every rank (6) waits in the same place, in wait_forever (train.py:18); the last "
        f"progress came from rank 3 on host algo-2, 20.3 s before the verdict; {TIMED_OUT}."
    )


def test_ranks_that_stopped_together_are_named_together() -> None:
    stacks = [py_spy("wait_forever", rank) for rank in range(6)]
    progress = tuple(LastProgress(rank, host(rank), 1979.0 + rank * 0.4) for rank in range(6))
    assert "the last progress came from ranks 3-5 on hosts algo-2, algo-3, 19.0 s before" in (
        headline(stacks, progress=progress)
    )
    assert "no progress was seen from any rank" in headline(stacks)


def test_a_tie_names_the_group_in_user_code_not_the_one_in_a_library() -> None:
    for stuck in ((3, 4, 5), (0, 1, 2)):
        stacks = job({rank: py_spy("load_batch", rank) for rank in stuck})
        who = (
            "Ranks 3-5 on hosts algo-2, algo-3" if stuck[0] else "Ranks 0-2 on hosts algo-1, algo-2"
        )
        assert headline(stacks) == (
            f"{who} are {LOAD_BATCH}, not {ALL_REDUCE} where the other 3 ranks wait; {TIMED_OUT}."
        )


def test_a_tie_with_no_group_in_a_library_names_no_culprit() -> None:
    stacks = job(
        {rank: py_spy("load_batch", rank) for rank in range(3)},
        rest=lambda rank: py_spy("wait_forever", rank),
    )
    assert headline(stacks) == (
        f"No rank stands out: ranks 0-2 on hosts algo-1, algo-2 are {LOAD_BATCH}; ranks 3-5 "
        f"on hosts algo-2, algo-3 are in wait_forever (train.py:18); {TIMED_OUT}."
    )


def test_a_rank_with_only_its_proc_state_is_named_by_it() -> None:
    assert headline(job({5: proc_only(5)})) == (
        "Rank 5 on host algo-3 has no Python stack (/proc: S (sleeping) in hrtimer_nanosleep), "
        f"not {ALL_REDUCE} where the other 5 ranks wait; {TIMED_OUT}."
    )


def test_missing_stacks_are_appended_by_reason() -> None:
    stacks = [rank for rank in job({4: py_spy("load_batch", 4)}) if rank.rank not in (1, 5)]
    late = "they did not arrive within 10 s (ringleader_stack_dump_timeout)"
    missing = (MissingStacks(5, "algo-3", late), MissingStacks(1, "algo-1", "its host was lost"))
    assert headline(stacks, missing) == (
        f"Rank 4 on host algo-3 is {LOAD_BATCH}, not {ALL_REDUCE} where the other 3 ranks "
        f"wait; {TIMED_OUT}; no stacks from rank 1 on host algo-1: its host was lost; from "
        f"rank 5 on host algo-3: {late}."
    )


def test_every_rank_that_sent_stacks_says_so_when_some_did_not() -> None:
    stacks = [py_spy("wait_forever", rank) for rank in range(5)]
    text = headline(stacks, (MissingStacks(5, "algo-3", "it ended"),))
    assert text.startswith("Every rank that sent stacks (5) waits in the same place")
    assert text.endswith("; no stacks from rank 5 on host algo-3: it ended.")


def test_no_stacks_at_all_names_who_made_progress_last() -> None:
    late = "they did not arrive within 10 s (ringleader_stack_dump_timeout)"
    missing = tuple(MissingStacks(rank, host(rank), late) for rank in range(6))
    progress = (LastProgress(0, "algo-1", 1970.0), LastProgress(2, "algo-2", 1975.5))
    assert headline([], missing, progress) == (
        "No stacks arrived from any rank; the last progress came from rank 2 on host algo-2, "
        f"24.5 s before the verdict; {TIMED_OUT}; no stacks from ranks 0-5 on hosts algo-1, "
        f"algo-2, algo-3: {late}."
    )


def test_the_headline_stays_one_short_line_however_many_culprits() -> None:
    """512 ranks on 64 hosts: every other one stuck in a function of its own."""
    recorded_wait = waiting(0)

    def rank_of(rank: int) -> RankStacks:
        on = f"algo-{rank // 8 + 1}"
        if rank % 2 == 0:
            return replace(recorded_wait, rank=rank, host=on)
        frames = (Frame(f"load_shard_{rank}", CODE, rank), *main_frames(recorded_wait)[-2:])
        thread = ThreadStack("MainThread", frames, main=True)
        return RankStacks(rank, on, NOW - 1, (ProcessStacks(rank, "python", PY_SPY, (thread,)),))

    text = headline([rank_of(rank) for rank in range(512)])
    assert len(text) <= HEADLINE_LIMIT and "\n" not in text
    assert text == (
        "Rank 1 on host algo-1 is in load_shard_1 (train.py:1), rank 3 on host algo-1 is in "
        "load_shard_3 (train.py:3), rank 5 on host algo-1 is in load_shard_5 (train.py:5), "
        f"253 more ranks elsewhere, not {ALL_REDUCE} where the other 256 ranks wait; "
        f"{TIMED_OUT}."
    )


def test_many_culprits_in_one_place_are_counted_not_listed() -> None:
    recorded_wait, recorded_stuck = waiting(0), py_spy("load_batch", 0)
    stacks = [
        replace(
            recorded_stuck if rank % 2 else recorded_wait, rank=rank, host=f"algo-{rank // 8 + 1}"
        )
        for rank in range(512)
    ]
    assert headline(stacks) == (
        "Ranks 1, 3, 5, 7, 9, 11, 13, 15 and 248 more on hosts algo-1, algo-2, algo-3 and 61 "
        f"more are {LOAD_BATCH}, not {ALL_REDUCE} where the other 256 ranks wait; {TIMED_OUT}."
    )


# ---------------------------------------------------------------------------- the report
def report() -> HangReport:
    stacks = job({2: faulthandler("allreduce", 2), 3: faulthandler("allreduce", 3)})
    stacks[4] = py_spy("load_batch", 4)
    stacks[0] = RankStacks(
        0,
        "algo-1",
        NOW - 1,
        stacks[0].processes,
        evidence=("[W stall_inspector.cc:107] One or more tensors were submitted", "4: [grad.1]"),
    )
    missing = (MissingStacks(5, "algo-3", "it ended (exit code 1) before its stacks were taken"),)
    del stacks[5]
    progress = tuple(LastProgress(rank, host(rank), 1978.0) for rank in range(6))
    text = hang_headline(stacks, missing, progress, TIMED_OUT, NOW)
    return HangReport("hang", TIMEOUT, NOW, text, tuple(stacks), missing, progress)


def test_the_report_travels_as_json() -> None:
    original = report()
    data = json.loads(json.dumps(original.to_json()))
    assert HangReport.from_json(data) == original
    assert list(data) == [
        "reason",
        "timeout",
        "taken_at",
        "headline",
        "stacks",
        "missing",
        "last_progress",
    ]
    assert (
        data["missing"][0]
        == original.missing[0].to_json()
        == {
            "rank": 5,
            "host": "algo-3",
            "reason": "it ended (exit code 1) before its stacks were taken",
        }
    )
    assert data["last_progress"][0] == {"rank": 0, "host": "algo-1", "at": 1978.0}


@pytest.mark.parametrize("data", [[], {"reason": "hang"}, {**report().to_json(), "stacks": [1]}])
def test_what_is_not_a_report_is_a_value_error(data: object) -> None:
    with pytest.raises(ValueError, match="not a hang report"):
        HangReport.from_json(data)


def test_the_summary_groups_ranks_by_stack() -> None:
    lines = report().summary_lines()
    assert lines == [
        f"Rank 4 on host algo-3 is {LOAD_BATCH}, not {ALL_REDUCE} where the other 4 ranks wait; "
        f"{TIMED_OUT}; no stacks from rank 5 on host algo-3: it ended (exit code 1) before its "
        "stacks were taken.",
        "No stacks from rank 5 on host algo-3: it ended (exit code 1) before its stacks were taken",
        "Note on ranks 2, 3 on host algo-2: py-spy not usable (Permission denied: ptrace not "
        "allowed): used faulthandler",
        "Evidence from rank 0 on host algo-1:",
        "    [W stall_inspector.cc:107] One or more tensors were submitted",
        "    4: [grad.1]",
        "4 ranks (0-3 on algo-1, algo-2), via py-spy (0, 1), faulthandler (2, 3):",
        "    PyThread_acquire_lock_timed (libpython3.11.so.1.0)",
        "    lock_PyThread_acquire_lock (libpython3.11.so.1.0)",
        "    Condition.wait (threading.py:327)",
        "    Event.wait (threading.py:629)",
        "    all_reduce (distributed_c10d.py:17)",
        "    _exception_logger.<locals>.wrapper (distributed_c10d.py:10)",
        "    main (train.py:27)",
        "    <module> (train.py:39)",
        "1 rank (4 on algo-3), via py-spy:",
        "    clock_nanosleep (libc.so.6)",
        "    time_sleep (libpython3.11.so.1.0)",
        "    load_batch_forever (train.py:13)",
        "    main (train.py:26)",
        "    <module> (train.py:39)",
    ]


def test_a_group_without_python_shows_its_proc_state() -> None:
    stacks = job({5: proc_only(5)})
    lines = HangReport("hang", TIMEOUT, NOW, headline(stacks), tuple(stacks)).summary_lines()
    assert lines[-2:] == [
        "1 rank (5 on algo-3), via /proc:",
        "    no Python stack (/proc: S (sleeping) in hrtimer_nanosleep)",
    ]


def test_a_ranks_text_has_every_process_and_thread_with_full_paths() -> None:
    parent, worker = py_spy("load_batch", 4), py_spy("worker", 4)
    stacks = RankStacks(4, "algo-3", 1750000000.25, (*parent.processes, *worker.processes))
    text = rank_text(stacks)
    assert text.startswith("Rank 4 on host algo-3: stacks taken 2025-06-15 15:06:40.250 UTC\n")
    for process in stacks.processes:
        assert f"\nProcess {process.pid}: python train.py (via py-spy)\n" in text
    assert text.count('Thread "MainThread" (main, idle):') == 2
    assert 'Thread "prefetch" (idle):' in text
    assert "    load_batch_forever (/tmp/hangrec/code/train.py:13)\n" in text
    assert "    wait_forever (/tmp/hangrec/code/train.py:18)\n" in text  # in the worker
    assert "    clock_nanosleep (/usr/lib/x86_64-linux-gnu/libc.so.6)\n" in text


def test_a_ranks_text_without_python_is_procs_own() -> None:
    text = rank_text(proc_only(5))
    assert "Process 1005: sleep 600 (via /proc; /proc: S (sleeping) in hrtimer_nanosleep)" in text
    assert text.endswith("    State: S (sleeping) in hrtimer_nanosleep\n")
    faulted = rank_text(faulthandler("allreduce", 2))
    assert "\nNote: py-spy not usable for pid 1002 (Permission denied" in faulted
    assert "Thread 0x" in faulted and "(main):" in faulted
