"""`ringleader image setup` and `ringleader image check IMAGE`.

Exit codes: 0 done (setup) or ready (check); 1 something is missing (each named, with how to
add it); 2 bad usage, or the image cannot be found or probed.
"""

import argparse
import os
import sys
from pathlib import Path

from ringleader.config.image import python_range, supported_python
from ringleader.config.job import DISTRIBUTIONS, NO_DISTRIBUTION
from ringleader.tools.image import check, needs, setup
from ringleader.tools.image.probe import ImageFacts, ProbeError, probe_here

EXIT_OK, EXIT_MISSING, EXIT_USAGE = 0, 1, 2
CHECK_TIMEOUT = 120.0


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser(
        "image",
        help="prepare a training image for ringleader (setup) or check one (check)",
        description="Prepare the image being built (`setup`, in its Dockerfile) or check what "
        "an image has for each distribution (`check`). Exit codes: 0 done or ready, 1 "
        "something is missing (each named, with how to add it), 2 bad usage or no such image.",
    )
    commands = parser.add_subparsers(dest="image_command", required=True)
    prepare = commands.add_parser(
        "setup",
        help="prepare this image (run as root in its Dockerfile after pip install ringleader)",
        description="Write the job's own sshd and ssh client files (/etc/ringleader/ssh, no "
        "ssh key in the image: every job makes its own when it starts, and keys an older "
        "version baked in are removed; the image's own ssh configuration is left alone), the "
        "image settings (/etc/ringleader/image.json), /usr/local/bin/ringleader-entrypoint and "
        "SageMaker's /opt/ml layout. Idempotent. Refuses, naming the package, when sshd, ssh, "
        "ssh-keygen or mpirun is missing (unless --without-mpi).",
    )
    prepare.add_argument(
        "--python",
        metavar="PATH",
        help="interpreter of the training code, when it is not the one ringleader is "
        "installed in (e.g. /opt/venv/bin/python)",
    )
    prepare.add_argument(
        "--without-mpi",
        action="store_true",
        help="no sshd and ssh files: the image runs torch_distributed, TensorFlow's or MXNet's "
        "distributions or none, never mpi",
    )
    prepare.add_argument(
        "--root",
        type=Path,
        default=Path("/"),
        metavar="DIR",
        help="prepare the file system at DIR instead of / (tests, chroots)",
    )
    prepare.set_defaults(func=cmd_setup)
    inspect = commands.add_parser(
        "check",
        help="report what IMAGE lacks for each distribution",
        description="Run a probe in a container of IMAGE (no network, removed afterwards) and "
        "report what it lacks for each distribution. Exit code 0 when it is ready for "
        "--distribution (default: ringleader itself is ready), 1 when not, 2 when IMAGE does "
        "not exist or cannot be probed.",
    )
    inspect.add_argument("image", metavar="IMAGE")
    inspect.add_argument("--distribution", choices=DISTRIBUTIONS, help="the one that counts")
    inspect.add_argument(
        "--python", metavar="PATH", help="also look at this interpreter in the image"
    )
    inspect.add_argument(
        "--timeout", type=float, default=CHECK_TIMEOUT, help="seconds for docker (default 120)"
    )
    inspect.set_defaults(func=cmd_check)


def _print_missing(heading: str, missing: list[needs.Missing]) -> None:
    print(heading, file=sys.stderr)
    for item in missing:
        print(f"  - {item.describe()}", file=sys.stderr)


def cmd_setup(args: argparse.Namespace) -> int:
    prog = "ringleader image setup"
    if not supported_python(sys.version_info[:2]):
        print(
            f"{prog}: ringleader runs on Python {python_range()}, this is "
            f"{sys.version.split()[0]} ({sys.executable})",
            file=sys.stderr,
        )
        return EXIT_MISSING
    if args.root == Path("/") and os.geteuid() != 0:
        print(
            f"{prog}: must run as root (in the Dockerfile, before any USER line)", file=sys.stderr
        )
        return EXIT_MISSING
    request = setup.default_request(args.python, not args.without_mpi, args.root)
    try:
        facts = probe_here([request.python])
    except ProbeError as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return EXIT_MISSING
    refused = setup.refusals(request, facts)
    if refused:
        _print_missing(f"{prog}: this image cannot be prepared yet:", refused)
        if request.with_mpi and any(item.what in needs.MPI_TOOLS for item in refused):
            print(
                "  (An image that never runs mpi jobs: `ringleader image setup --without-mpi`.)",
                file=sys.stderr,
            )
        return EXIT_MISSING
    try:
        changed = setup.apply(request, facts, os.environ, lambda line: print(f"  {line}"))
    except (setup.SetupError, OSError) as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return EXIT_MISSING
    kind = "mpi and every other distribution" if request.with_mpi else "every distribution but mpi"
    state = "prepared" if changed else "already prepared; nothing changed"
    print(f"{prog}: {state} ({kind}; training Python {request.python})")
    return EXIT_OK


def report_lines(image: str, facts: ImageFacts) -> list[str]:
    lines = [f"image {image}: {facts.os_name or facts.os_id or 'unknown system'}"]
    python = needs.training_python(facts)
    lines.append(
        "  ringleader: "
        + (f"prepared ({facts.settings})" if facts.settings else "not prepared")
        + (f"; training Python {python.describe()}" if python else "; no python3")
    )
    lines.append(f"  mpirun: {facts.mpirun_version or 'none'}")
    for distribution in DISTRIBUTIONS:
        missing = needs.missing_for(distribution, facts)
        if not missing:
            lines.append(f"  {distribution:<32} ready")
            continue
        lines.append(f"  {distribution:<32} missing:")
        lines += [f"    - {item.describe()}" for item in missing]
    return lines


def cmd_check(args: argparse.Namespace) -> int:
    pythons = [args.python] if args.python else []
    try:
        facts = check.probe_image(args.image, pythons, args.timeout)
    except (check.ImageNotFound, ProbeError) as error:
        print(f"ringleader image check: {error}", file=sys.stderr)
        return EXIT_USAGE
    for line in report_lines(args.image, facts):
        print(line)
    counted = args.distribution or NO_DISTRIBUTION  # ringleader itself
    return EXIT_MISSING if needs.missing_for(counted, facts) else EXIT_OK
