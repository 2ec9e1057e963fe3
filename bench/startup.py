"""Startup and failure-propagation benchmark: ringleader vs an expert's bare mpirun vs
sagemaker-training's `train`.

All run in the same image (ringleader:latest), on the same fake hosts, with the same probe job
(bench/probe/probe.py: one second of work per rank, --per-host ranks per host, default 2). For
each host count it prints, side by side:
  startup   first `docker start` -> user code running on every rank
  teardown  last rank's exit -> last container's exit (successful job)
  failure   rank 1 exits 3 -> every container has exited, and the exit codes they reported
With --rounds N each cell is the median of N runs (runners alternating who goes first), the
runs themselves listed below the table: one run of a 2-host job varies by 10% here.
It also prints when mpirun returned (after the last rank's end, or after rank 1's failure):
bare mpirun's return is the ranks' own exits and mpirun's, a floor under any launcher's
teardown; ringleader's is its leader's log line "launcher exited" (to the millisecond), so a
teardown splits into the ranks' end and what follows mpirun. With bare among the runners each
round also measures Docker's exits, the other floor: as many containers of the image, on the
same kind of network and mounts, whose one process exits at one shared instant, and how long
after it Docker recorded the last exit.
"bare" (bench/probe/bare_mpirun.sh): the containers run only sshd; the first one waits until it
can ssh to the others and runs mpirun of the probe, as an expert would by hand.

Usage: .venv/bin/python bench/startup.py [--hosts 2 4 8] [--per-host 2]
       [--runners ringleader bare toolkit] [--toolkit-hosts 2 4 16]
       [--mpi-options '--mca plm_rsh_no_tree_spawn 1'] [--rounds 3] [--image IMAGE]
The toolkit's failure runs take minutes (its workers poll); --skip-toolkit-failure skips them.
"""

import argparse
import functools
import io
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import docker

from ringleader.core import timeline as phases
from ringleader.core.jobfile import read_job_file
from ringleader.tools.local.plan import LocalJobSpec, mpi_options
from ringleader.tools.local.run import LocalJob, LocalJobResult

PROBE_DIR = Path(__file__).resolve().parent / "probe"
FAIL_RANK = 1
ENTRYPOINTS = {
    "ringleader": None,
    "bare": ("/bin/sh", "/opt/ml/code/bare_mpirun.sh"),
    "toolkit": ("train",),
}


@dataclass(frozen=True)
class Measurement:
    startup: float | None
    teardown: float | None
    failure: float | None
    codes: tuple[int | None, ...]
    phases: dict[str, float] = field(default_factory=dict)  # ringleader: see phase_times
    mpirun_returned: float | None = None  # last rank's end (or the failure) -> mpirun done


@functools.cache
def shared_ssh_key() -> str:
    """One ed25519 key for every host of the bare runs (bench/probe/bare_mpirun.sh)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "key"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bare", "-f", str(path)],
            check=True,
        )
        return path.read_text().strip()


def bare_env(mpirun_options: str, per_host: int) -> dict[str, str]:
    """The environment of bench/probe/bare_mpirun.sh's containers."""
    return {
        "MPIRUN_OPTIONS": mpirun_options,
        "RANKS_PER_HOST": str(per_host),
        "BARE_SSH_KEY": shared_ssh_key(),
    }


def phase_times(job_file: Path, origin: float) -> dict[str, float]:
    """Per launcher phase: seconds from the first `docker start` until the last host reached
    it (from the leader's job.json), in the order of the phases."""
    if not job_file.is_file():
        return {}
    marks = read_job_file(job_file).timeline
    latest: dict[str, float] = {}
    for mark in marks:
        latest[mark.phase] = max(latest.get(mark.phase, 0.0), mark.at - origin)
    return {phase: latest[phase] for phase in phases.PHASES if phase in latest}


