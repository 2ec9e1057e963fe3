"""CPU-seconds of ringleader's own processes per host, for a trivial job.

A job of bench/probe/probe.py (2 ranks per host, --work 0: MPI_Init, two barriers, exit) runs
on fake hosts; the bench samples every process of every container from this machine (the
containers share its kernel) every --interval seconds and keeps each process's last CPU time
(user + system). Processes are sorted by what they are:
  entry point    the container's ringleader entry point (with its threads: agent, relay, leader)
  pulse          ringleader's pulse processes (one per control connection)
  rank wrapper   `python -m ringleader.rank` (one per rank)
  MPI            sshd, mpirun, orted (also under a bare mpirun)
  user code      the probe itself
The first three are ringleader's own. A process's CPU after its last sample is not counted
(at most one interval's worth). Printed: per host and in total, by kind, over --runs runs.

Usage: .venv/bin/python bench/own_cpu.py [--hosts 3] [--runs 3] [--interval 0.02]
"""

import argparse
import io
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import docker
import psutil

from ringleader.tools.local.plan import LocalJobSpec
from ringleader.tools.local.run import LocalJob

PROBE_DIR = Path(__file__).resolve().parent / "probe"
OWN = ("entry point", "pulse", "rank wrapper")
KINDS = (*OWN, "MPI", "user code")


def kind_of(cmdline: list[str], name: str) -> str:
    text = " ".join(cmdline)
    if "ringleader.supervise" in text or "ringleader-entrypoint" in text:
        return "entry point"
    if "ringleader.wire.pulse_process" in text:
        return "pulse"
    if "ringleader.rank" in text:
        return "rank wrapper"
    if name in ("sshd", "mpirun", "orted", "prted", "ssh") or "sshd" in text:
        return "MPI"
    return "user code"


class Sampler:
    """Every `interval` s: each container's processes and their CPU time so far."""

    def __init__(self, job: LocalJob, interval: float, only: set[str] | None = None) -> None:
        self._job, self._interval, self._only = job, interval, only
        self._client = docker.from_env()
        self._roots: dict[str, psutil.Process] = {}
        self.cpu: dict[tuple[int, float], float] = {}  # (pid, created) -> CPU seconds
        self.where: dict[tuple[int, float], tuple[str, str]] = {}  # -> (host, kind)
        # per host, after each sample: (time.monotonic(), CPU seconds by kind so far), and
        # (time.monotonic(), the kinds of the processes running then)
        self.history: dict[str, list[tuple[float, dict[str, float]]]] = defaultdict(list)
        self.present: dict[str, list[tuple[float, set[str]]]] = defaultdict(list)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            for host, container in self._job.container_ids.items():
                if self._only is not None and host not in self._only:
                    continue
                if host not in self._roots:
                    try:
                        pid = self._client.api.inspect_container(container)["State"]["Pid"]
                        if pid:
                            self._roots[host] = psutil.Process(pid)
                    except (docker.errors.NotFound, psutil.Error):
                        continue
                root = self._roots.get(host)
                if root is not None:
                    self._sample(host, root)
                    self.history[host].append((time.monotonic(), self.per_host().get(host, {})))

    def _sample(self, host: str, root: psutil.Process) -> None:
        try:
            processes = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        kinds = set()
        for process in processes:
            try:
                with process.oneshot():
                    key = (process.pid, process.create_time())
                    times = process.cpu_times()
                    if key not in self.where:
                        self.where[key] = (host, kind_of(process.cmdline(), process.name()))
            except psutil.Error:
                continue
            self.cpu[key] = times.user + times.system
            kinds.add(self.where[key][1])
        self.present[host].append((time.monotonic(), kinds))

    def cores(self, host: str, kinds: Sequence[str], start: float, end: float) -> float | None:
        """Cores the processes of these kinds used on the host between two monotonic times."""
        inside = [(at, sum(cpu[k] for k in kinds)) for at, cpu in self.history[host]]
        inside = [(at, cpu) for at, cpu in inside if start <= at <= end]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return None
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])

    def running(self, host: str, kind: str) -> tuple[float, float] | None:
        """The first and last sample at which the host had processes of that kind running."""
        times = [at for at, present in self.present[host] if kind in present]
        return (times[0], times[-1]) if times else None

    def per_host(self) -> dict[str, dict[str, float]]:
        result: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(KINDS, 0.0))
        for key, seconds in self.cpu.items():
            host, kind = self.where[key]
            result[host][kind] += seconds
        return dict(result)


def run(hosts: int, interval: float, workdir: Path) -> tuple[dict[str, dict[str, float]], str]:
    spec = LocalJobSpec(
        hosts=hosts,
        processes_per_host=2,
        source_dir=PROBE_DIR,
        entry_point="probe.py",
        hyperparameters={"work": "0"},
        output_dir=workdir,
    )
    out = io.StringIO()
    job = LocalJob(spec, out, docker.from_env())
    sampler = Sampler(job, interval)
    sampler.start()
    try:
        result = job.run()
    finally:
        sampler.stop()
    codes = " ".join(str(host.exit_code) for host in result.hosts)
    return sampler.per_host(), codes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--interval", type=float, default=0.02)
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory(prefix="rl-bench-cpu-") as workdir:
        for number in range(1, args.runs + 1):
            print(f"... run {number} of {args.runs}", file=sys.stderr, flush=True)
            per_host, codes = run(args.hosts, args.interval, Path(workdir))
            print(f"    exit codes {codes}", file=sys.stderr, flush=True)
            runs.append(per_host)
    hosts = sorted(runs[0])
    print(f"CPU seconds per host, trivial job, {args.hosts} hosts x 2 ranks, median of {len(runs)}")
    print(f"{'host':<8}" + "".join(f"{kind:>14}" for kind in KINDS) + f"{'ringleader':>12}")
    for host in hosts:
        values = [
            statistics.median(run.get(host, {}).get(kind, 0.0) for run in runs) for kind in KINDS
        ]
        own = statistics.median(
            sum(run.get(host, {}).get(kind, 0.0) for kind in OWN) for run in runs
        )
        print(f"{host:<8}" + "".join(f"{value:>14.3f}" for value in values) + f"{own:>12.3f}")
    totals = [sum(sum(run[host][kind] for kind in OWN) for host in run) for run in runs]
    print(
        f"ringleader's own CPU, all hosts: median {statistics.median(totals):.2f} s "
        f"(runs: {', '.join(f'{t:.2f}' for t in totals)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
