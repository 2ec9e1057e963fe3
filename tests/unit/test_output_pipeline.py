"""Line splitting, rank selection, metric extraction and the leader's output printer."""

import io
import json
from pathlib import Path

import pytest

from ringleader.config.job import parse_job_config
from ringleader.config.metric_definitions import literal_prefix, parse_definitions
from ringleader.config.selection import ALL_RANKS, RANK_ZERO, RankSelection
from ringleader.config.topology import parse_topology
from ringleader.core.errors import ConfigError
from ringleader.launch.strategy import rank_command
from ringleader.output.lines import LineSplitter
from ringleader.output.metrics import MetricRecorder, extract
from ringleader.output.printer import OutputPrinter, tag
from ringleader.wire.protocol import OUTPUT_FRAME, output_frame

FIELD = "ringleader_metric_definitions"


def split_all(chunks, max_line=1024):
    splitter = LineSplitter(max_line=max_line)
    lines = [line for chunk in chunks for line in splitter.feed(chunk)]
    return lines + splitter.flush()


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([b"a\nb\n"], [b"a", b"b"]),
        ([b"a\r\nb\r\n"], [b"a", b"b"]),
        ([b"10%\r20%\r30%\n"], [b"10%", b"20%", b"30%"]),  # a progress bar, one line per update
        ([b"ab", b"c\nd"], [b"abc", b"d"]),  # lines across chunks; a last line without newline
        ([b"a\r", b"\nb\n"], [b"a", b"b"]),  # \r\n split across two reads is one terminator
        ([b"a\r", b"b\n"], [b"a", b"b"]),
        ([b"\n\n"], [b"", b""]),
    ],
)
def test_line_splitter(chunks, expected):
    assert split_all(chunks) == expected


def test_long_lines_are_cut_into_bounded_pieces():
    assert split_all([b"x" * 10 + b"\n"], max_line=4) == [b"xxxx", b"xxxx", b"xx"]
    assert split_all([b"y" * 5, b"y" * 5], max_line=4) == [b"yyyy", b"yyyy", b"yy"]


def test_nothing_is_lost_in_random_chunking():
    text = b"".join(f"line {index} {'z' * (index % 50)}\n".encode() for index in range(500))
    chunks = [text[start : start + 37] for start in range(0, len(text), 37)]
    assert split_all(chunks, max_line=10_000) == text.splitlines()


@pytest.mark.parametrize(
    ("value", "ranks"),
    [("all", None), ("ALL", None), (0, {0}), ("0", {0}), ("0,3", {0, 3}), ([1, 2], {1, 2})],
)
def test_rank_selection(value, ranks):
    selection = RankSelection.parse("ringleader_log_ranks", value)
    assert selection.ranks == (None if ranks is None else frozenset(ranks))


@pytest.mark.parametrize("value", ["", "some", "-1", "1,x", True, [True], 1.5, None])
def test_rank_selection_rejects_nonsense(value):
    with pytest.raises(ConfigError) as error:
        RankSelection.parse("ringleader_log_ranks", value)
    assert error.value.field == "ringleader_log_ranks"


def test_metric_definitions_from_json_text_and_lists():
    definitions = parse_definitions(FIELD, '[{"Name": "loss", "Regex": "loss=([0-9.]+)"}]')
    assert [d.name for d in definitions] == ["loss"]
    assert extract(definitions, "[algo-1 rank 0] step 3 loss=0.25") == [("loss", 0.25)]
    assert extract(definitions, "no metric here") == []
    assert parse_definitions(FIELD, None) == ()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("not json", "not valid JSON"),
        ({"Name": "a"}, "expected a list"),
        ([{"Name": "a"}], "item 0"),
        ([{"Name": "a", "Regex": "x", "Extra": 1}], "item 0"),
        ([{"Name": "", "Regex": "(x)"}], "non-empty"),
        ([{"Name": "a", "Regex": "loss=([0-9"}], "invalid regex"),
        ([{"Name": "a", "Regex": "loss=[0-9]+"}], "needs a group"),
    ],
)
def test_bad_metric_definitions_name_the_field(value, problem):
    with pytest.raises(ConfigError) as error:
        parse_definitions(FIELD, value)
    assert error.value.field == FIELD
    assert problem in str(error.value)


def test_a_match_that_is_not_a_number_is_skipped():
    definitions = parse_definitions(FIELD, [{"Name": "acc", "Regex": "acc=(\\S+)"}])
    assert extract(definitions, "acc=n/a") == []
    assert extract(definitions, "acc=1e-3") == [("acc", 0.001)]


