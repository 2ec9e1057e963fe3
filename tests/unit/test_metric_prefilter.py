"""The metric prefilter (`required_text`) never changes what extract() finds.

extract() skips a line without a definition's `required_text` before running its regex; that is
only correct when every match of the regex contains that text. Property: for any definition and
any line, extract() with the prefilter finds exactly what the regex alone finds.
"""

import re

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from ringleader.config.metric_definitions import (
    MetricDefinition,
    literal_prefix,
    parse_definitions,
)
from ringleader.output.metrics import extract
from tests.properties import examples

FIELD = "metric_definitions"

# Pieces of regexes: literals, metacharacters, quantifiers, classes, escapes, anchors.
REGEX_PIECES = [
    "loss",
    "LOSS",
    "step",
    "acc",
    "s",
    "=",
    " ",
    ":",
    "|",
    "(",
    ")",
    "?",
    "*",
    "+",
    "{0,2}",
    "{2}",
    ".",
    "[0-9.]+",
    "([0-9.]+)",
    "\\d",
    "\\s",
    "^",
    "$",
]
# Pieces of lines: the same words in other cases, numbers, separators.
LINE_PIECES = [
    "loss",
    "LOSS",
    "Loss",
    "los",
    "step",
    "STEP",
    "acc",
    "s",
    "ss",
    "=",
    ":",
    " ",
    "\t",
    "0.5",
    "1",
    "2.",
    "7",
    ".",
    "x",
    "\n",
]

pieces = st.lists(st.sampled_from(REGEX_PIECES), max_size=6).map("".join)


@st.composite
def regexes(draw: st.DrawFn) -> str:
    """Mostly `<pieces>(<pieces>)<pieces>` (always a group); sometimes pieces alone."""
    flags = draw(st.sampled_from(["", "", "", "(?i)"]))
    if draw(st.booleans()):
        body = draw(pieces) + "(" + draw(pieces) + ")" + draw(pieces)
    else:
        body = draw(st.lists(st.sampled_from(REGEX_PIECES), min_size=1, max_size=10).map("".join))
    return flags + body


lines = st.lists(st.sampled_from(LINE_PIECES), max_size=10).map("".join)


def compiled(regex: str) -> re.Pattern[str]:
    try:
        pattern = re.compile(regex)
    except re.error:
        assume(False)
        raise  # unreachable: assume(False) rejects the example
    assume(pattern.groups >= 1)
    return pattern


@settings(
    max_examples=examples(1000),
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much],
)
@given(regex=regexes(), line=lines)
@example(regex="step|loss=([0-9.]+)", line="loss=0.5")
@example(regex="(?i)LOSS=([0-9.]+)", line="loss=0.5")
@example(regex="los?s=([0-9.]+)", line="los=0.5")
@example(regex="loss{0,2}=([0-9.]+)", line="los=0.5")
@example(regex="loss+=([0-9.]+)", line="lossss=0.5")
def test_prefilter_never_changes_what_is_extracted(regex: str, line: str) -> None:
    pattern = compiled(regex)
    (definition,) = parse_definitions(FIELD, [{"Name": "m", "Regex": regex}])
    reference = MetricDefinition("m", pattern, required_text="")
    assert extract([definition], line) == extract([reference], line)
    # Stronger than the values: the prefilter never skips a line the regex matches at all.
    if pattern.search(line) is not None:
        assert definition.required_text in line


@settings(
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much],
)
@given(regex=regexes(), line=lines, flags=st.sampled_from([0, re.IGNORECASE, re.VERBOSE]))
def test_prefix_of_a_compiled_pattern_honours_its_flags(regex: str, line: str, flags: int) -> None:
    try:
        pattern = re.compile(regex, flags)
    except re.error:
        assume(False)
        raise
    if pattern.search(line) is not None:
        assert literal_prefix(pattern) in line


def test_alternation_finds_the_loss_line() -> None:
    definitions = parse_definitions(FIELD, [{"Name": "loss", "Regex": "step|loss=([0-9.]+)"}])
    assert definitions[0].required_text == ""
    # The first alternative matches no number: group 1 is None, so nothing is recorded.
    assert extract(definitions, "step 3") == []
    assert extract(definitions, "loss=0.5") == [("loss", 0.5)]


def test_inline_ignorecase_finds_the_lowercase_line() -> None:
    definitions = parse_definitions(FIELD, [{"Name": "loss", "Regex": "(?i)LOSS=([0-9.]+)"}])
    assert definitions[0].required_text == ""
    assert extract(definitions, "loss=0.5") == [("loss", 0.5)]


def test_ignorecase_on_the_compiled_pattern_turns_the_prefix_off() -> None:
    assert literal_prefix(re.compile("LOSS=([0-9.]+)")) == "LOSS="
    assert literal_prefix(re.compile("LOSS=([0-9.]+)", re.IGNORECASE)) == ""
    assert literal_prefix(re.compile("lo ss=([0-9.]+)", re.VERBOSE)) == ""


@pytest.mark.parametrize(
    ("regex", "prefix"),
    [
        # The common shapes keep their prefilter (the speed of metric extraction).
        ("loss=([0-9.]+)", "loss="),
        ("acc=([0-9.]+)", "acc="),
        ("throughput=([0-9.]+) samples/s", "throughput="),
        ("val_loss: ([0-9.]+)", "val_loss: "),
        ("lr=([0-9.e-]+)", "lr="),
        # A quantifier after the run: *, ? and {} make the last character optional; + does not.
        ("loss*=([0-9.]+)", "los"),
        ("loss?=([0-9.]+)", "los"),
        ("loss{0,2}=([0-9.]+)", "los"),
        ("loss+=([0-9.]+)", "loss"),
        (r"loss\=([0-9.]+)", "loss"),  # an escape ends the run
        # Anything that could make the run optional or match differently: no prefilter.
        ("step|loss=([0-9.]+)", ""),
        ("loss=([0-9.]+)|step", ""),
        ("loss=([0-9]+|x)", ""),
        (r"loss\|=([0-9.]+)", ""),
        ("(?i)loss=([0-9.]+)", ""),
        ("loss=(?P<v>[0-9.]+)", ""),
        ("loss(?=x)=([0-9.]+)", ""),
        ("(loss)=([0-9.]+)", ""),
        ("^loss=([0-9.]+)", ""),
    ],
)
def test_literal_prefix(regex: str, prefix: str) -> None:
    assert literal_prefix(regex) == prefix
    assert literal_prefix(re.compile(regex)) == prefix
