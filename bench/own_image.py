"""ringleader under Open MPI 4.1 and Open MPI 5: the same job in two images, side by side.

The 3 hosts x 2 ranks mpi4py probe job of bench/startup.py (bench/probe/probe.py: one second
of work per rank) in ringleader:latest (Debian bookworm, Python 3.11, Open MPI 4.1) and
ringleader:trixie (Debian trixie, Python 3.13, Open MPI 5 with PRRTE; the user's venv apart
from ringleader's), each run by ringleader and by a bare mpirun of the same image
(bench/probe/bare_mpirun.sh: sshd only, mpirun by hand), the floor. Measured as bench/startup.py
measures them (its `run`):
  startup   first `docker start` -> user code running on every rank
  teardown  last rank's exit -> last container's exit (successful job)
  failure   rank 1 exits 3 -> every container has exited
Every cell is the median of --rounds runs; the four (image, runner) pairs alternate their order
from round to round so none always gets the warmer machine.

Usage: .venv/bin/python bench/own_image.py [--rounds 5] [--hosts 3] [--per-host 2]
       [--images ringleader:latest ringleader:trixie]
"""

import argparse
import sys
import tempfile
from pathlib import Path

import docker
import docker.errors
from startup import FAIL_RANK, Measurement, fmt, median_of, run

from ringleader.launch.openmpi import parse_mpirun_version

RUNNERS = ("ringleader", "bare")


def open_mpi_of(client: docker.DockerClient, image: str) -> str:
    """The image's Open MPI, as its mpirun says (`mpirun --version`)."""
    try:
        output = client.containers.run(image, ["--version"], entrypoint="mpirun", remove=True)
    except docker.errors.ImageNotFound:
        sys.exit(f"image {image} is not built (make image / make image-trixie)")
    version = parse_mpirun_version(output.decode(errors="replace"))
    return f"Open MPI {version}" if version is not None else "not Open MPI"


def ratio(numerator: float | None, denominator: float | None) -> str:
    if numerator is None or denominator is None or denominator <= 0:
        return "n/a"
    return f"{numerator / denominator:.2f}x"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="runs per cell (median)")
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--per-host", type=int, default=2)
    parser.add_argument("--images", nargs=2, default=["ringleader:latest", "ringleader:trixie"])
    args = parser.parse_args()
    client = docker.from_env()
    versions = {image: open_mpi_of(client, image) for image in args.images}
    pairs = [(image, runner) for image in args.images for runner in RUNNERS]
    runs: dict[tuple[str, str], tuple[list[Measurement], list[Measurement]]] = {
        pair: ([], []) for pair in pairs
    }
    with tempfile.TemporaryDirectory(prefix="rl-bench-own-") as workdir:
        for round_number in range(1, args.rounds + 1):
            for image, runner in pairs[:: 1 if round_number % 2 else -1]:
                oks, fails = runs[(image, runner)]
                for fail in (False, True):
                    what = f"rank {FAIL_RANK} exits 3" if fail else "successful job"
                    print(
                        f"... round {round_number}/{args.rounds}: {runner} in {image} "
                        f"({versions[image]}), {what}",
                        file=sys.stderr,
                        flush=True,
                    )
                    measured = run(
                        runner,
                        args.hosts,
                        fail,
                        Path(workdir),
                        per_host=args.per_host,
                        image=image,
                    )
                    (fails if fail else oks).append(measured)
    cells = {pair: (median_of(oks), median_of(fails)) for pair, (oks, fails) in runs.items()}

    print(
        f"{args.hosts} hosts x {args.per_host} ranks, median of {args.rounds} alternating "
        "rounds (seconds)"
    )
    print(
        f"{'image':<20} {'Open MPI':<16} {'runner':<10} {'startup':>8} {'teardown':>9} "
        f"{'failure':>8} {'mpirun returned':>16}  exit codes after rank {FAIL_RANK} exits 3"
    )
    for (image, runner), (ok, failed) in cells.items():
        returned = (
            f"{fmt(ok.mpirun_returned).strip()} / {fmt(failed.mpirun_returned).strip()}"
            if runner == "bare"
            else ""
        )
        codes = " ".join(str(code) for code in failed.codes)
        print(
            f"{image:<20} {versions[image]:<16} {runner:<10} {fmt(ok.startup):>8} "
            f"{fmt(ok.teardown):>9} {fmt(failed.failure):>8} {returned:>16}  {codes}"
        )
    print("(mpirun returned: bare only, successful / failed job, after the last rank's end or")
    print(f" rank {FAIL_RANK}'s failure: the floor under any launcher's teardown)")
    print()
    print("ringleader / bare mpirun of the same image:")
    print("| image | Open MPI | startup | teardown | failure |")
    print("|---|---|---|---|---|")
    for image in args.images:
        ours, bare = cells[(image, "ringleader")], cells[(image, "bare")]
        print(
            f"| {image} | {versions[image]} | "
            f"{fmt(ours[0].startup).strip()} / {fmt(bare[0].startup).strip()} = "
            f"{ratio(ours[0].startup, bare[0].startup)} | "
            f"{fmt(ours[0].teardown).strip()} / {fmt(bare[0].teardown).strip()} = "
            f"{ratio(ours[0].teardown, bare[0].teardown)} | "
            f"{fmt(ours[1].failure).strip()} / {fmt(bare[1].failure).strip()} = "
            f"{ratio(ours[1].failure, bare[1].failure)} |"
        )
    first, second = args.images
    print()
    print(f"{second} / {first}, each runner:")
    print("| runner | startup | teardown | failure |")
    print("|---|---|---|---|")
    for runner in RUNNERS:
        a, b = cells[(first, runner)], cells[(second, runner)]
        print(
            f"| {runner} | {ratio(b[0].startup, a[0].startup)} | "
            f"{ratio(b[0].teardown, a[0].teardown)} | {ratio(b[1].failure, a[1].failure)} |"
        )
    print()
    print("every run (startup / teardown / failure s):")
    for (image, runner), (oks, fails) in runs.items():
        listed = "  ".join(
            f"{fmt(ok.startup).strip()}/{fmt(ok.teardown).strip()}/{fmt(bad.failure).strip()}"
            for ok, bad in zip(oks, fails, strict=True)
        )
        print(f"  {image:<20} {runner:<10}  {listed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
