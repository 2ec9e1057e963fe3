"""The one printer of prefixed lines under a lock (output.console), as `ringleader local` and
`ringleader cluster` print their hosts' lines."""

import io
import threading

from ringleader.output.console import LinePrinter, prefixed


def test_prefixed_lines_end_each_in_a_newline() -> None:
    assert prefixed("[algo-1 rank 0] ", ["a", "b"]) == "[algo-1 rank 0] a\n[algo-1 rank 0] b\n"
    assert prefixed("x", []) == ""


def test_line_printer_writes_whole_batches_and_counts_lines() -> None:
    stream = io.StringIO()
    printer = LinePrinter(stream)
    printer.lines("algo-1 | ", ["one", "two"])
    printer.lines("algo-1 | ", [])
    printer.line("relayed\n")  # its own newline ends it: no empty line after it
    printer.line("note", "==> ")
    assert stream.getvalue() == "algo-1 | one\nalgo-1 | two\nrelayed\n==> note\n"
    assert printer.count == 4


def test_line_printer_never_interleaves_two_writers() -> None:
    stream = io.StringIO()
    printer = LinePrinter(stream)

    def write(host: str) -> None:
        for index in range(200):
            printer.lines(f"{host} | ", [f"{index}-a", f"{index}-b"])

    threads = [threading.Thread(target=write, args=(host,)) for host in ("h1", "h2", "h3")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = stream.getvalue().splitlines()
    assert len(lines) == printer.count == 1200
    for first, second in zip(lines[::2], lines[1::2], strict=True):
        assert first.endswith("-a") and second == first[:-1] + "b"
