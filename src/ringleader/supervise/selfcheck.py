"""`ringleader-entrypoint doctor`: this host's health checks (launch/health.py), by hand, before
any job: the same checks, settings and numbers as the gate before every attempt.

    ringleader-entrypoint doctor [--host NAME] [--hosts A,B,C] [--distribution D]
                                 [--setting NAME=VALUE ...] [--ml-root DIR] [--json]

Prints a table (or, with --json, one JSON line: what `ringleader doctor` gathers from every
host). Exit 0 when no check failed, 71 (exitcodes.HEALTH_CHECK_FAILED) when one did, 78 for a
bad setting.
"""

import argparse
import json
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from ringleader.config.job import (
    DISTRIBUTIONS,
    ENABLED_KEYS,
    MPI,
    NO_DISTRIBUTION,
    parse_job_config,
)
from ringleader.config.topology import parse_topology
from ringleader.core import exitcodes, paths
from ringleader.core.errors import ConfigError
from ringleader.core.health import CheckResult, Report
from ringleader.launch.health import HostChecks

COLUMNS = ("host", "check", "status", "detail")


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ringleader-entrypoint doctor", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--host", help="this host's name (default SM_CURRENT_HOST, else hostname)")
    parser.add_argument("--hosts", help="the job's hosts, comma-separated (default: this one)")
    parser.add_argument("--distribution", choices=DISTRIBUTIONS, default=MPI)
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a ringleader_* setting, e.g. min_free_disk=10g (repeatable)",
    )
    parser.add_argument("--ml-root", type=Path, default=paths.ML_ROOT, help="default /opt/ml")
    parser.add_argument("--json", action="store_true", help="one JSON line instead of a table")
    return parser


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    host = args.host or os.environ.get("SM_CURRENT_HOST") or socket.gethostname()
    hosts = [name for name in (args.hosts or host).split(",") if name]
    try:
        report = check(host, hosts, args.distribution, args.setting, args.ml_root)
    except ConfigError as error:
        print(f"ringleader doctor: {error}", file=sys.stderr)
        return exitcodes.CONFIG_ERROR
    if args.json:
        print(json.dumps({"host": host, "results": [result.to_json() for result in report]}))
    else:
        print("\n".join(table({host: report})))
    return verdict({host: report})


def check(
    host: str, hosts: Sequence[str], distribution: str, settings: Sequence[str], ml_root: Path
) -> Report:
    """This host's checks before a job of `hosts` with these settings (NAME=VALUE)."""
    values: dict[str, object] = {"sagemaker_program": "doctor"}
    if distribution != NO_DISTRIBUTION:
        values[ENABLED_KEYS[distribution]] = "true"
    for item in settings:
        name, equals, value = item.partition("=")
        if not equals or not name:
            raise ConfigError("--setting", f"expected NAME=VALUE, got {item!r}")
        values[f"ringleader_{name.removeprefix('ringleader_')}"] = value
    if host not in hosts:
        hosts = [host, *hosts]
    topology = parse_topology({}, {"hosts": list(hosts), "current_host": host})
    config = parse_job_config(topology, values, {})
    return HostChecks(config, host, ml_root=ml_root).run(0)


def table(reports: dict[str, Report]) -> list[str]:
    """One row per host and check, failed ones first, aligned."""
    rows = [
        (host, result.name, result.status, result.detail)
        for host in sorted(reports)
        for result in sorted(reports[host], key=lambda result: not result.failed)
    ]
    widths = [max(len(row[i]) for row in [COLUMNS, *rows]) for i in range(3)]
    return [
        "  ".join(
            [*(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)), row[3]]
        ).rstrip()
        for row in [COLUMNS, *rows]
    ]


def verdict(reports: dict[str, Report]) -> int:
    failed = any(result.failed for report in reports.values() for result in report)
    return exitcodes.HEALTH_CHECK_FAILED if failed else exitcodes.SUCCESS


def parse_line(line: str) -> tuple[str, Report] | None:
    """A host's JSON line (--json); None for any other line."""
    try:
        data = json.loads(line)
        return str(data["host"]), tuple(CheckResult.from_json(item) for item in data["results"])
    except (ValueError, KeyError, TypeError):
        return None


if __name__ == "__main__":  # `ringleader doctor cluster|slurm` runs it so on each host
    sys.exit(main(sys.argv[1:]))
