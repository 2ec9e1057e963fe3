"""The README's `ringleader local` examples, run as a user would run them (from the repository's
root, the default image), each with the outcome its comment promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_commands import ROOT, ringleader_commands

pytestmark = pytest.mark.container

EXAMPLES = [argv for _, argv in ringleader_commands(ROOT / "README.md") if argv[0] == "local"]


def run_example(argv: list[str], output: Path) -> subprocess.CompletedProcess[str]:
    """The command with its output under `output` (before the script's own arguments)."""
    end = argv.index("--") if "--" in argv else len(argv)
    argv = [*argv[:end], "--output", str(output), *argv[end:]]
    return subprocess.run(
        [sys.executable, "-m", "ringleader.tools.cli", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def failure_files(output: Path) -> dict[str, str]:
    return {
        path.parent.parent.name: path.read_text() for path in output.glob("*/algo-*/output/failure")
    }


def test_the_readme_has_the_demo_and_a_failing_rank() -> None:
    assert len(EXAMPLES) == 2, EXAMPLES
    assert "--fail-rank" not in EXAMPLES[0]
    assert EXAMPLES[1][EXAMPLES[1].index("--fail-rank") + 1] == "4"


def test_the_readme_demo_succeeds(tmp_path: Path) -> None:
    result = run_example(EXAMPLES[0], tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert failure_files(tmp_path) == {}
    assert len(list(tmp_path.glob("*/algo-*/output/success"))) == 3


def test_the_readme_failing_rank_exits_3_on_every_host(tmp_path: Path) -> None:
    result = run_example(EXAMPLES[1], tmp_path)
    assert result.returncode == 3, result.stdout[-3000:] + result.stderr[-3000:]
    failures = failure_files(tmp_path)
    assert sorted(failures) == ["algo-1", "algo-2", "algo-3"]
    for text in failures.values():
        assert "rank 4" in text.lower() and "algo-3" in text, text
