"""A rank's log on a disk that fills: it keeps whole lines only, the warning says how many, and
the rank's output goes on. RLIMIT_FSIZE makes a real file fill at a chosen size (a write that
crosses it takes only what fits, the next fails), in a child process of its own."""

import subprocess
import sys
from pathlib import Path

FILLING_LOG = """
import resource, signal, sys
from pathlib import Path
from ringleader.rank.capture import RankOutput

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), resource.RLIM_INFINITY))
output = RankOutput("algo-2", 3, Path(sys.argv[1]))
output.start(None)
for batch in range(100):
    output.put("stdout", [f"line {batch}-{index} " + "x" * 90 for index in range(7)])
output.close(timeout=5)
"""


def run_filling_log(log: Path, limit: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", FILLING_LOG, str(log), str(limit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_a_log_that_fills_its_disk_keeps_whole_lines_and_says_how_many(tmp_path):
    log = tmp_path / "rank-3.log"
    result = run_filling_log(log, 10_000)
    # every line still reached the rank's output (no agent here: its stdout)
    shown = [line for line in result.stdout.splitlines() if line.startswith("[algo-2 rank 3] ")]
    assert len(shown) == 700
    warnings = [line for line in result.stderr.splitlines() if "[ringleader]" in line]
    assert len(warnings) == 1, result.stderr
    kept = log.read_bytes()
    assert len(kept) <= 10_000
    assert kept.endswith(b"\n")  # the part of a batch that fitted was cut off again
    lines = kept.decode().splitlines()
    assert lines == [line.removeprefix("[algo-2 rank 3] ") for line in shown[: len(lines)]]
    assert warnings[0] == (
        f"[algo-2 rank 3] [ringleader] the rank's log {log} stopped after {len(lines)} line(s): "
        "File too large; its output still goes to the leader"
    )


def test_a_log_that_cannot_be_opened_says_so(tmp_path):
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    result = run_filling_log(blocked / "rank-3.log", 10_000)
    assert len(result.stdout.splitlines()) == 700
    assert result.stderr.splitlines() == [
        f"[algo-2 rank 3] [ringleader] the rank's log {blocked}/rank-3.log could not be opened: "
        "File exists; its output still goes to the leader"
    ]
