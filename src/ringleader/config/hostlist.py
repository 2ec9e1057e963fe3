"""Slurm's compact host list syntax (`node[01-03,07],login1`) expanded into host names, in the
order and with the zero padding that `scontrol show hostnames` prints."""

import itertools
import math
import re

from ringleader.core.errors import ConfigError

MAX_HOSTS = 65536  # Slurm's limit on one range (MAX_RANGE); held here for the whole list

# A comma splits items unless a "]" follows it before any "[" does, i.e. it sits in brackets.
_ITEM_SEPARATOR = re.compile(r",(?![^\[]*\])")
# re.split with a capturing group: text, bracket contents, text, bracket contents, ..., text.
_BRACKET = re.compile(r"\[([^\[\]]*)\]")
# ASCII digits only: int() alone would also take "+1", " 1", "1_0" and other scripts' digits.
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")

# One bracket: its ranges as (first, last, width of the first number as written).
_Ranges = list[tuple[int, int, int]]


def expand_hostlist(text: str, field: str = "SLURM_JOB_NODELIST") -> tuple[str, ...]:
    """The host names of a Slurm host list, duplicates kept; a ConfigError for `field` if bad."""
    if not text.strip():
        raise ConfigError(field, f"the host list {text!r} is empty")
    parsed = [_parse_item(item.strip(), text, field) for item in _ITEM_SEPARATOR.split(text)]
    total = sum(math.prod(_count(ranges) for ranges in brackets) for _, brackets in parsed)
    # Counted before expanding anything, so a huge list costs no memory.
    if total > MAX_HOSTS:
        raise ConfigError(field, f"{text!r} expands to {total} hosts, more than {MAX_HOSTS}")
    hosts: list[str] = []
    for texts, brackets in parsed:
        # product() varies its last argument fastest: rack1-node1, rack1-node2, rack2-node1, ...
        for numbers in itertools.product(*(_numbers(ranges) for ranges in brackets)):
            pieces = itertools.zip_longest(texts, numbers, fillvalue="")
            hosts.append("".join(itertools.chain.from_iterable(pieces)))
    return tuple(hosts)


def _parse_item(item: str, text: str, field: str) -> tuple[list[str], list[_Ranges]]:
    """One item's fixed texts (one more than its brackets) and its brackets' ranges."""
    if not item:
        raise ConfigError(field, f"the host list {text!r} has an empty item")
    if any(c.isspace() for c in item):
        raise ConfigError(field, f"the host name {item!r} in {text!r} contains whitespace")
    parts = _BRACKET.split(item)
    texts, contents = parts[0::2], parts[1::2]
    if any("[" in t or "]" in t for t in texts):
        raise ConfigError(field, f"unbalanced brackets in {item!r}")
    # As Slurm: text may follow a bracket only when another bracket does (n[1-2]-ib[1]).
    if contents and texts[-1]:
        raise ConfigError(field, f"{item!r} has text after its last bracket, as Slurm refuses")
    return texts, [_parse_bracket(inside, item, field) for inside in contents]


def _parse_bracket(inside: str, item: str, field: str) -> _Ranges:
    ranges: _Ranges = []
    for part in inside.split(","):
        if not part:
            raise ConfigError(field, f"an empty range in {item!r}")
        match = _RANGE.fullmatch(part)
        if match is None:
            raise ConfigError(field, f"{part!r} in {item!r} is not a number or a range like 1-4")
        # Slurm reads 64-bit numbers; longer ones would also make int() raise past 4300 digits.
        if any(len(number) > 20 for number in match.groups("")):
            raise ConfigError(field, f"the range {part!r} in {item!r} has a number over 20 digits")
        lo = int(match[1])
        hi = lo if match[2] is None else int(match[2])
        if hi < lo:
            raise ConfigError(field, f"the range {part!r} in {item!r} is descending")
        ranges.append((lo, hi, len(match[1])))
    return ranges


def _count(ranges: _Ranges) -> int:
    return sum(hi - lo + 1 for lo, hi, _ in ranges)


def _numbers(ranges: _Ranges) -> list[str]:
    # Padded to the width of the range's first number as written: 08-10 -> 08 09 10, 8-10 -> 8 9 10
    return [f"{n:0{width}d}" for lo, hi, width in ranges for n in range(lo, hi + 1)]