# The leader's line when mpirun returned (or was ended): `[ringleader HOST] HH:MM:SS.mmm ...`,
# the time of day in UTC (ringleader.output.log).
LAUNCHER_EXITED = re.compile(
    r"\[ringleader \S+\] (\d\d):(\d\d):(\d\d\.\d{3}) launcher exited with code"
)
DAY = 86400.0
STARTUP_TARGET = 1.10  # ringleader's startup against bare's (issue #29)
RETURN_ALLOWANCE_SECONDS = 0.5  # teardown and failure: bare mpirun's return plus this
# Docker's exits: time for every container to be running before the shared instant
FLOOR_MARGIN_SECONDS = 10.0
FLOOR_MARGIN_PER_HOST = 0.5


def launcher_exited_at(output: str, near: float) -> float | None:
    """When ringleader's leader logged its launcher's (last) exit, as a wall-clock time: the
    line has only the time of day, so it is placed on the day that puts it nearest `near`."""
    matches = LAUNCHER_EXITED.findall(output)
    if not matches:
        return None
    hours, minutes, seconds = matches[-1]
    of_day = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    at = near - near % DAY + of_day
    return min((at - DAY, at, at + DAY), key=lambda candidate: abs(candidate - near))


def bench_times(output: str, kind: str) -> list[float]:
    # Searched in the whole text: the toolkit's plain mpirun output tears lines apart.
    pattern = re.compile(rf"BENCH {kind} \d+ (\d+\.\d{{6}})")
    return [float(match.group(1)) for match in pattern.finditer(output)]


def run(
    runner: str,
    hosts: int,
    fail: bool,
    workdir: Path,
    options: str = "",
    per_host: int = 2,
    image: str | None = None,
    settings: Mapping[str, str] | None = None,
) -> Measurement:
    """One job of `runner` in `image` (default: LocalJobSpec's, ringleader:latest), with
    `settings` (ringleader_* without the prefix) for ringleader."""
    hyperparameters = {"work": "1"}
    if fail:
        hyperparameters["fail-rank"] = str(FAIL_RANK)
    spec = LocalJobSpec(
        hosts=hosts,
        processes_per_host=per_host,
        source_dir=PROBE_DIR,
        entry_point="probe.py",
        hyperparameters=hyperparameters,
        output_dir=workdir,
        # bare: the probe's arguments on mpirun's command line, as typed by hand
        command=("probe.py", *(f"--{k}={v}" for k, v in hyperparameters.items()))
        if runner == "bare"
        else (() if ENTRYPOINTS[runner] else ("train",)),
        entrypoint=ENTRYPOINTS[runner],
        mpi_options=options,
        settings=dict(settings or {}),
    )
    if image is not None:
        spec = replace(spec, image=image)
    if runner == "bare":
        # mpirun gets the options ringleader would give it (the user's, and yielding ranks
        # when the fake hosts oversubscribe the machine)
        mpirun_options = mpi_options(spec, os.cpu_count() or 1)
        spec = replace(spec, env=bare_env(mpirun_options, per_host))
    out = io.StringIO()
    result: LocalJobResult = LocalJob(spec, out, docker.from_env()).run()
    output = out.getvalue()
    first_start = min(host.started_at for host in result.hosts)
    last_exit = max(host.finished_at for host in result.hosts)
    starts, ends, fails = (bench_times(output, kind) for kind in ("start", "end", "fail"))
    world = hosts * per_host
    startup = max(starts) - first_start if len(starts) == world else None
    teardown = last_exit - max(ends) if not fail and len(ends) == world else None
    failure = last_exit - fails[0] if fail and fails else None
    reference = fails[:1] if fail else [max(ends)] if len(ends) == world else []
    returned = bench_times(output, "mpirun-returned")
    if runner == "ringleader" and reference:
        exited = launcher_exited_at(output, reference[0])
        returned = [exited] if exited is not None else []
    mpirun_returned = max(returned) - reference[0] if returned and reference else None
    job_file = result.output_dir / result.hosts[0].name / "output" / "data" / "job.json"
    return Measurement(
        startup,
        teardown,
        failure,
        tuple(h.exit_code for h in result.hosts),
        phase_times(job_file, first_start) if runner == "ringleader" and not fail else {},
        mpirun_returned,
    )


