"""What ringleader adds per rank: the wrapper mpirun starts for each (`python -m ringleader.rank`).

Measured in the image, for each source tree given: its src/ringleader is copied over the image's
installed package and compiled (as the image has it), in one container per tree and round.
  modules     sys.modules after `import ringleader.rank.wrapper` in a fresh interpreter
  RSS import  VmRSS after that import (MiB)
  peak        VmHWM of that process then (MiB; not ru_maxrss, which counts the RSS of the
              process that started it, whose memory it shared until its exec)
  CPU import  user + system CPU of that whole process: interpreter start-up and the import (ms)
  RSS run     the wrapper's VmRSS while its rank (`sleep`) runs, talking to a stand-in host agent
  private     of that, the pages no other process shares (smaps_rollup Private_*): what each
              more rank really costs the host; the rest is the interpreter's shared files
  threads     the wrapper's threads then (no hang watch: no progress thread)
  CPU run     user + system CPU of the wrapper's whole life for that rank (ms; `sleep` included)
The `bare python` row is `python3 -c` of nothing, in the same containers. Medians over --rounds
rounds x --repeat runs each; the trees alternate their order from round to round.

Usage (the lock keeps it off others' heavy Docker runs):
  git worktree add /tmp/rank-before <commit>
  flock /tmp/ringleader-docker.lock .venv/bin/python bench/rank_cost.py \
      --tree before=/tmp/rank-before --tree after=. [--rounds 5] [--repeat 5]
"""

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PYTHON = "/opt/ringleader/venv/bin/python3"  # the image's venv, where ringleader is installed
MOUNT = "/mnt/ringleader"  # the tree's src/ringleader, read-only
RANK_SECONDS = 1.0  # how long the rank (`sleep`) runs
SETTLE_SECONDS = 0.4  # after the rank started: the wrapper's pumps and sender are running

IMPORT_PROBE = """
import sys
{statement}
with open("/proc/self/status") as status:
    fields = dict(line.split(":", 1) for line in status)
print(len(sys.modules), fields["VmRSS"].split()[0], fields["VmHWM"].split()[0])
"""
COLUMNS = (
    ("modules", "modules", "{:.0f}"),
    ("rss_import", "RSS import", "{:.2f}"),
    ("peak", "peak", "{:.2f}"),
    ("cpu_import", "CPU import", "{:.1f}"),
    ("rss_run", "RSS run", "{:.2f}"),
    ("private_run", "private", "{:.2f}"),
    ("threads", "threads", "{:.0f}"),
    ("cpu_run", "CPU run", "{:.1f}"),
)


# ---- inside the container -------------------------------------------------------------------


def install(tree: Path) -> None:
    """The tree's package in place of the image's, with its bytecode compiled."""
    import compileall
    import shutil
    import sysconfig

    target = Path(sysconfig.get_paths()["purelib"]) / "ringleader"
    shutil.rmtree(target)
    shutil.copytree(tree, target, ignore=shutil.ignore_patterns("__pycache__"))
    compileall.compile_dir(target, quiet=1)


def cpu_ms(usage: resource.struct_rusage) -> float:  # the child's own and its waited-for children's
    return float(usage.ru_utime + usage.ru_stime) * 1000


def wait(process: "subprocess.Popen[bytes]") -> resource.struct_rusage:
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return usage


