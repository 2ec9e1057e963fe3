"""Liveness under load: no host may be declared lost while every CPU is saturated.

3 fake hosts x 4 ranks on this 2-core machine, every rank busy-looping and printing 20,000
lines/s (bench/probe/flood.py), for --seconds per run, --runs times. Every host logs, at its
end, how regularly the other side's pulses arrived; this prints the distribution of pulse gaps
(p50, p99, max over all runs and hosts) and the number of false losses (a host declared lost,
or a run whose hosts did not all exit 0), which must be 0.

Usage: .venv/bin/python bench/liveness.py [--runs 20] [--seconds 60] [--leader-timeout 10]
"""

import argparse
import io
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import docker

from ringleader.tools.local.plan import LocalJobSpec
from ringleader.tools.local.run import LocalJob

PROBE_DIR = Path(__file__).resolve().parent / "probe"
SUMMARY = re.compile(
    r"pulses from (.+?): (\d+) pulses, gap p50 ([\d.]+) s, p99 ([\d.]+) s, max ([\d.]+) s"
)
LOSS = re.compile(r"lost worker \S+|\(the leader\): ")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--leader-timeout", type=float, default=10.0)
    args = parser.parse_args()
    client = docker.from_env()
    p50s, p99s, maxima, false_losses, lines_seen = [], [], [], 0, []
    with tempfile.TemporaryDirectory(prefix="rl-liveness-") as workdir:
        for index in range(1, args.runs + 1):
            spec = LocalJobSpec(
                hosts=3,
                processes_per_host=4,
                source_dir=PROBE_DIR,
                entry_point="flood.py",
                hyperparameters={"seconds": f"{args.seconds:g}", "rate": str(args.rate)},
                settings={"leader_timeout": f"{args.leader_timeout:g}", "log_ranks": "0"},
                output_dir=Path(workdir),
            )
            out = io.StringIO()
            started = time.monotonic()
            result = LocalJob(spec, out, client).run()
            text = out.getvalue()
            codes = [host.exit_code for host in result.hosts]
            summaries = SUMMARY.findall(text)
            losses = LOSS.findall(text)
            failed = bool(losses) or any(code != 0 for code in codes)
            false_losses += failed
            for _host, _count, p50, p99, largest in summaries:
                p50s.append(float(p50))
                p99s.append(float(p99))
                maxima.append(float(largest))
            wrote = sum(int(n) for n in re.findall(r"rank \d+ wrote (\d+) lines", text))
            lines_seen.append(wrote)
            largest = ", ".join(f"{link} {gap}" for link, _, _, _, gap in summaries)
            print(
                f"run {index}/{args.runs}: {time.monotonic() - started:5.1f} s, exit codes "
                f"{codes}, largest gap per link (s): {largest}; "
                f"{wrote} lines written by ranks shown"
                + (f", LOSS: {losses[:3]}" if failed else ""),
                file=sys.stderr,
                flush=True,
            )
    if not maxima:
        print("no pulse summaries found")
        return 1
    print(
        f"{args.runs} runs x 3 hosts x 4 ranks, {args.rate} lines/s per rank, {args.seconds:g} s, "
        f"leader timeout {args.leader_timeout:g} s, pulse every {args.leader_timeout / 4:g} s"
    )
    print(f"pulse gap p50 (median over links): {statistics.median(p50s):.3f} s")
    print(f"pulse gap p99 (largest over links): {max(p99s):.3f} s")
    print(f"pulse gap max (over all links and runs): {max(maxima):.3f} s")
    print(f"false losses: {false_losses}")
    return 0 if false_losses == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
