"""`ringleader slurm` vs Slurm's own launchers in a real Slurm cluster of containers
(scripts/slurm-cluster.sh: slurmctld + 3 slurmd, Slurm 22.05, image ringleader:slurm), 3 nodes x
2 ranks, each job a batch script submitted with sbatch, one job at a time:

  mpi4py  bench/probe/slurm_mpi.py (5 allreduces, then a barrier) under
            ringleader  srun --ntasks-per-node=1 ringleader slurm --processes-per-host 2
                        -- python slurm_mpi.py          (mpirun over the nodes' sshd)
            srun        srun --ntasks-per-node=2 --kill-on-bad-exit=1 --mpi=pmix
                        python slurm_mpi.py             (direct launch, Slurm's PMIx plugin)
  ddp     examples/ddp_train.py (gloo on CPU, --ddp-steps steps) through bench/probe/ddp_probe.py
          under
            ringleader  srun --ntasks-per-node=1 ringleader slurm --distribution
                        torch_distributed --processes-per-host 2 -- python ddp_probe.py
            torchrun    srun --ntasks-per-node=1 --kill-on-bad-exit=1 torchrun --nnodes=3
                        --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=<first node>:29500
                        --rdzv-id=$SLURM_JOB_ID ddp_probe.py   (PyTorch's documented multi-node
                        form; the first node from `scontrol show hostnames`)

Every rank prints `BENCH start <rank> <time.time()>` when its user code starts and `BENCH end
...` just before it exits; in a failure run rank 4 (on the third node) exits 3 after its first
allreduce (mpi4py, `BENCH fail` first) or before its step 2 (ddp, its `BENCH end` is its exit).
The batch script prints `date +%s.%N` just before srun and again, with srun's exit status, as
soon as srun returns. Every container runs on this machine, so all of them share one clock.

  startup   the time just before `sbatch` (on this machine) -> the last of the 6 ranks' BENCH
            start; includes Slurm's scheduling of the job, the same for every launcher but
            spread from 0.1 to 3 s here (at once or at a later pass of the scheduler)
  launch    the batch script's line just before srun -> the last BENCH start: the launcher's
            own share of startup
  teardown  success runs: the last BENCH end -> srun returned in the batch script (exact)
  failure   failure runs: rank 4's exit -> srun returned: every task (and so every rank) ended
  final     the last BENCH end (success) or rank 4's exit (failure) -> the job in a final state
            in `scontrol show job` (polled every 0.1 s once srun has returned, each poll a
            `docker exec` of ~0.1 s: resolution about 0.2 s)
Also for every run: srun's exit status as the batch script saw it, the job's JobState and
ExitCode (no slurmdbd: from `scontrol show job`), and what the job's output names about the
failure: ringleader's verdict line ("Rank 4 on host ... exited with code 3", on how many nodes),
torchrun's "Root Cause" blocks (one per node's torchrun), srun's own `srun: error:` lines.

Every round runs each (workload, launcher, success|failure) once, the launchers' order
alternating round by round, each job submitted once sinfo shows every node idle; the table shows
medians over the rounds and the ratios ringleader / srun (mpi4py) and ringleader / torchrun
(ddp) in the rows `rl/srun` and `rl/torchrun`, every run listed below it with the machine's load
average (1 min) when it was submitted. One cluster for the whole run (its shared directory in a
temporary directory), removed at the end, also after an error. --logs DIR keeps each job's
output file. About 1 minute a round on 2 cores, plus the cluster's start.

Usage: .venv/bin/python bench/slurm.py [--rounds 3] [--mpi pmix] [--ddp-steps 20]
       [--workloads mpi4py ddp] [--image ringleader:slurm] [--logs DIR]
The cluster's container names are fixed and other container tests share this machine:
  flock /tmp/ringleader-docker.lock .venv/bin/python bench/slurm.py
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ringleader.config.slurm import FINAL_JOB_STATES

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_SCRIPT = ROOT / "scripts" / "slurm-cluster.sh"
HEAD = "ringleader-slurm-head"
NODE_PREFIX = "ringleader-slurm-"
NODES, PER_NODE = 3, 2
WORLD = NODES * PER_NODE
FAIL_RANK, FAIL_CODE = 4, 3
RDZV_PORT = 29500
UP_TIMEOUT = 90  # seconds `slurm-cluster.sh up` waits for every node to be idle
SRUN_TIMEOUT = 240.0  # seconds a job's srun may take before the job is cancelled (n/a)
FINAL_TIMEOUT = 60.0  # seconds from srun's return to the job's final state
WORKLOADS = ("mpi4py", "ddp")
BASELINE = {"mpi4py": "srun", "ddp": "torchrun"}
CASES = ("ok", "fail")

MARK = re.compile(r"BENCH (start|end|fail) (\d+) (\d+\.\d{6})")
BATCH = re.compile(r"^BENCH batch (\d+\.\d+)$", re.M)
SRUN = re.compile(r"^BENCH srun (\d+\.\d+) (\d+)$", re.M)
VERDICT = re.compile(r"\[ringleader (\S+)\] \S+\s+(Rank \d+ on host \S+ exited with code \d+)\. ")
SRUN_ERROR = re.compile(r"^srun: error: (\S+): (tasks? [\d,\-]+): (.+)$", re.M)
ROOT_CAUSE = "Root Cause (first observed failure):"
TORCH_FIELD = re.compile(r"^\s*(host|rank|exitcode)\s*:\s*(\S+)")

BATCH_SCRIPT = """#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node={tasks}
#SBATCH --time=5
#SBATCH --output=/shared/jobs/%x-%j.out
cd /shared/code
RINGLEADER_JOB_SECRET=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
export RINGLEADER_JOB_SECRET
echo "BENCH batch $(date +%s.%N)"
{srun}
code=$?
echo "BENCH srun $(date +%s.%N) $code"
exit $code
"""


@dataclass(frozen=True)
class Job:
    """What one finished job left: its output and the times and codes around it."""

    output: str
    submitted: float  # time.time() just before sbatch
    final_seen: float | None  # time.time() when scontrol first showed a final state
    state: str
    exit_code: str
    problem: str = ""


@dataclass(frozen=True)
class Measurement:
    case: str
    startup: float | None = None
    launch: float | None = None
    teardown: float | None = None  # success runs
    failure: float | None = None  # failure runs
    final: float | None = None
    srun_code: str = "?"
    job: str = "?"  # JobState ExitCode
    named: str = ""
    problem: str = ""
    load: float = 0.0


# --- the cluster ------------------------------------------------------------------------------


def docker_exec(argv: Sequence[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "exec", "-w", "/shared/jobs", HEAD, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def cluster(action: str, shared: Path, image: str) -> None:
    env = {
        **os.environ,
        "NODES": str(NODES),
        "SLURM_SHARED": str(shared),
        "SLURM_IMAGE": image,
        "SLURM_UP_TIMEOUT": str(UP_TIMEOUT),
    }
    done = subprocess.run(
        [str(CLUSTER_SCRIPT), action],
        capture_output=True,
        text=True,
        env=env,
        timeout=UP_TIMEOUT + 120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"slurm-cluster.sh {action} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )


def job_fields(job_id: int) -> dict[str, str]:
    """`scontrol show job -o` as fields (a word without "=" belongs to the value before it)."""
    done = docker_exec(["scontrol", "show", "job", "-o", str(job_id)], timeout=30)
    fields: dict[str, str] = {}
    key = None
    for word in done.stdout.split():
        name, sep, value = word.partition("=")
        if sep and name:
            key = name
            fields[key] = value
        elif key is not None:
            fields[key] += " " + word
    return fields


def wait_until_idle(timeout: float = 60) -> None:
    """Until sinfo shows every node idle (the last job's nodes released), so that Slurm
    schedules the next job as it is submitted."""
    deadline = time.monotonic() + timeout
    while True:
        states = docker_exec(["sinfo", "-h", "-N", "-o", "%t"], timeout=30).stdout.split()
        if states == ["idle"] * NODES:
            return
        if time.monotonic() >= deadline:
            raise RuntimeError(f"the nodes are not all idle after {timeout:g} s: {states}")
        time.sleep(0.1)


def run_job(shared: Path, name: str, script: str) -> Job:
    """Submits `script` and waits until srun has returned in it (its output file says so) and
    the job is in a final state; a job whose srun does not return in SRUN_TIMEOUT is
    cancelled."""
    jobs = shared / "jobs"
    (jobs / f"{name}.sh").write_text(script)
    wait_until_idle()
    submitted = time.time()
    done = docker_exec(["sbatch", "--parsable", f"{name}.sh"], timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"sbatch {name} failed ({done.returncode}): {done.stderr}")
    job_id = int(done.stdout.strip().split(";")[0])
    out = jobs / f"{name}-{job_id}.out"
    problem = ""
    deadline = time.monotonic() + SRUN_TIMEOUT
    while not (out.is_file() and SRUN.search(out.read_text(errors="replace"))):
        if time.monotonic() >= deadline:
            problem = f"srun did not return within {SRUN_TIMEOUT:g} s: cancelled"
            docker_exec(["scancel", str(job_id)], timeout=30)
            break
        time.sleep(0.05)
    deadline = time.monotonic() + FINAL_TIMEOUT
    final_seen = None
    while True:
        fields = job_fields(job_id)
        if fields.get("JobState") in FINAL_JOB_STATES:
            final_seen = time.time()
            break
        if time.monotonic() >= deadline:
            problem = problem or f"no final state {FINAL_TIMEOUT:g} s after srun returned"
            break
        time.sleep(0.1)
    output = out.read_text(errors="replace") if out.is_file() else ""
    return Job(
        output,
        submitted,
        final_seen,
        fields.get("JobState", "?"),
        fields.get("ExitCode", "?"),
        problem,
    )


# --- the variants -----------------------------------------------------------------------------


def srun_line(workload: str, launcher: str, case: str, args: argparse.Namespace) -> str:
    if workload == "mpi4py":
        program = f"slurm_mpi.py --rounds {args.mpi_rounds}"
        if case == "fail":
            program += f" --fail-rank {FAIL_RANK} --fail-code {FAIL_CODE}"
        if launcher == "ringleader":
            return (
                f"srun --ntasks-per-node=1 ringleader slurm --processes-per-host {PER_NODE} "
                f"-- python {program}"
            )
        return (
            f"srun --ntasks-per-node={PER_NODE} --kill-on-bad-exit=1 --mpi={args.mpi} "
            f"python {program}"
        )
    program = f"ddp_probe.py --steps {args.ddp_steps} --log-interval {args.ddp_steps}"
    if case == "fail":
        program += f" --fail-rank {FAIL_RANK} --fail-code {FAIL_CODE} --fail-step 2"
    if launcher == "ringleader":
        return (
            "srun --ntasks-per-node=1 ringleader slurm --distribution torch_distributed "
            f"--processes-per-host {PER_NODE} -- python {program}"
        )
    return (
        'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
        f"srun --ntasks-per-node=1 --kill-on-bad-exit=1 torchrun --nnodes={NODES} "
        f"--nproc-per-node={PER_NODE} --rdzv-backend=c10d "
        f'--rdzv-endpoint="$first:{RDZV_PORT}" --rdzv-id="$SLURM_JOB_ID" {program}'
    )


def short(node: str) -> str:
    return node.removeprefix(NODE_PREFIX)


def named(output: str) -> str:
    """What the job's output says about the failure: ringleader's verdict, torchrun's root
    causes, srun's error lines."""
    said: list[str] = []
    verdicts: dict[str, set[str]] = {}
    for node, text in VERDICT.findall(output):
        verdicts.setdefault(text.replace(NODE_PREFIX, ""), set()).add(node)
    for text, nodes in verdicts.items():
        said.append(f"ringleader: '{text}' on {len(nodes)} of {NODES} nodes")
    lines = output.splitlines()
    causes = []
    for index, line in enumerate(lines):
        if ROOT_CAUSE in line:
            found: dict[str, str] = {}
            for after in lines[index + 1 : index + 9]:
                if (m := TORCH_FIELD.match(after)) and m.group(1) not in found:
                    found[m.group(1)] = m.group(2)
            causes.append(
                f"rank {found.get('rank', '?')} exitcode {found.get('exitcode', '?')} "
                f"({short(found.get('host', '?'))})"
            )
    if causes:  # sorted, so that runs differing only in the order of the nodes' lines agree
        said.append("torchrun root causes: " + ", ".join(sorted(causes)))
    errors = [f"{short(node)} {tasks}: {what}" for node, tasks, what in SRUN_ERROR.findall(output)]
    if errors:
        said.append("srun: " + "; ".join(sorted(errors)))
    return " | ".join(said) or "nothing"


def measure(job: Job, case: str) -> Measurement:
    marks: dict[str, dict[int, float]] = {"start": {}, "end": {}, "fail": {}}
    for kind, rank, at in MARK.findall(job.output):
        marks[kind].setdefault(int(rank), float(at))
    batch = BATCH.search(job.output)
    srun = SRUN.search(job.output)
    problem = job.problem
    starts, ends = marks["start"], marks["end"]
    startup = launch = teardown = failure = final = None
    if sorted(starts) == list(range(WORLD)):
        startup = max(starts.values()) - job.submitted
        launch = max(starts.values()) - float(batch.group(1)) if batch else None
    else:
        problem = problem or f"ranks that started: {sorted(starts)}"
    # rank 4's exit: its BENCH fail line (mpi4py) or its BENCH end (ddp: printed as it exits)
    exited = max(ends.values(), default=None) if case == "ok" else None
    if case == "ok" and sorted(ends) != list(range(WORLD)):
        problem = problem or f"ranks that ended: {sorted(ends)}"
        exited = None
    if case == "fail":
        exited = marks["fail"].get(FAIL_RANK, ends.get(FAIL_RANK))
        if exited is None:
            problem = problem or f"no exit of rank {FAIL_RANK}"
    if srun is None:
        problem = problem or "no line of srun's return"
    elif exited is not None:
        seconds = float(srun.group(1)) - exited
        teardown, failure = (seconds, None) if case == "ok" else (None, seconds)
        final = job.final_seen - exited if job.final_seen is not None else None
    if case == "ok" and srun is not None and srun.group(2) != "0":
        problem = problem or f"srun exited {srun.group(2)}"
    return Measurement(
        case,
        startup,
        launch,
        teardown,
        failure,
        final,
        srun_code=srun.group(2) if srun else "?",
        job=f"{job.state} {job.exit_code}",
        named=named(job.output) if case == "fail" else "",
        problem=problem,
    )


def run(
    workload: str, launcher: str, case: str, args: argparse.Namespace, shared: Path, number: int
) -> Measurement:
    name = f"{workload}-{launcher}-{case}-{number}"
    tasks = PER_NODE if launcher == "srun" else 1
    script = BATCH_SCRIPT.format(
        name=name, nodes=NODES, tasks=tasks, srun=srun_line(workload, launcher, case, args)
    )
    load = os.getloadavg()[0]
    job = run_job(shared, name, script)
    if args.logs is not None:
        args.logs.mkdir(parents=True, exist_ok=True)
        (args.logs / f"{name}.out").write_text(job.output)
    return replace(measure(job, case), load=load)


# --- the report -------------------------------------------------------------------------------


def median(values: Sequence[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def fmt(value: float | None, width: int) -> str:
    return f"{'n/a':>{width}}" if value is None else f"{value:{width}.2f}"


def ratio(ours: float | None, theirs: float | None, width: int) -> str:
    if ours is None or not theirs:
        return f"{'n/a':>{width}}"
    return f"{ours / theirs:{width}.2f}"


COLUMNS = (("startup", 10), ("launch", 9), ("teardown", 11), ("failure", 10), ("final", 8))


def row(values: dict[str, float | None]) -> str:
    return "".join(fmt(values[name], width) for name, width in COLUMNS)


def summary(runs: Sequence[Measurement]) -> dict[str, float | None]:
    ok = [m for m in runs if m.case == "ok"]
    fail = [m for m in runs if m.case == "fail"]
    return {
        "startup": median([m.startup for m in runs]),
        "launch": median([m.launch for m in runs]),
        "teardown": median([m.teardown for m in ok]),
        "failure": median([m.failure for m in fail]),
        "final": median([m.final for m in ok]),
    }


def report(
    results: dict[tuple[str, str], list[Measurement]], args: argparse.Namespace, minutes: float
) -> None:
    print(
        f"Slurm, {NODES} nodes x {PER_NODE} ranks ({args.image}): ringleader slurm vs srun "
        f"--mpi={args.mpi} (mpi4py, {args.mpi_rounds} allreduces) and vs torchrun under srun "
        f"(DDP gloo CPU, {args.ddp_steps} steps); {args.rounds} round(s) in {minutes:.1f} min, "
        "medians in seconds"
    )
    print(
        "startup and launch from every run, teardown and final from the success runs, failure "
        "from the failure runs"
    )
    header = "".join(f"{name + ' s':>{width}}" for name, width in COLUMNS)
    print(f"{'workload':<9}{'launcher':<11}{header}")
    medians = {key: summary(runs) for key, runs in results.items()}
    for workload in args.workloads:
        baseline = BASELINE[workload]
        for launcher in ("ringleader", baseline):
            print(f"{workload:<9}{launcher:<11}{row(medians[workload, launcher])}")
        ours, theirs = medians[workload, "ringleader"], medians[workload, baseline]
        cells = "".join(ratio(ours[name], theirs[name], width) for name, width in COLUMNS)
        print(f"{'':<9}{'rl/' + baseline:<11}{cells}")
    print(
        f"\nexit codes (srun in the batch script; the job's JobState ExitCode), success | "
        f"failure (rank {FAIL_RANK} exits {FAIL_CODE}), distinct values over the rounds:"
    )
    for workload in args.workloads:
        for launcher in ("ringleader", BASELINE[workload]):
            runs = results[workload, launcher]
            parts = []
            for case in CASES:
                sruns = sorted({m.srun_code for m in runs if m.case == case})
                jobs = sorted({m.job for m in runs if m.case == case})
                parts.append(f"srun {'/'.join(sruns)}, job {' / '.join(jobs)}")
            print(f"  {workload:<7} {launcher:<11}{' | '.join(parts)}")
    print(f"\nwhat names the failure (rank {FAIL_RANK} on {NODE_PREFIX}node3), distinct texts:")
    for workload in args.workloads:
        for launcher in ("ringleader", BASELINE[workload]):
            texts = sorted({m.named for m in results[workload, launcher] if m.case == "fail"})
            for text in texts:
                print(f"  {workload:<7} {launcher:<11}{text}")
    print(f"\nruns:\n{'run':<27}{header}  load, srun, job, problem")
    for workload in args.workloads:
        for launcher in ("ringleader", BASELINE[workload]):
            for index, m in enumerate(results[workload, launcher]):
                label = f"{workload} {launcher} {m.case} {index // 2 + 1}"
                values = {name: getattr(m, name) for name, _ in COLUMNS}
                note = f"  {m.load:4.1f}, {m.srun_code}, {m.job}"
                print(f"{label:<27}{row(values)}{note}{'  ' + m.problem if m.problem else ''}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each, alternating")
    parser.add_argument("--mpi", default="pmix", help="srun --mpi= for the plain srun variant")
    parser.add_argument("--mpi-rounds", type=int, default=5, help="allreduces of the probe")
    parser.add_argument("--ddp-steps", type=int, default=20, help="DDP steps of a success run")
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--image", default="ringleader:slurm", help="the node image")
    parser.add_argument("--logs", type=Path, default=None, help="keep every job's output here")
    args = parser.parse_args()
    results: dict[tuple[str, str], list[Measurement]] = {
        (workload, launcher): []
        for workload in args.workloads
        for launcher in ("ringleader", BASELINE[workload])
    }
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rl-bench-slurm-") as tmp:
        shared = Path(tmp) / "shared"
        code = shared / "code"
        code.mkdir(parents=True)
        (shared / "jobs").mkdir()
        for source in ("bench/probe/slurm_mpi.py", "bench/probe/ddp_probe.py"):
            shutil.copy(ROOT / source, code)
        shutil.copy(ROOT / "examples" / "ddp_train.py", code)
        print("... starting the Slurm cluster", file=sys.stderr, flush=True)
        try:
            cluster("up", shared, args.image)
            listed = docker_exec(["srun", "--mpi=list"])
            plugins = listed.stdout + listed.stderr
            if not re.search(rf"^\s*{re.escape(args.mpi)}\s*$", plugins, re.M):
                raise RuntimeError(f"srun --mpi=list has no {args.mpi}:\n{plugins}")
            for number in range(args.rounds):
                for workload in args.workloads:
                    launchers = ("ringleader", BASELINE[workload])
                    if number % 2:
                        launchers = launchers[::-1]
                    for case in CASES:
                        for launcher in launchers:
                            print(
                                f"... round {number + 1}: {workload} {launcher} {case}",
                                file=sys.stderr,
                                flush=True,
                            )
                            measurement = run(workload, launcher, case, args, shared, number + 1)
                            results[workload, launcher].append(measurement)
        finally:
            print("... removing the Slurm cluster", file=sys.stderr, flush=True)
            cluster("down", shared, args.image)
    report(results, args, (time.monotonic() - began) / 60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
