"""`ringleader local --sweep hosts=1,2,4`: the same job at several sizes, one after the other on
fake hosts, then `ringleader report --compare` of the runs (tools/report/compare_cli.py).

The sweep's exit code: the first failed run's, when a run failed (the comparison is still
written, that run shown as left out); else the comparison's (0, or 3 when a run was left out
for another reason, 2 when the runs cannot be compared at all).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from ringleader.tools.local.errors import UsageError
from ringleader.tools.local.plan import LocalJobSpec, validate

SWEEP_OPTION = "--sweep"
SWEPT = "hosts"


@dataclass(frozen=True)
class SweepRun:
    hosts: int
    exit_code: int
    output_dir: Path
    interrupted: bool = False


RunJob = Callable[[LocalJobSpec], SweepRun]


def parse_sweep(text: str) -> tuple[int, ...]:
    """`hosts=1,2,4` -> (1, 2, 4): at least two different sizes, each at least 1, in the order
    given."""
    name, sep, values = text.partition("=")
    expected = f"{SWEEP_OPTION}: expected {SWEPT}=N,N[,N...] with two or more host counts"
    if not sep or name.strip() != SWEPT:
        raise UsageError(f"{expected} (only {SWEPT} can be swept), got {text!r}")
    sizes = []
    for item in values.split(","):
        if not item.strip().isdigit() or int(item) < 1:
            raise UsageError(f"{expected}, each a whole number of at least 1, got {text!r}")
        sizes.append(int(item))
    if len(set(sizes)) < 2:
        raise UsageError(f"{expected}, got {text!r}")
    if len(set(sizes)) != len(sizes):
        raise UsageError(f"{SWEEP_OPTION}: a host count repeats in {text!r}")
    return tuple(sizes)


def sweep_specs(spec: LocalJobSpec, sizes: Sequence[int]) -> list[LocalJobSpec]:
    """The job at each size, every one checked before the first starts."""
    if spec.instance_groups:
        raise UsageError(f"{SWEEP_OPTION}: cannot sweep a job with --instance-groups")
    specs = [replace(spec, hosts=size) for size in sizes]
    for each in specs:
        validate(each)
    return specs


def sweep_id() -> str:
    return f"sweep-{secrets.token_hex(3)}"


def run_sweep(
    specs: Sequence[LocalJobSpec],
    run_job: RunJob,
    compare: Callable[[Sequence[Path]], int],
    note: Callable[[str], None],
) -> int:
    """Each size in turn, then the comparison of every run that left output."""
    runs: list[SweepRun] = []
    for number, spec in enumerate(specs, start=1):
        note(f"sweep: run {number} of {len(specs)}: {spec.hosts} host(s)")
        run = run_job(spec)
        runs.append(run)
        if run.interrupted:
            note("sweep: interrupted; the runs so far are compared")
            break
    for run in runs:
        note(f"sweep: {run.hosts} host(s): exit code {run.exit_code}, output in {run.output_dir}")
    written = [run.output_dir for run in runs if run.output_dir.is_dir()]
    code = compare(written)
    failed = next((run.exit_code for run in runs if run.exit_code != 0), None)
    return failed if failed is not None else code


def write_sweep_notes(out: TextIO) -> Callable[[str], None]:
    def note(text: str) -> None:
        print(f"==> {text}", file=out, flush=True)

    return note
