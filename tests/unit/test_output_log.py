"""ringleader's own lines (output.log): every line in the host's log file, the details on
stdout only when verbose, and a log file that cannot be written changes nothing else.

Each case runs in a fresh interpreter: the module keeps the process's host and file."""

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys
from pathlib import Path
from ringleader.output import log
log.keep_under(Path(sys.argv[1]))
log.log("before the host is known")
log.set_host("algo-2")
log.set_verbose(sys.argv[2] == "verbose")
log.log("worker of ['algo-1', 'algo-2']")
log.detail("pulses from the leader: 12 pulses")
"""


def run(log_dir: Path, mode: str = "quiet") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(log_dir), mode],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_details_go_to_the_host_log_file_only(tmp_path: Path) -> None:
    result = run(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "worker of" in result.stdout
    assert "pulses from" not in result.stdout
    kept = (tmp_path / "algo-2" / "ringleader.log").read_text()
    assert "[ringleader algo-2]" in kept
    assert "worker of ['algo-1', 'algo-2']" in kept and "pulses from the leader" in kept
    # Only once the host is known: its lines before have no file to go to.
    assert "before the host is known" not in kept
    assert "before the host is known" in result.stdout


def test_verbose_prints_the_details_too(tmp_path: Path) -> None:
    result = run(tmp_path, "verbose")
    assert result.returncode == 0, result.stderr
    assert "pulses from the leader: 12 pulses" in result.stdout
    assert (tmp_path / "algo-2" / "ringleader.log").read_text().count("pulses from") == 1


def test_a_full_disk_under_the_log_file_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "algo-2").mkdir()
    os.symlink("/dev/full", tmp_path / "algo-2" / "ringleader.log")  # every write: ENOSPC
    result = run(tmp_path, "verbose")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "worker of" in result.stdout and "pulses from the leader" in result.stdout


def test_a_log_directory_that_cannot_be_made_changes_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = run(blocker / "logs")  # below a file: no directory can be made
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "worker of" in result.stdout
