"""The results fetch of `ringleader cluster run`: it copies while data moves, and a stalled
or refused transfer becomes a named problem, never an exception (issue 23)."""

import contextlib
import io
import os
import subprocess
import sys
import threading

from ringleader.tools.cluster.stream import ProgressNote, copy_while_flowing


def test_everything_is_copied_and_progress_reported() -> None:
    sender = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'x' * 3_000_000)"],
        stdout=subprocess.PIPE,
    )
    sink = io.BytesIO()
    seen: list[int] = []
    assert sender.stdout is not None
    assert copy_while_flowing(sender.stdout, sink, 30.0, seen.append) is None
    assert sender.wait(timeout=30) == 0
    assert sink.getvalue() == b"x" * 3_000_000
    assert seen[-1] == 3_000_000 and seen == sorted(seen)


def test_a_transfer_that_stops_moving_is_given_up_and_named() -> None:
    read_end, write_end = os.pipe()
    source = os.fdopen(read_end, "rb")
    os.write(write_end, b"y" * 5000)  # then nothing more, and the pipe stays open
    try:
        problem = copy_while_flowing(source, io.BytesIO(), 0.2, lambda copied: None)
    finally:
        os.close(write_end)
        source.close()
    assert problem == "nothing arrived for 0.2 s (after 0.0 MiB)"


def test_a_receiver_that_ends_is_a_problem_not_an_exception() -> None:
    read_end, write_end = os.pipe()
    source = os.fdopen(read_end, "rb")
    writer = threading.Thread(target=os.write, args=(write_end, b"z" * 1000))
    writer.start()
    receiver = subprocess.Popen(["true"], stdin=subprocess.PIPE)
    receiver.wait(timeout=30)
    try:
        assert receiver.stdin is not None
        problem = copy_while_flowing(source, receiver.stdin, 5.0, lambda copied: None)
    finally:
        writer.join()
        os.close(write_end)
        source.close()
        with contextlib.suppress(BrokenPipeError):  # its buffered bytes have nowhere to go
            receiver.stdin.close()
    assert problem is not None and problem.startswith("the receiver stopped after 0.0 MiB")


def test_progress_is_said_at_most_every_interval() -> None:
    lines: list[str] = []
    note = ProgressNote(lines.append, "==> fetching algo-2's results", every=0.0)
    note(5 << 20)
    assert lines == ["==> fetching algo-2's results: 5.0 MiB so far"]
    quiet = ProgressNote(lines.append, "x", every=3600.0)
    quiet(1)
    assert len(lines) == 1
