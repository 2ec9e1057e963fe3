"""DDP through ringleader vs plain `torchrun` on every host: same image, same fake hosts, same
script (examples/ddp_train.py, gloo on CPU), runs alternating so both see the same machine.

For each run it measures:
  steps/s   the training loop's speed as the script reports it (rank 0, `done:` line)
  startup   first `docker start` -> the last rank's user code running
  teardown  the last rank's user code ended -> the last container exited
torchrun gets the command line AWS's PyTorch container uses (--nnodes N --nproc_per_node P
--master_addr <first host> --master_port 7777 --node_rank K, the node rank from PET_NODE_RANK).

Usage: .venv/bin/python bench/ddp.py [--hosts 3] [--processes-per-host 2] [--steps 300]
       [--rounds 3]
"""

import argparse
import io
import re
import shutil
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import docker

from ringleader.tools.local.plan import LocalJobSpec, host_names
from ringleader.tools.local.run import LocalJob

BENCH = Path(__file__).resolve().parent
IMAGE = "ringleader:horovod"
PYTHON = "/opt/ringleader/venv/bin/python"
DONE = re.compile(r"done: \d+ steps on \d+ ranks in [0-9.]+ s \(([0-9.]+) steps/s\)")


@dataclass(frozen=True)
class Measurement:
    steps_per_second: float | None
    startup: float | None
    teardown: float | None
    codes: tuple[int | None, ...]


def bench_times(output: str, kind: str) -> list[float]:
    return [float(m) for m in re.findall(rf"BENCH {kind} \d+ (\d+\.\d{{6}})", output)]


def torchrun_on_every_host(
    spec: LocalJobSpec, port: int, script: str, script_args: Sequence[str]
) -> LocalJobSpec:
    """`spec` run as AWS's PyTorch container runs a torch_distributed job: torchrun on every
    host (--nnodes N --nproc_per_node P, the first host as master, node ranks in host order)."""
    names = host_names(spec.hosts, random_suffix=False)
    return replace(
        spec,
        entrypoint=(PYTHON, "-m", "torch.distributed.run"),
        command=(
            f"--nnodes={spec.hosts}",
            f"--nproc_per_node={spec.processes_per_host}",
            f"--master_addr={names[0]}",
            f"--master_port={port}",
            f"/opt/ml/code/{script}",
            *script_args,
        ),
        env_overrides={name: {"PET_NODE_RANK": str(i)} for i, name in enumerate(names)},
    )


def run(runner: str, args: argparse.Namespace, source: Path, workdir: Path) -> Measurement:
    script_args = ("--steps", str(args.steps), "--log-interval", str(args.steps))
    common = {
        "hosts": args.hosts,
        "processes_per_host": args.processes_per_host,
        "source_dir": source,
        "entry_point": "ddp_probe.py",
        "image": IMAGE,
        "output_dir": workdir,
    }
    if runner == "ringleader":
        spec = LocalJobSpec(
            **common,
            distribution="torch_distributed",
            hyperparameters={"steps": str(args.steps), "log-interval": str(args.steps)},
        )
    else:
        spec = torchrun_on_every_host(LocalJobSpec(**common), 7777, "ddp_probe.py", script_args)
    out = io.StringIO()
    result = LocalJob(spec, out, docker.from_env()).run()
    output = out.getvalue()
    world = args.hosts * args.processes_per_host
    starts, ends = bench_times(output, "start"), bench_times(output, "end")
    first_start = min(host.started_at for host in result.hosts)
    last_exit = max(host.finished_at for host in result.hosts)
    done = DONE.search(output)
    return Measurement(
        steps_per_second=float(done.group(1)) if done else None,
        startup=max(starts) - first_start if len(starts) == world else None,
        teardown=last_exit - max(ends) if len(ends) == world else None,
        codes=tuple(host.exit_code for host in result.hosts),
    )


def median(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def fmt(value: float | None, width: int = 8) -> str:
    return f"{'n/a':>{width}}" if value is None else f"{value:{width}.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--processes-per-host", type=int, default=2)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each, alternating")
    args = parser.parse_args()
    runners = ("torchrun", "ringleader")
    results: dict[str, list[Measurement]] = {runner: [] for runner in runners}
    with tempfile.TemporaryDirectory(prefix="rl-bench-ddp-") as tmp:
        source = Path(tmp) / "code"
        source.mkdir()
        shutil.copy(BENCH / "probe" / "ddp_probe.py", source)
        shutil.copy(BENCH.parent / "examples" / "ddp_train.py", source)
        for round_number in range(1, args.rounds + 1):
            for runner in runners:
                print(f"... round {round_number}: {runner}", file=sys.stderr, flush=True)
                results[runner].append(run(runner, args, source, Path(tmp) / "out"))
    print(
        f"DDP on {args.hosts} hosts x {args.processes_per_host}, {args.steps} steps, "
        f"{args.rounds} runs each (median; every run listed)"
    )
    print(f"{'runner':<11}{'steps/s':>8}{'startup s':>11}{'teardown s':>12}  exit codes per run")
    summary = {}
    for runner in runners:
        runs = results[runner]
        row = tuple(
            median([getattr(m, name) for m in runs])
            for name in ("steps_per_second", "startup", "teardown")
        )
        summary[runner] = row
        codes = " | ".join(" ".join(str(code) for code in m.codes) for m in runs)
        print(f"{runner:<11}{fmt(row[0])}{fmt(row[1], 11)}{fmt(row[2], 12)}  {codes}")
        for m in runs:
            print(f"{'':<11}{fmt(m.steps_per_second)}{fmt(m.startup, 11)}{fmt(m.teardown, 12)}")
    ours, theirs = summary["ringleader"], summary["torchrun"]
    labels = ("steps/s", "startup", "teardown")
    ratios = [
        f"{label} {o / t:.3f}" if o is not None and t else f"{label} n/a"
        for label, o, t in zip(labels, ours, theirs, strict=True)
    ]
    print("ringleader / torchrun: " + ", ".join(ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
