"""Horovod timeline parsing and summary: the exact text shapes of horovod/common/timeline.cc."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringleader.tools.report.timeline import (
    TimelineError,
    TraceStream,
    parse_trace,
    summarise,
    summarise_text,
)

FIXTURE = (
    Path(__file__).parents[1]
    / "report"
    / "fixtures"
    / "local-job"
    / "algo-1"
    / "output"
    / "data"
    / "horovod_timeline.json"
)

HEADER = (
    "[\n"
    '{"name": "process_name", "ph": "M", "pid": 0, "args": '
    '{"start_time_since_epoch_in_micros":1750000001200000}},\n'
    '{"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}},\n'
)


def tensor(pid: int, name: str) -> list[str]:
    return [
        f'{{"name": "process_name", "ph": "M", "pid": {pid}, "args": {{"name": "{name}"}}}}',
        f'{{"name": "process_sort_index", "ph": "M", "pid": {pid}, '
        f'"args": {{"sort_index": {pid}}}}}',
    ]


def ev(phase: str, ts: int, pid: int, name: str | None = None, args: str = "") -> str:
    text = f'{{"ph": "{phase}"' + (f', "name": "{name}"' if name is not None else "")
    text += f', "ts": {ts}, "pid": {pid}' + (', "dur": 0' if phase == "X" else "")
    return text + (f', "args": {{{args}}}' if args else "") + "}"


def allreduce_step(pid: int, t: int, ready: dict[int, int], mpi: int) -> list[str]:
    """One negotiation (rank ticks at t+offset) and one allreduce with two activities."""
    end = t + max(ready.values()) + 10
    events = [ev("B", t, pid, "NEGOTIATE_ALLREDUCE")]
    events += [ev("X", t + offset, pid, str(rank)) for rank, offset in ready.items()]
    events += [
        ev("E", end, pid),
        ev("B", end, pid, "ALLREDUCE"),
        ev("B", end, pid, "QUEUE"),
        ev("E", end + 5, pid),
        ev("B", end + 5, pid, "MPI_ALLREDUCE"),
        ev("E", end + 5 + mpi, pid),
        ev("E", end + 10 + mpi, pid, args='"dtype": "float32", "shape": "[4]"'),
    ]
    return events


def horovod_file(events: list[str], closed: bool = True) -> str:
    """Horovod overwrites its closing `]` with a comma before each new event."""
    body = HEADER + ",".join(events)
    return body + "]" if closed else body


@pytest.fixture
def two_tensors() -> list[str]:
    events = tensor(1, "grad.w")
    events += allreduce_step(1, 1000, {0: 10, 1: 50, 2: 100}, mpi=200)
    events.append('{"ph": "i", "name": "CYCLE_START", "ts": 1500, "s": "g"}')
    events += tensor(2, "grad.b")
    events += allreduce_step(2, 2000, {0: 90, 1: 20, 2: 30}, mpi=40)
    events += allreduce_step(1, 3000, {0: 5, 1: 10, 2: 60}, mpi=100)
    return events


def test_a_complete_file_is_plain_json(two_tensors: list[str]) -> None:
    text = horovod_file(two_tensors)
    trace = parse_trace(text)
    assert not trace.truncated
    assert len(trace.events) == len(json.loads(text))


def test_a_file_missing_its_closing_bracket_keeps_every_event(two_tensors: list[str]) -> None:
    trace = parse_trace(horovod_file(two_tensors, closed=False))
    assert trace.truncated
    assert len(trace.events) == 2 + len(two_tensors)


def test_a_file_cut_inside_an_event_keeps_the_complete_ones(two_tensors: list[str]) -> None:
    text = horovod_file(two_tensors, closed=False)
    trace = parse_trace(text[:-12] + "\n")
    assert trace.truncated
    assert len(trace.events) == 2 + len(two_tensors) - 1
    assert parse_trace(text + ",\n").truncated  # cut right after Horovod's comma


@pytest.mark.parametrize("cut", [0, 1, 12])
def test_large_files_are_decoded_in_chunks_with_the_same_result(
    two_tensors: list[str], cut: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = horovod_file(two_tensors, closed=cut == 0)
    text = text[: len(text) - cut] if cut else text
    whole = parse_trace(text)
    monkeypatch.setattr(TraceStream, "CHUNK", 40)
    chunked = parse_trace(text)
    assert chunked == whole and chunked.truncated == (cut != 0)
    assert summarise_text(text) == summarise(whole.events, whole.truncated)


def test_a_chunk_split_inside_an_event_falls_back_to_event_by_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    odd = [*tensor(1, 'a},{\\"b'), ev("B", 1, 1, "ALLREDUCE"), ev("E", 9, 1)]
    text = horovod_file(odd)
    monkeypatch.setattr(TraceStream, "CHUNK", 10)
    trace = parse_trace(text)
    assert len(trace.events) == 6 and not trace.truncated
    assert summarise(trace.events).allreduce[0].tensor == 'a},{"b'


def test_chrome_object_form_is_accepted() -> None:
    trace = parse_trace(json.dumps({"traceEvents": [{"ph": "i", "ts": 1, "name": "x"}]}))
    assert len(trace.events) == 1 and not trace.truncated


@pytest.mark.parametrize("text", ["", "  \n", '{"a": 1}', "hello"])
def test_not_a_trace_is_an_error(text: str) -> None:
    with pytest.raises(TimelineError):
        parse_trace(text)


def test_operations_are_totalled_by_name_with_activities_apart(two_tensors: list[str]) -> None:
    summary = summarise_text(horovod_file(two_tensors))
    ops = {(op.name, op.activity): op for op in summary.ops}
    # allreduce: from the negotiation's end to its own end = mpi + 10, three times
    assert ops["ALLREDUCE", False].count == 3
    assert ops["ALLREDUCE", False].total_us == (200 + 10) + (40 + 10) + (100 + 10)
    assert ops["MPI_ALLREDUCE", True].total_us == 200 + 40 + 100
    assert ops["QUEUE", True].total_us == 15 and ops["QUEUE", True].mean_us == 5
    assert ops["NEGOTIATE_ALLREDUCE", False].total_us == 110 + 100 + 70
    assert summary.ops[0].name == "ALLREDUCE"  # largest first
    assert summary.negotiations == 3
    assert summary.tensors == 2 and summary.cycles == 1
    assert summary.start_epoch == pytest.approx(1750000001.2)
    assert summary.unclosed == 0 and not summary.truncated


def test_allreduce_time_per_tensor_uses_the_tensor_names(two_tensors: list[str]) -> None:
    summary = summarise_text(horovod_file(two_tensors))
    assert [(t.tensor, t.count, t.total_us) for t in summary.allreduce] == [
        ("grad.w", 2, 210 + 110),
        ("grad.b", 1, 50),
    ]
    assert summary.allreduce[0].negotiation_us == 110 + 70


def test_negotiation_wait_per_rank_counts_time_until_the_last_rank(
    two_tensors: list[str],
) -> None:
    waits = {w.rank: w for w in summarise_text(horovod_file(two_tensors)).waits}
    assert sorted(waits) == [0, 1, 2]
    # negotiation ends 10 us after the last tick: (end - tick) summed over three negotiations
    assert waits[0].wait_us == (100 + 10 - 10) + (90 + 10 - 90) + (60 + 10 - 5)
    assert waits[2].wait_us == 10 + (90 + 10 - 30) + 10
    assert (waits[0].last_count, waits[1].last_count, waits[2].last_count) == (1, 0, 2)
    assert all(w.negotiations == 3 for w in waits.values())
    assert waits[2].mean_wait_us == pytest.approx(90 / 3)


def test_unclosed_operations_and_stray_ends_are_tolerated() -> None:
    events = [
        *tensor(1, "t"),
        ev("E", 5, 1),  # an end with no begin (the timeline was started mid-operation)
        ev("B", 10, 1, "ALLREDUCE"),
        ev("B", 12, 1, "MPI_ALLREDUCE"),
        '{"ph": "B", "name": "ALLREDUCE", "pid": 1}',  # no timestamp: ignored
    ]
    summary = summarise_text(horovod_file(events, closed=False))
    assert summary.unclosed == 2 and summary.truncated
    assert summary.ops == () and summary.allreduce == ()


def test_complete_events_outside_negotiation_count_as_operations() -> None:
    summary = summarise([{"ph": "X", "name": "custom", "ts": 1, "dur": 25, "pid": 3}])
    assert [(op.name, op.total_us) for op in summary.ops] == [("custom", 25)]
    assert summary.waits == ()


def test_the_fixture_file_shows_its_straggler() -> None:
    summary = summarise_text(FIXTURE.read_text())
    assert summary.truncated and summary.tensors == 3
    straggler = max(summary.waits, key=lambda w: w.last_count)
    assert straggler.rank == 4 and straggler.last_count == summary.negotiations == 36
    assert min(summary.waits, key=lambda w: w.wait_us).rank == 4
    assert summary.allreduce[0].tensor == "allreduce.fc1.weight"
