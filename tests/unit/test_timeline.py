"""The launcher's timeline: marks, spans, the summary line, job.json and the Chrome trace."""

import json
import threading

from ringleader.core import timeline as phases
from ringleader.core.jobfile import parse_job_file
from ringleader.core.outcome import Outcome
from ringleader.core.records import RankRecord
from ringleader.core.results import TRACE_FILE, write_job_summary
from ringleader.core.timeline import Mark, Timeline

RECORDS = (
    RankRecord(0, "algo-1", 0, None, 103.0, 110.0, False, (), first_output_at=103.5),
    RankRecord(1, "algo-1", 0, None, 103.2, 110.5, False, (), first_output_at=103.4),
    RankRecord(
        2,
        "algo-2",
        0,
        None,
        104.0,
        110.2,
        False,
        (),
        daemon_started_at=103.3,
        wrapper_started_at=103.6,
    ),
)
MARKS = [
    Mark("algo-1", phases.ENTRY, 100.0),
    Mark("algo-2", phases.ENTRY, 100.5),
    Mark("algo-1", phases.CONFIG, 100.8),
    Mark("algo-2", phases.CONFIG, 102.5),
    Mark("algo-2", phases.CONNECTED, 102.6),
    Mark("algo-2", phases.SSH_CHECKED, 102.9),
    Mark("algo-1", phases.WORKERS_UP, 102.9),
    Mark("algo-1", phases.LAUNCHED, 103.0),
]


def test_marks_from_threads_come_back_in_time_order():
    timeline = Timeline()
    threads = [
        threading.Thread(target=timeline.mark, args=(f"h{i}", phases.CONFIG, 10.0 - i))
        for i in range(5)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [mark.at for mark in timeline.marks()] == [6.0, 7.0, 8.0, 9.0, 10.0]
    assert [mark.host for mark in timeline.of("h2")] == ["h2"]


def test_rank_marks_per_host():
    assert phases.rank_marks(RECORDS) == [
        Mark("algo-1", phases.FIRST_RANK, 103.0),
        Mark("algo-1", phases.FIRST_OUTPUT, 103.4),
        Mark("algo-1", phases.LAST_RANK_ENDED, 110.5),
        Mark("algo-2", phases.MPI_DAEMON_UP, 103.3),
        Mark("algo-2", phases.WRAPPER_STARTED, 103.6),
        Mark("algo-2", phases.FIRST_RANK, 104.0),
        Mark("algo-2", phases.LAST_RANK_ENDED, 110.2),
    ]


def test_a_rank_record_keeps_its_launch_times_through_json():
    assert RankRecord.from_json(json.loads(json.dumps(RECORDS[2].to_json()))) == RECORDS[2]


def test_spans_and_summary_name_the_slowest_host_and_phase():
    marks = MARKS + phases.rank_marks(RECORDS)
    spans = phases.spans(marks)
    config = next(s for s in spans if s.host == "algo-2" and s.phase == phases.CONFIG)
    assert (config.start, config.end) == (100.5, 102.5)
    assert phases.summary_line(marks) == (
        "startup 4.00 s; slowest host algo-2; longest phase: algo-2 reaching "
        "'configuration read' took 2.00 s"
    )
    assert phases.summary_line([]) is None


def test_after_a_restart_in_place_the_summary_is_the_first_attempts_startup():
    """Each attempt adds its ranks' marks; the startup is the job's first start of its ranks,
    not the later attempts' (whose ranks start seconds later, after a failure)."""
    later = [
        RankRecord(rank, host, 0, None, at, at + 5, False, (), wrapper_started_at=at - 0.2)
        for rank, host, at in ((0, "algo-1", 130.0), (2, "algo-2", 131.0))
    ]
    relaunched = Mark("algo-1", phases.LAUNCHED, 129.0)
    marks = MARKS + phases.rank_marks(RECORDS) + [relaunched] + phases.rank_marks(later)
    assert phases.summary_line(marks) == (
        "startup 4.00 s; slowest host algo-2; longest phase: algo-2 reaching "
        "'configuration read' took 2.00 s"
    )


def test_chrome_trace_has_a_process_per_host_and_a_thread_per_rank():
    trace = phases.chrome_trace(MARKS, RECORDS)
    events = trace["traceEvents"]
    names = {e["args"]["name"]: e["pid"] for e in events if e["name"] == "process_name"}
    assert names == {"algo-1": 1, "algo-2": 2}
    config = next(
        e for e in events if e["ph"] == "X" and e["name"] == phases.CONFIG and e["pid"] == 2
    )
    assert (config["ts"], config["dur"]) == (100_500_000, 2_000_000)
    rank2 = next(e for e in events if e["ph"] == "X" and e["name"].startswith("rank 2"))
    assert (rank2["pid"], rank2["tid"], rank2["dur"]) == (2, 3, 6_200_000)
    json.dumps(trace)  # serialisable as is


def test_job_json_holds_the_timeline_and_the_trace_is_written_beside_it(tmp_path):
    path = tmp_path / "job.json"
    write_job_summary(path, Outcome(0, None), list(RECORDS), ["algo-1", "algo-2"], 3, MARKS)
    read = parse_job_file(path.read_text())
    assert read.timeline == tuple(MARKS)
    trace = json.loads((tmp_path / TRACE_FILE).read_text())
    assert any(e["name"] == phases.LAUNCHED for e in trace["traceEvents"])


def test_an_unreadable_timeline_entry_is_a_problem_not_a_failure():
    text = json.dumps(
        {"exit_code": 0, "ranks": [], "timeline": [{"host": "a"}, MARKS[0].to_json()]}
    )
    read = parse_job_file(text)
    assert read.timeline == (MARKS[0],)
    assert read.problems and "timeline" in read.problems[0]


def test_every_phase_has_a_colour_of_its_own_in_the_gantt_chart():
    from ringleader.tools.report.charts import PHASE_COLORS

    assert len(set(PHASE_COLORS)) >= len(phases.PHASES)
