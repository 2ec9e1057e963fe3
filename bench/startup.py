"""Startup and failure-propagation benchmark: ringleader vs an expert's bare mpirun vs
sagemaker-training's `train`.

All run in the same image (ringleader:latest), on the same fake hosts, with the same probe job
(bench/probe/probe.py: one second of work per rank, 2 ranks per host). For each host count it
prints, side by side:
  startup   first `docker start` -> user code running on every rank
  teardown  last rank's exit -> last container's exit (successful job)
  failure   rank 1 exits 3 -> every container has exited, and the exit codes they reported
"bare" (bench/probe/bare_mpirun.sh): the containers run only sshd; the first one waits until it
can ssh to the others and runs mpirun of the probe, as an expert would by hand.

Usage: .venv/bin/python bench/startup.py [--hosts 2 4 8] [--runners ringleader bare toolkit]
       [--toolkit-hosts 2 4 16] [--mpi-options '--mca plm_rsh_no_tree_spawn 1']
The toolkit's failure runs take minutes (its workers poll); --skip-toolkit-failure skips them.
"""

import argparse
import io
import os
import re
import sys
import tempfile
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


def bench_times(output: str, kind: str) -> list[float]:
    # Searched in the whole text: the toolkit's plain mpirun output tears lines apart.
    pattern = re.compile(rf"BENCH {kind} \d+ (\d+\.\d{{6}})")
    return [float(match.group(1)) for match in pattern.finditer(output)]


def run(runner: str, hosts: int, fail: bool, workdir: Path, options: str = "") -> Measurement:
    hyperparameters = {"work": "1"}
    if fail:
        hyperparameters["fail-rank"] = str(FAIL_RANK)
    spec = LocalJobSpec(
        hosts=hosts,
        processes_per_host=2,
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
    )
    if runner == "bare":
        # mpirun gets the options ringleader would give it (the user's, and yielding ranks
        # when the fake hosts oversubscribe the machine)
        spec = replace(spec, env={"MPIRUN_OPTIONS": mpi_options(spec, os.cpu_count() or 1)})
    out = io.StringIO()
    result: LocalJobResult = LocalJob(spec, out, docker.from_env()).run()
    output = out.getvalue()
    first_start = min(host.started_at for host in result.hosts)
    last_exit = max(host.finished_at for host in result.hosts)
    starts, ends, fails = (bench_times(output, kind) for kind in ("start", "end", "fail"))
    world = hosts * 2
    startup = max(starts) - first_start if len(starts) == world else None
    teardown = last_exit - max(ends) if not fail and len(ends) == world else None
    failure = last_exit - fails[0] if fail and fails else None
    job_file = result.output_dir / result.hosts[0].name / "output" / "data" / "job.json"
    return Measurement(
        startup,
        teardown,
        failure,
        tuple(h.exit_code for h in result.hosts),
        phase_times(job_file, first_start) if runner == "ringleader" and not fail else {},
    )


def _ratio(ours: float | None, bare: float | None) -> str:
    if ours is None or bare is None:
        return "n/a"
    return f"{ours:.2f} / {bare:.2f} = {ours / bare:.2f}x" if bare > 0 else f"{ours:.2f} / 0"


def fmt(value: float | None) -> str:
    return "   n/a" if value is None else f"{value:6.2f}"


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
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="rl-bench-") as workdir:
        for hosts in args.hosts:
            for runner in args.runners:
                toolkit_hosts = args.toolkit_hosts
                if runner == "toolkit" and toolkit_hosts is not None and hosts not in toolkit_hosts:
                    continue
                print(f"... {runner}: {hosts} hosts, successful job", file=sys.stderr, flush=True)
                ok = run(runner, hosts, False, Path(workdir), args.mpi_options)
                failed = None
                if not (runner == "toolkit" and args.skip_toolkit_failure):
                    print(
                        f"... {runner}: {hosts} hosts, rank {FAIL_RANK} exits 3",
                        file=sys.stderr,
                        flush=True,
                    )
                    failed = run(runner, hosts, True, Path(workdir), args.mpi_options)
                rows.append((hosts, runner, ok, failed))
    print(
        f"{'hosts':>5}  {'runner':<10}  {'startup s':>9}  {'teardown s':>10}  "
        f"{'failure s':>9}  exit codes after rank {FAIL_RANK} exits 3"
    )
    for hosts, runner, ok, failed in rows:
        codes = "skipped" if failed is None else " ".join(str(code) for code in failed.codes)
        print(
            f"{hosts:>5}  {runner:<10}  {fmt(ok.startup):>9}  {fmt(ok.teardown):>10}  "
            f"{fmt(failed.failure if failed else None):>9}  {codes}"
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
