"""The training hot path: Horovod samples/s through ringleader vs the same command under an
expert's bare mpirun (bench/probe/bare_mpirun.sh) on the same fake hosts (PyTorch in
ringleader:horovod, or with --framework tensorflow Keras in ringleader:tf-horovod; 3 x 2 by
default), runs alternating (and which goes first alternating too) so both see the
same machine. Both run the ranks with the same MPI options (ringleader local adds `--mca
mpi_yield_when_idle 1` when the ranks outnumber the cores; the bare runs get it too, so only
the launcher differs).

Usage: .venv/bin/python bench/horovod.py [--framework pytorch|tensorflow] [--hosts 3]
       [--per-host 2] [--steps 600] [--rounds 3]
(`--hosts 1 --per-host 4`: the posts' one instance with P processes, `mpirun -np 4` by hand.)
"""

import argparse
import io
import os
import re
import shutil
import statistics
import tempfile
from pathlib import Path

import docker
from startup import bare_env

from ringleader.tools.local.plan import YIELD_OPTION, LocalJobSpec, oversubscribed
from ringleader.tools.local.run import LocalJob

REPO = Path(__file__).resolve().parents[1]
# framework -> (image, example, its arguments for N steps)
FRAMEWORKS = {
    "pytorch": (
        "ringleader:horovod",
        "horovod_train.py",
        lambda steps: {"steps": steps, "log-interval": steps},
    ),
    "tensorflow": (
        "ringleader:tf-horovod",
        "tf_horovod_train.py",
        lambda steps: {"epochs": "1", "steps-per-epoch": steps, "log-interval": steps},
    ),
}
DONE = re.compile(r"done: \d+ steps on \d+ ranks in [0-9.]+ s \(([0-9.]+) samples/s\)")


def samples_per_second(runner: str, args: argparse.Namespace, source: Path, out: Path) -> float:
    image, example, arguments = FRAMEWORKS[args.framework]
    script_args = arguments(str(args.steps))
    spec = LocalJobSpec(
        hosts=args.hosts,
        processes_per_host=args.per_host,
        source_dir=source,
        entry_point=example,
        image=image,
        output_dir=out,
    )
    yield_option = oversubscribed(spec, os.cpu_count() or 1)
    if runner == "ringleader":
        spec = LocalJobSpec(**{**spec.__dict__, "hyperparameters": script_args})
    else:
        command = (example, *(f"--{k}={v}" for k, v in script_args.items()))
        spec = LocalJobSpec(
            **{
                **spec.__dict__,
                "entrypoint": ("/bin/sh", "/opt/ml/code/bare_mpirun.sh"),
                "command": command,
                "env": bare_env(YIELD_OPTION if yield_option else "", args.per_host),
            }
        )
    text = io.StringIO()
    result = LocalJob(spec, text, docker.from_env()).run()
    found = DONE.search(text.getvalue())
    if result.exit_code != 0 or found is None:
        raise SystemExit(f"{runner} failed ({result.exit_code}):\n{text.getvalue()[-3000:]}")
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--framework", choices=sorted(FRAMEWORKS), default="pytorch")
    parser.add_argument("--per-host", type=int, default=2, help="--hosts 1 --per-host 4: one host")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rl-bench-hvd-") as workdir:
        source = Path(workdir) / "code"
        source.mkdir()
        shutil.copy(REPO / "examples" / FRAMEWORKS[args.framework][1], source)
        shutil.copy(REPO / "bench" / "probe" / "bare_mpirun.sh", source)
        samples: dict[str, list[float]] = {"ringleader": [], "bare": []}
        for round_ in range(1, args.rounds + 1):
            # the order alternates: whoever runs second must not always get a warmer machine
            for runner in list(samples)[:: 1 if round_ % 2 else -1]:
                value = samples_per_second(runner, args, source, Path(workdir) / "out")
                samples[runner].append(value)
                print(f"round {round_} {runner}: {value:.1f} samples/s", flush=True)
    ours, bare = (statistics.median(samples[name]) for name in ("ringleader", "bare"))
    print(
        f"\n{args.framework}: {args.hosts} x {args.per_host} ranks, {args.steps} steps, "
        f"median of {args.rounds}:"
    )
    print("| runner | samples/s | runs |")
    print("|---|---|---|")
    for name, values in samples.items():
        runs = ", ".join(f"{value:.0f}" for value in values)
        print(f"| {name} | {statistics.median(values):.1f} | {runs} |")
    print(f"ringleader / bare = {ours / bare:.3f} (target at least 0.98)")
    # Each round's two runs share the machine's state of the moment: their ratio is steadier
    # than the ratio of medians when the machine's speed drifts between rounds.
    paired = [a / b for a, b in zip(samples["ringleader"], samples["bare"], strict=True)]
    print(
        f"per round ringleader / bare: {', '.join(f'{r:.3f}' for r in paired)}; "
        f"median {statistics.median(paired):.3f}"
    )


if __name__ == "__main__":
    main()