def test_metric_recorder_writes_records_and_summary(tmp_path):
    definitions = parse_definitions(
        FIELD,
        [{"Name": "loss", "Regex": "loss=([0-9.]+)"}, {"Name": "acc", "Regex": "acc=([0-9.]+)"}],
    )
    recorder = MetricRecorder(definitions, tmp_path / "data" / "metrics.jsonl")
    for value in (0.9, 0.5, 0.7):
        recorder.observe(f"loss={value} acc={1 - value:.1f}", rank=0, host="algo-1")
    recorder.close()
    records = [
        json.loads(line) for line in (tmp_path / "data" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [(r["name"], r["value"], r["rank"], r["host"]) for r in records[:2]] == [
        ("loss", 0.9, 0, "algo-1"),
        ("acc", 0.1, 0, "algo-1"),
    ]
    assert len(records) == 6
    assert recorder.summary_lines() == [
        "metric acc: last=0.3 min=0.1 max=0.5 count=3",
        "metric loss: last=0.7 min=0.5 max=0.9 count=3",
    ]


def output_message(rank, lines, stream="stdout", host="algo-2"):
    encoded = output_frame({"rank": rank, "host": host, "stream": stream, "lines": lines})
    assert encoded.startswith(OUTPUT_FRAME)  # how agents and the leader recognise it
    return encoded


def test_printer_tags_whole_lines_and_filters_ranks(tmp_path):
    stdout, stderr = io.BytesIO(), io.BytesIO()
    printer = OutputPrinter(RankSelection(frozenset({1})), ALL_RANKS, None, stdout, stderr)
    printer.deliver(output_message(0, ["hidden"]))
    printer.deliver(output_message(1, ["shown", "too"]))
    printer.deliver(output_message(1, ["oops"], stream="stderr"))
    assert stdout.getvalue() == b"[algo-2 rank 1] shown\n[algo-2 rank 1] too\n"
    assert stderr.getvalue() == b"[algo-2 rank 1] oops\n"
    assert tag("algo-2", 1) == "[algo-2 rank 1] "


def test_printer_extracts_metrics_from_selected_ranks_only(tmp_path):
    definitions = parse_definitions(FIELD, [{"Name": "loss", "Regex": "loss=([0-9.]+)"}])
    recorder = MetricRecorder(definitions, tmp_path / "metrics.jsonl")
    printer = OutputPrinter(ALL_RANKS, RANK_ZERO, recorder, io.BytesIO(), io.BytesIO())
    printer.deliver(output_message(0, ["loss=1.5"], host="algo-1"))
    printer.deliver(output_message(3, ["loss=9.9"]))  # not rank 0: shown, not counted
    assert printer.close() == ["metric loss: last=1.5 min=1.5 max=1.5 count=1"]
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["value"] for line in lines] == [1.5]


@pytest.mark.parametrize(
    ("regex", "prefix"),
    [
        ("loss=([0-9.]+)", "loss="),
        ("val_loss: ([0-9.]+)", "val_loss: "),
        ("ab*c", "a"),  # b is optional
        ("ab+c", "ab"),  # b is required at least once
        ("x?y", ""),
        ("(?i)loss=(.*)", ""),
        (r"\d+ (x)", ""),
    ],
)
def test_literal_prefix_is_what_every_match_starts_with(regex, prefix):
    assert literal_prefix(regex) == prefix


def test_prefilter_does_not_change_what_matches():
    definitions = parse_definitions(
        FIELD,
        [{"Name": "a", "Regex": "ab*c=([0-9]+)"}, {"Name": "n", "Regex": "(?i)LOSS=([0-9]+)"}],
    )
    assert extract(definitions, "ac=1 loss=2") == [("a", 1.0), ("n", 2.0)]
    assert extract(definitions, "abbbc=3") == [("a", 3.0)]


def test_non_finite_values_are_not_recorded():
    definitions = parse_definitions(FIELD, [{"Name": "x", "Regex": "x=(\\S+)"}])
    assert extract(definitions, "x=nan") == []
    assert extract(definitions, "x=inf") == []


@pytest.mark.parametrize(
    ("shown", "metered", "relayed"),
    [("0", "0", "0"), ("0,3", "1", "0,1,3"), ("all", "0", "all"), ("2", "all", "all")],
)
def test_the_wrapper_relays_the_ranks_shown_or_metered(shown, metered, relayed):
    config = parse_job_config(
        parse_topology({}, {"hosts": ["algo-1", "algo-2"], "current_host": "algo-1"}),
        {
            "sagemaker_program": "t.py",
            "ringleader_log_ranks": shown,
            "ringleader_metric_ranks": metered,
        },
        {},
    )
    argv = rank_command(config, ["python", "t.py"], ())
    assert argv[argv.index("--relay-ranks") + 1] == relayed
    assert str(RankSelection.parse("x", relayed)) == relayed  # read back as written


def test_a_full_disk_stops_metrics_jsonl_but_never_the_summary(tmp_path):
    """Issue 23: /dev/full answers every write with ENOSPC. The write error used to escape
    into the control thread that delivered the line, and the worker was taken for lost."""
    definitions = parse_definitions(FIELD, [{"Name": "loss", "Regex": "loss=([0-9.]+)"}])
    recorder = MetricRecorder(definitions, Path("/dev/full"))
    printer = OutputPrinter(ALL_RANKS, ALL_RANKS, recorder, io.BytesIO(), io.BytesIO())
    for value in range(1000):  # ~100 KB of records: the buffer is flushed, and fails, mid-job
        printer.deliver(output_message(0, [f"loss={value}"], host="algo-1"))
    summary = printer.close()
    assert summary[0] == "metric loss: last=999 min=0 max=999 count=1000"
    assert summary[1] == (
        "warning: /dev/full stopped: No space left on device; the counts above are complete"
    )


class ClosedPipe(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[no-untyped-def, override]
        raise BrokenPipeError(32, "Broken pipe")


def test_a_stdout_that_fails_stops_showing_rank_output_not_the_job():
    printer = OutputPrinter(ALL_RANKS, RANK_ZERO, None, ClosedPipe(), io.BytesIO())
    printer.deliver(output_message(0, ["lost line"]))
    printer.deliver(output_message(0, ["another"]))  # no second attempt, no exception
    assert printer.delivered == 2
    assert printer.close() == ["warning: rank output not shown from here on: Broken pipe"]