def docker_exits(hosts: int, workdir: Path, image: str | None = None) -> float | None:
    """Docker's own cost of ending a job: `hosts` containers of `image` (same network and
    mounts as a job's) whose one process exits at one shared instant; seconds from it until
    the last exit Docker recorded. None when a container was not running by then."""
    at = time.time() + FLOOR_MARGIN_SECONDS + FLOOR_MARGIN_PER_HOST * hosts
    program = (
        f"import time; print(f'BENCH ready 0 {{time.time():.6f}}', flush=True); "
        f"time.sleep(max(0.0, {at!r} - time.time()))"
    )
    spec = LocalJobSpec(
        hosts=hosts,
        processes_per_host=1,
        source_dir=PROBE_DIR,
        entry_point="probe.py",
        output_dir=workdir,
        command=("-c", program),
        entrypoint=("python3",),
    )
    if image is not None:
        spec = replace(spec, image=image)
    out = io.StringIO()
    result = LocalJob(spec, out, docker.from_env()).run()
    ready = bench_times(out.getvalue(), "ready")
    if len(ready) < hosts or max(ready) > at or result.exit_code != 0:
        return None
    return max(host.finished_at for host in result.hosts) - at


def _median(values: list[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def median_of(runs: list[Measurement]) -> Measurement:
    """One cell of the table: each time the median over the runs (codes of the last run;
    every run's codes are listed separately)."""
    phase_names = [phase for phase in runs[-1].phases]
    return Measurement(
        _median([run.startup for run in runs]),
        _median([run.teardown for run in runs]),
        _median([run.failure for run in runs]),
        runs[-1].codes,
        {
            name: statistics.median(run.phases[name] for run in runs if name in run.phases)
            for name in phase_names
        },
        _median([run.mpirun_returned for run in runs]),
    )


def _ratio(ours: float | None, bare: float | None) -> str:
    if ours is None or bare is None:
        return "n/a"
    return f"{ours:.2f} / {bare:.2f} = {ours / bare:.2f}x" if bare > 0 else f"{ours:.2f} / 0"


def fmt(value: float | None) -> str:
    return "   n/a" if value is None else f"{value:6.2f}"


def say_done(measured: Measurement) -> None:
    """One run's figures as soon as it ends (a long study stopped early keeps what it ran)."""
    print(
        f"    startup {fmt(measured.startup).strip()} s, teardown "
        f"{fmt(measured.teardown).strip()} s, failure {fmt(measured.failure).strip()} s, "
        f"mpirun returned {fmt(measured.mpirun_returned).strip()} s, exit codes "
        f"{' '.join(str(code) for code in measured.codes)}",
        file=sys.stderr,
        flush=True,
    )


Row = tuple[Measurement, Measurement | None]  # a runner's medians: successful, failed job


def print_targets(host_counts: list[int], by_key: dict[tuple[int, str], Row]) -> None:
    """ringleader against its targets: startup at most 1.10x bare; teardown and failure at
    most bare mpirun's return + 0.5 s (medians)."""
    print()
    print(
        f"targets: startup <= {STARTUP_TARGET:.2f}x bare; teardown and failure <= bare "
        f"mpirun's return + {RETURN_ALLOWANCE_SECONDS} s"
    )
    for hosts in host_counts:
        ours, bare = by_key.get((hosts, "ringleader")), by_key.get((hosts, "bare"))
        if not ours or not bare:
            continue
        cells = [f"startup {_against(ours[0].startup, bare[0].startup, STARTUP_TARGET)}"]
        for name, mine, theirs in (
            ("teardown", ours[0].teardown, bare[0]),
            ("failure", ours[1].failure if ours[1] else None, bare[1]),
        ):
            limit = (
                theirs.mpirun_returned + RETURN_ALLOWANCE_SECONDS
                if theirs and theirs.mpirun_returned is not None
                else None
            )
            cells.append(f"{name} {_within(mine, limit)}")
        print(f"  {hosts} hosts: " + "; ".join(cells))


def _against(ours: float | None, bare: float | None, ratio: float) -> str:
    if ours is None or bare is None or bare <= 0:
        return "n/a"
    verdict = "met" if ours / bare <= ratio else "not met"
    return f"{ours / bare:.2f}x ({verdict})"


def _within(value: float | None, limit: float | None) -> str:
    if value is None or limit is None:
        return "n/a"
    verdict = "met" if value <= limit else "not met"
    return f"{value:.2f} s against {limit:.2f} s ({verdict})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--runners", nargs="+", default=list(ENTRYPOINTS), choices=ENTRYPOINTS)
    parser.add_argument("--skip-toolkit-failure", action="store_true")
    parser.add_argument(
        "--mpi-options",
        default="",
        help="more mpirun options for ringleader and bare, e.g. '--mca plm_rsh_no_tree_spawn 1'",
    )
    parser.add_argument(
        "--toolkit-hosts", type=int, nargs="*", help="host counts for the toolkit (default all)"
    )
    parser.add_argument("--rounds", type=int, default=1, help="runs per cell (median)")
    parser.add_argument(
        "--per-host", type=int, default=2, help="ranks per host (--hosts 1 --per-host 4: one host)"
    )
    parser.add_argument("--image", help="image of every runner (default ringleader:latest)")
    args = parser.parse_args()
    runs: dict[tuple[int, str], tuple[list[Measurement], list[Measurement]]] = {}
    floors: dict[int, list[float | None]] = {}  # Docker's exits, per host count
    with tempfile.TemporaryDirectory(prefix="rl-bench-") as workdir:
        for hosts in args.hosts:
            runners = [
                runner
                for runner in args.runners
                if runner != "toolkit" or args.toolkit_hosts is None or hosts in args.toolkit_hosts
            ]
            for round_number in range(1, args.rounds + 1):
                # who goes first alternates: the second must not always get a warmer machine
                for runner in runners[:: 1 if round_number % 2 else -1]:
                    oks, fails = runs.setdefault((hosts, runner), ([], []))
                    print(
                        f"... {runner}: {hosts} hosts, successful job (round {round_number})",
                        file=sys.stderr,
                        flush=True,
                    )
                    oks.append(
                        run(
                            runner,
                            hosts,
                            False,
                            Path(workdir),
                            args.mpi_options,
                            args.per_host,
                            args.image,
                        )
                    )
                    say_done(oks[-1])
                    if runner == "toolkit" and args.skip_toolkit_failure:
                        continue
                    print(
                        f"... {runner}: {hosts} hosts, rank {FAIL_RANK} exits 3",
                        file=sys.stderr,
                        flush=True,
                    )
                    fails.append(
                        run(
                            runner,
                            hosts,
                            True,
                            Path(workdir),
                            args.mpi_options,
                            args.per_host,
                            args.image,
                        )
                    )
                    say_done(fails[-1])
                if "bare" in runners:
                    print(
                        f"... Docker's exits: {hosts} containers (round {round_number})",
                        file=sys.stderr,
                        flush=True,
                    )
                    floors.setdefault(hosts, []).append(
                        docker_exits(hosts, Path(workdir), args.image)
                    )
                    print(
                        f"    last exit {fmt(floors[hosts][-1]).strip()} s after the instant",
                        file=sys.stderr,
                        flush=True,
                    )
    rows = [
        (hosts, runner, median_of(oks), median_of(fails) if fails else None)
        for (hosts, runner), (oks, fails) in runs.items()
    ]
    print(
        f"{'hosts':>5}  {'runner':<10}  {'startup s':>9}  {'teardown s':>10}  "
        f"{'failure s':>9}  {'mpirun returned s':>17}  exit codes after rank {FAIL_RANK} exits 3"
    )
    for hosts, runner, ok, failed in rows:
        codes = "skipped" if failed is None else " ".join(str(code) for code in failed.codes)
        returned = (
            f"{fmt(ok.mpirun_returned).strip()} / {fmt(failed.mpirun_returned).strip()}"
            if failed and runner != "toolkit"
            else ""
        )
        print(
            f"{hosts:>5}  {runner:<10}  {fmt(ok.startup):>9}  {fmt(ok.teardown):>10}  "
            f"{fmt(failed.failure if failed else None):>9}  {returned:>17}  {codes}"
        )
    if args.rounds > 1:
        print()
        print("every run (startup / teardown / failure s):")
        for (hosts, runner), (oks, fails) in runs.items():
            failed_runs: list[Measurement | None] = [*fails] if fails else [None] * len(oks)
            listed = "  ".join(
                f"{fmt(ok.startup).strip()}/{fmt(ok.teardown).strip()}/"
                f"{fmt(failed.failure).strip() if failed else '-'}"
                for ok, failed in zip(oks, failed_runs, strict=True)
            )
            print(f"  {hosts:>3} {runner:<10}  {listed}")
        print("every run, mpirun returned (successful / failed job, s):")
        for (hosts, runner), (oks, fails) in runs.items():
            if runner != "toolkit" and fails:
                listed = "  ".join(
                    f"{fmt(ok.mpirun_returned).strip()}/{fmt(failed.mpirun_returned).strip()}"
                    for ok, failed in zip(oks, fails, strict=True)
                )
                print(f"  {hosts:>3} {runner:<10}  {listed}")
    print(
        "(mpirun returned, successful / failed job: after the last rank's end or rank 1's "
        "failure; ringleader's from its leader's log, to the millisecond)"
    )
    for hosts, measured in floors.items():
        listed = ", ".join(fmt(value).strip() for value in measured)
        print(
            f"Docker's exits: {hosts} containers of the image exiting at one instant, the last "
            f"exit recorded {fmt(_median(measured)).strip()} s after it (median; runs: {listed})"
        )
    print()
    print("ringleader, successful job: seconds from the first docker start until the last host")
    print("reached each phase of the launcher (job.json's timeline)")
    for hosts, runner, ok, _ in rows:
        if runner == "ringleader" and ok.phases:
            print(f"  {hosts} hosts:")
            for phase, seconds in ok.phases.items():
                print(f"    {seconds:7.2f}  {phase}")
    by_key = {(hosts, runner): (ok, failed) for hosts, runner, ok, failed in rows}
    print()
    print(
        "| hosts | startup ringleader/bare | teardown ringleader/bare | failure ringleader/bare |"
    )
    print("|---|---|---|---|")
    for hosts in args.hosts:
        ours, bare = by_key.get((hosts, "ringleader")), by_key.get((hosts, "bare"))
        if ours and bare:
            cells = [
                _ratio(ours[0].startup, bare[0].startup),
                _ratio(ours[0].teardown, bare[0].teardown),
                _ratio(ours[1].failure if ours[1] else None, bare[1].failure if bare[1] else None),
            ]
            print(f"| {hosts} | " + " | ".join(cells) + " |")
    print_targets(args.hosts, by_key)
    for hosts in args.hosts:
        ours, theirs = by_key.get((hosts, "ringleader")), by_key.get((hosts, "toolkit"))
        if ours and theirs and ours[0].teardown and theirs[0].teardown:
            total_ours = (ours[0].startup or 0) + ours[0].teardown
            total_theirs = (theirs[0].startup or 0) + theirs[0].teardown
            print(
                f"{hosts} hosts: overhead (startup + teardown) ringleader {total_ours:.2f} s, "
                f"toolkit {total_theirs:.2f} s, ratio {total_theirs / total_ours:.1f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
