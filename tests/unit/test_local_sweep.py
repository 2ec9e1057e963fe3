"""`ringleader local --sweep`: its argument, the specs it checks before any run, and the order
of runs, comparison and exit code (with injected runs: no Docker here)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from ringleader.tools import cli as ringleader_cli
from ringleader.tools.local.errors import UsageError
from ringleader.tools.local.plan import LocalJobSpec
from ringleader.tools.local.sweep import SweepRun, parse_sweep, run_sweep, sweep_specs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_parse_sweep() -> None:
    assert parse_sweep("hosts=1,2,4") == (1, 2, 4)
    assert parse_sweep("hosts=4,1") == (4, 1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hosts=1", "expected hosts=N,N[,N...] with two or more host counts, got 'hosts=1'"),
        ("ranks=1,2", "(only hosts can be swept), got 'ranks=1,2'"),
        ("hosts=1,x", "each a whole number of at least 1, got 'hosts=1,x'"),
        ("hosts=0,1", "each a whole number of at least 1, got 'hosts=0,1'"),
        ("hosts=1,2,1", "a host count repeats in 'hosts=1,2,1'"),
        ("1,2", "(only hosts can be swept), got '1,2'"),
    ],
)
def test_bad_sweeps(text: str, message: str) -> None:
    with pytest.raises(UsageError) as error:
        parse_sweep(text)
    assert message in str(error.value)


def test_every_size_is_checked_before_the_first_run(tmp_path: Path) -> None:
    spec = LocalJobSpec(hosts=1, source_dir=EXAMPLES, entry_point="mpi_allreduce.py")
    assert [s.hosts for s in sweep_specs(spec, (1, 3))] == [1, 3]
    with pytest.raises(UsageError, match="--entry-point"):
        sweep_specs(LocalJobSpec(1, EXAMPLES, "missing.py"), (1, 2))
    grouped = LocalJobSpec(2, EXAMPLES, "mpi_allreduce.py", instance_groups=(("a", 2),))
    with pytest.raises(UsageError, match="cannot sweep a job with --instance-groups"):
        sweep_specs(grouped, (1, 2))


def fake_runs(tmp_path: Path, codes: dict[int, int], interrupt_at: int | None = None):
    started: list[int] = []

    def run_job(spec: LocalJobSpec) -> SweepRun:
        started.append(spec.hosts)
        folder = tmp_path / f"job-{spec.hosts}"
        folder.mkdir()
        return SweepRun(spec.hosts, codes.get(spec.hosts, 0), folder, spec.hosts == interrupt_at)

    return started, run_job


def specs(*sizes: int) -> list[LocalJobSpec]:
    return [LocalJobSpec(hosts=n, source_dir=EXAMPLES, entry_point="x.py") for n in sizes]


def test_runs_in_order_then_compares_them_all(tmp_path: Path) -> None:
    started, run_job = fake_runs(tmp_path, {})
    compared: list[Sequence[Path]] = []
    notes: list[str] = []
    code = run_sweep(specs(1, 2, 3), run_job, lambda runs: compared.append(runs) or 0, notes.append)
    assert code == 0 and started == [1, 2, 3]
    assert compared == [[tmp_path / "job-1", tmp_path / "job-2", tmp_path / "job-3"]]
    assert notes[0] == "sweep: run 1 of 3: 1 host(s)"


def test_a_failed_run_is_compared_too_and_gives_the_exit_code(tmp_path: Path) -> None:
    _, run_job = fake_runs(tmp_path, {2: 3})
    compared: list[Sequence[Path]] = []
    code = run_sweep(specs(1, 2, 3), run_job, lambda runs: compared.append(runs) or 3, print)
    assert code == 3 and len(compared[0]) == 3


def test_an_interrupted_sweep_stops_and_compares_what_ran(tmp_path: Path) -> None:
    started, run_job = fake_runs(tmp_path, {2: 143}, interrupt_at=2)
    compared: list[Sequence[Path]] = []
    code = run_sweep(specs(1, 2, 3), run_job, lambda runs: compared.append(runs) or 0, print)
    assert started == [1, 2] and code == 143 and len(compared[0]) == 2


def test_hosts_and_sweep_together_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["local", "--source-dir", str(EXAMPLES), "--entry-point", "mpi_allreduce.py"]
    assert ringleader_cli.main([*argv, "--hosts", "2", "--sweep", "hosts=1,2"]) == 2
    assert "the sweep sets the host counts" in capsys.readouterr().err
