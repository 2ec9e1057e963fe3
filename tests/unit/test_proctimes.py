"""Process start times from /proc, to the clock tick."""

import subprocess
import sys
import time

from ringleader.core.proctimes import process_name, process_started_at


def test_a_child_started_now_is_dated_now_not_a_second_off():
    before = time.time()
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=-1)
    after = time.time()
    try:
        started = process_started_at(child.pid)
        assert started is not None
        # one clock tick (10 ms) of rounding either way; psutil's create_time is off by up to 1 s
        assert before - 0.02 <= started <= after + 0.02, (before, started, after)
        assert "python" in (process_name(child.pid) or "")
    finally:
        child.communicate(b"")


def test_this_process_and_a_gone_one():
    assert process_started_at() is not None and process_started_at() < time.time()
    assert process_started_at(2**22 + 12345) is None
    assert process_name(2**22 + 12345) is None
