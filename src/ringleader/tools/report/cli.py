"""`ringleader report PATH [--out DIR]`, and `ringleader report --compare RUN RUN [...]`
(compare_cli.py).

Exit codes: 0 the report was written (whatever the job's own outcome); 1 it could not be
written; 2 PATH holds no job output or cannot be read. The text summary goes to stdout,
errors to stderr. --compare adds 3 (written, some runs left out).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from ringleader.tools.report.compare_cli import (
    DEFAULT_OUT,
    add_compare_arguments,
    request_from,
    run_compare,
)
from ringleader.tools.report.discover import (
    AUTOTUNE_PATTERN,
    JOB_FILE,
    METRICS_FILE,
    TIMELINE_PATTERN,
)
from ringleader.tools.report.load import (
    SourceError,
    default_out_dir,
    find_files,
    open_source,
    read_inputs,
)
from ringleader.tools.report.model import build_report, summary_lines

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
PROG = "ringleader report"
INDEX = "index.html"

Command = Callable[[argparse.Namespace], int]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "report",
        help="an HTML report with charts of a finished job's output",
        description="Write one self-contained HTML page with PNG charts from what a job left: "
        "outcome and failure cause, per-rank exit status and duration, metrics over time, the "
        "Horovod timeline and autotune log, and the ranks' last log lines. PATH is a job's "
        "output folder (one host's /opt/ml/output, or `ringleader local`'s OUTPUT/<job>/) or "
        "an output.tar.gz. Exit codes: 0 written, 1 could not write, 2 no job output in PATH.",
    )
    parser.add_argument(
        "path", type=Path, nargs="?", metavar="PATH", help="output folder or output.tar.gz"
    )
    parser.add_argument(
        "--compare",
        nargs="+",
        metavar="RUN",
        help="compare runs of one job at several sizes instead (output folders, "
        "output.tar.gz or s3://): one page and compare.csv with a row per run: hosts, ranks, "
        "wall and startup time, throughput, scaling efficiency, time per epoch and cost. "
        "Exit codes: 0 written, 1 could not write, 2 bad input, 3 written with runs left out",
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="where index.html and the PNGs go (default PATH/report, or NAME-report beside "
        f"an archive; with --compare ./{DEFAULT_OUT})",
    )
    add_compare_arguments(parser)
    parser.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    if args.compare is not None:
        if args.path is not None:
            _err(f"{PROG}: error: give PATH (one job's report) or --compare RUN RUN ..., not both")
            return EXIT_INVALID
        out = args.out if args.out is not None else DEFAULT_OUT
        return run_compare(request_from(args, args.compare, out), sys.stdout, sys.stderr)
    if args.path is None:
        _err(f"{PROG}: error: expected PATH (a job's output folder or output.tar.gz) or --compare")
        return EXIT_INVALID
    path: Path = args.path
    out_dir: Path = args.out if args.out is not None else default_out_dir(path)
    try:
        with open_source(path) as source:
            files = find_files(source, exclude=out_dir)
            if files.empty:
                _err(
                    f"{PROG}: error: {path} holds no job output: found no {JOB_FILE}, failure "
                    f"or success file, {METRICS_FILE}, Horovod timeline ({TIMELINE_PATTERN}), "
                    f"autotune log ({AUTOTUNE_PATTERN}) or logs/<host>/rank-<N>.log below it"
                )
                return EXIT_INVALID
            inputs = read_inputs(source, files, str(path), out_dir.resolve())
    except SourceError as error:
        _err(f"{PROG}: error: {error}")
        return EXIT_INVALID
    report = build_report(inputs)

    from ringleader.tools.report import charts, page  # matplotlib loads only when there is a report

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        drawn = charts.render_all(report, out_dir)
        index = out_dir / INDEX
        index.write_text(page.render_page(report, drawn), encoding="utf-8")
    except OSError as error:
        _err(f"{PROG}: cannot write the report to {out_dir}: {error}")
        return EXIT_FAILED
    for line in summary_lines(report):
        print(line)
    print(f"Report: {index} ({len(drawn)} chart(s))")
    return EXIT_OK


def _err(message: str) -> None:
    print(message, file=sys.stderr)
