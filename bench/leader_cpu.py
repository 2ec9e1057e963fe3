"""The leader's CPU while every rank of a large job prints: 32 hosts x 2 ranks, each printing
2,000 lines/s for 60 s (bench/probe/steady_lines.py).

Two runs: every rank shown (`ringleader_log_ranks` all, the default) and only rank 0 shown
(the other ranks' lines stay in their hosts' rank logs and are not sent to the leader).
Printed per run:
  leader CPU     cores used by the leader's own processes (entry point with its threads, pulse
                 process), from the leader container's processes sampled every --interval s,
                 while its ranks ran (--margin s cut at each end)
  logs           lines in every rank's log on its host, and whether each has every index
  shown          lines of the shown ranks in the leader's output, against what they printed
  pulses         the largest gap between pulses any host saw from the leader, or the leader
                 from any worker, and the exit codes (a host declared lost would show as 75)

Usage: .venv/bin/python bench/leader_cpu.py [--hosts 32] [--rate 2000] [--seconds 60]
"""

import argparse
import re
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import docker
from own_cpu import OWN, Sampler

from ringleader.tools.local.plan import LocalJobSpec
from ringleader.tools.local.run import LocalJob

PROBE_DIR = Path(__file__).resolve().parent / "probe"
LOG_LINE = re.compile(r"R(\d+) L(\d+) x+ END$")
# "pulses from algo-7: ..." (the leader's view of a worker), "pulses from the leader: ..."
GAP = re.compile(r"pulses from ([^:]+): \d+ pulses, gap p50 .* max ([0-9.]+) s")


class CountingSink:
    """Counts the shown ranks' lines as `ringleader local` prints them (nothing kept; cheap, as
    it shares a process with the tool that streams the containers' logs)."""

    def __init__(self) -> None:
        self.shown = 0
        self.notes: list[str] = []
        self.gaps: list[tuple[str, float]] = []
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self.shown += text.count(" END\n")
            if "pulses from" in text or "==> warning" in text:
                for line in text.splitlines():
                    if (gap := GAP.search(line)) is not None:
                        self.gaps.append((gap.group(1), float(gap.group(2))))
                    elif "==> warning" in line:
                        self.notes.append(line)
        return len(text)

    def flush(self) -> None:
        pass


@dataclass(frozen=True)
class Result:
    cores: float | None
    log_lines: int
    complete_logs: int
    shown_lines: int
    shown_expected: int
    largest_gap: float | None
    codes: str


def count_log(path: Path, rank: int, expected: int) -> tuple[int, bool]:
    """Lines of the rank's log, and whether it holds every index 0..expected-1 in order."""
    count, following = 0, 0
    try:
        with path.open(errors="replace") as handle:
            for line in handle:
                match = LOG_LINE.match(line.rstrip("\n"))
                if match is None or int(match.group(1)) != rank:
                    continue
                count += 1
                following += int(match.group(2)) == following
    except OSError:
        return 0, False
    return count, following == expected == count


def run(hosts: int, rate: int, seconds: float, shown: str, args: argparse.Namespace) -> Result:
    with tempfile.TemporaryDirectory(prefix="rl-leader-cpu-") as workdir:
        spec = LocalJobSpec(
            hosts=hosts,
            processes_per_host=2,
            source_dir=PROBE_DIR,
            entry_point="steady_lines.py",
            hyperparameters={"rate": str(rate), "seconds": str(seconds)},
            settings={"log_ranks": shown},
            output_dir=Path(workdir),
        )
        sink = CountingSink()
        job = LocalJob(spec, sink, docker.from_env())  # type: ignore[arg-type]
        leader = job.hosts[0].name
        sampler = Sampler(job, args.interval, only={leader})
        sampler.start()
        try:
            result = job.run()
        finally:
            sampler.stop()
        cores = None
        if (printing := sampler.running(leader, "user code")) is not None:
            start, end = printing[0] + args.margin, printing[1] - args.margin
            cores = sampler.cores(leader, OWN, start, end)
        expected = round(rate * seconds)
        log_lines = complete = 0
        for host in result.hosts:
            logs = result.output_dir / host.name / "output" / "data" / "logs" / host.name
            for log in sorted(logs.glob("rank-*.log")):
                count, whole = count_log(log, int(log.stem.split("-")[1]), expected)
                log_lines += count
                complete += whole
        for note in sink.notes:
            print(f"    {note}", file=sys.stderr)
        shown_ranks = hosts * 2 if shown == "all" else len(shown.split(","))
        return Result(
            cores,
            log_lines,
            complete,
            sink.shown,
            shown_ranks * expected,
            max((gap for _, gap in sink.gaps), default=None),
            " ".join(str(host.exit_code) for host in result.hosts),
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=32)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--margin", type=float, default=10.0)
    parser.add_argument("--shown", nargs="+", default=["all", "0"])
    args = parser.parse_args()
    results = {}
    for shown in args.shown:
        print(f"... ringleader_log_ranks={shown}", file=sys.stderr, flush=True)
        results[shown] = run(args.hosts, args.rate, args.seconds, shown, args)
    ranks = args.hosts * 2
    print(
        f"{args.hosts} hosts x 2 ranks, each {args.rate} lines/s for {args.seconds:g} s "
        f"({ranks * args.rate} lines/s in all)"
    )
    print(
        f"{'shown':<8}{'leader cores':>13}{'log lines':>12}{'complete logs':>15}"
        f"{'shown lines':>13}{'of':>11}{'max pulse gap s':>17}  exit codes"
    )
    for shown, result in results.items():
        cores = "n/a" if result.cores is None else f"{result.cores:.2f}"
        gap = "n/a" if result.largest_gap is None else f"{result.largest_gap:.2f}"
        print(
            f"{shown:<8}{cores:>13}{result.log_lines:>12}{result.complete_logs:>9} of {ranks:<3}"
            f"{result.shown_lines:>13}{result.shown_expected:>11}{gap:>17}  {result.codes}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