def import_sample(statement: str) -> dict[str, float]:
    process = subprocess.Popen(
        [sys.executable, "-c", IMPORT_PROBE.format(statement=statement)], stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    modules, rss_kib, peak_kib = process.stdout.read().split()
    usage = wait(process)
    return {
        "modules": int(modules),
        "rss_import": int(rss_kib) / 1024,
        "peak": int(peak_kib) / 1024,
        "cpu_import": cpu_ms(usage),
    }


def status_fields(pid: int, name: str, fields: tuple[str, ...]) -> list[int]:
    values = {}
    with open(f"/proc/{pid}/{name}") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in fields:
                values[key] = int(rest.split()[0])
    return [values[field] for field in fields]


def run_sample(workdir: Path) -> dict[str, float]:
    """One wrapper around `sleep`, with a stand-in host agent that acknowledges its end."""
    from ringleader.wire.messages import Ack, RankEnd, RankStart, UnknownMessage
    from ringleader.wire.protocol import Channel

    agent = workdir / "agent.sock"
    agent.unlink(missing_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(agent))
    server.listen()
    started = threading.Event()

    def serve() -> None:
        connection, _ = server.accept()
        channel = Channel(connection)
        while True:
            try:
                message = channel.receive_message(timeout=None)
            except UnknownMessage:
                continue
            except Exception:  # the wrapper is gone
                return
            if isinstance(message, RankStart):
                started.set()
            elif isinstance(message, RankEnd):
                channel.send(Ack())

    threading.Thread(target=serve, daemon=True).start()
    wrapper = subprocess.Popen(
        [
            *(sys.executable, "-m", "ringleader.rank", "--agent", str(agent)),
            *("--host-env", str(workdir / "absent.json"), "--log-dir", str(workdir / "logs")),
            *("--", "sleep", str(RANK_SECONDS)),
        ],
        env={**os.environ, "RINGLEADER_RUN_DIR": str(workdir)},
        stdout=subprocess.DEVNULL,
    )
    if not started.wait(30):
        sys.exit("the wrapper never reported its rank's start")
    time.sleep(SETTLE_SECONDS)
    threads, rss = status_fields(wrapper.pid, "status", ("Threads", "VmRSS"))
    private = sum(status_fields(wrapper.pid, "smaps_rollup", ("Private_Clean", "Private_Dirty")))
    usage = wait(wrapper)
    server.close()
    return {
        "rss_run": rss / 1024,
        "private_run": private / 1024,
        "threads": threads,
        "cpu_run": cpu_ms(usage),
    }


def inside(repeat: int) -> None:
    install(Path(MOUNT))
    samples: dict[str, list[dict[str, float]]] = {"bare": [], "wrapper": []}
    with tempfile.TemporaryDirectory() as workdir:
        run_sample(Path(workdir))  # warm-up: every module read once
        for _ in range(repeat):
            samples["bare"].append(import_sample(""))
            sample = import_sample("import ringleader.rank.wrapper")
            sample.update(run_sample(Path(workdir)))
            samples["wrapper"].append(sample)
    print(json.dumps(samples))


# ---- on this machine ------------------------------------------------------------------------


def measure(image: str, tree: Path, repeat: int) -> dict[str, list[dict[str, float]]]:
    command = [
        *("docker", "run", "--rm", "--entrypoint", PYTHON),
        *("-v", f"{tree / 'src' / 'ringleader'}:{MOUNT}:ro"),
        *("-v", f"{Path(__file__).resolve()}:/bench/rank_cost.py:ro"),
        *(image, "/bench/rank_cost.py", "--inside", "--repeat", str(repeat)),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stderr}")
    samples: dict[str, list[dict[str, float]]] = json.loads(result.stdout)
    return samples


def medians(samples: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(sample[key] for sample in samples) for key in samples[0]}


def row(label: str, values: dict[str, float]) -> str:
    cells = [template.format(values[key]) if key in values else "-" for key, _, template in COLUMNS]
    return f"{label:<14}" + "".join(f"{cell:>12}" for cell in cells)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tree",
        action="append",
        metavar="LABEL=PATH",
        help="a source tree (repository root) to measure; default: this one",
    )
    parser.add_argument("--image", default="ringleader:latest")
    parser.add_argument("--rounds", type=int, default=5, help="containers per tree")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each probe per container")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        inside(args.repeat)
        return 0
    trees = dict(
        (label, Path(path).resolve())
        for label, _, path in (spec.partition("=") for spec in args.tree or ["this=."])
    )
    bare: list[dict[str, float]] = []
    wrapper: dict[str, list[dict[str, float]]] = {label: [] for label in trees}
    for round_number in range(1, args.rounds + 1):
        for label in list(trees)[:: 1 if round_number % 2 else -1]:
            print(f"... round {round_number}/{args.rounds}: {label}", file=sys.stderr, flush=True)
            samples = measure(args.image, trees[label], args.repeat)
            bare += samples["bare"]
            wrapper[label] += samples["wrapper"]
    cells = {label: medians(runs) for label, runs in wrapper.items()}
    print(
        f"the rank wrapper in {args.image}, median of {args.rounds} alternating rounds x "
        f"{args.repeat} runs (MiB, ms)"
    )
    print(f"{'':<14}" + "".join(f"{title:>12}" for _, title, _ in COLUMNS))
    print(row("bare python", medians(bare)))
    for label, values in cells.items():
        print(row(label, values))
    print()
    for label, values in cells.items():
        print(
            f"{label}: 256 ranks' wrappers hold {values['rss_run'] * 256 / 1024:.2f} GiB of RSS, "
            f"{values['private_run'] * 256 / 1024:.2f} GiB of it private"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
