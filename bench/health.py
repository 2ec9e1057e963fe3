"""What the health gate costs a job's start: the same job with ringleader_health on (each worker
probes the leader), off, and on with ringleader_health_pairs=all (each worker also probes its
share of the others), on 3 and 16 fake hosts, in rounds whose order turns.

For each host count it prints the medians of: first `docker start` -> the launcher started
(the leader's job.json) for each of the three, the gate's cost (on - off), the pair probes'
(all - on), the longest time a host spent on its own checks (its "health checked" mark after
the last mark before them: its join to the leader, its sshd, or its configuration read), and
the leader's wait for the pair probes ("pair probes asked" -> "all workers up").
The job is bench/probe/probe.py, one rank per host. A difference within the rounds' spread is
noise.

Usage: .venv/bin/python bench/health.py [--hosts 3 16] [--rounds 3] [--image IMAGE]
"""

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from startup import run

from ringleader.core import timeline as phases
from ringleader.core.jobfile import read_job_file

GATE = {"on": {}, "off": {"health": "off"}, "all": {"health_pairs": "all"}}


def longest_check(job_file: Path) -> float | None:
    """The longest a host took from its last mark before the checks to its "health checked"."""
    if not job_file.is_file():
        return None
    marks = read_job_file(job_file).timeline
    by_host: dict[str, dict[str, float]] = {}
    for mark in marks:
        by_host.setdefault(mark.host, {})[mark.phase] = mark.at
    spans = []
    for found in by_host.values():
        checked = found.get(phases.HEALTH_CHECKED)
        before = found.get(phases.CONNECTED) or found.get(phases.SSHD) or found.get(phases.CONFIG)
        if checked is not None and before is not None:
            spans.append(checked - before)
    return max(spans) if spans else None


def pair_probes(job_file: Path) -> float | None:
    """The leader's wait for every worker's pair probes: "pair probes asked" -> "all workers
    up"."""
    if not job_file.is_file():
        return None
    found = {mark.phase: mark.at for mark in read_job_file(job_file).timeline}
    asked, up = found.get(phases.PAIRS_ASKED), found.get(phases.WORKERS_UP)
    return None if asked is None or up is None else up - asked


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[3, 16])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--image")
    args = parser.parse_args()
    rows = []
    for hosts in args.hosts:
        launched: dict[str, list[float]] = {gate: [] for gate in GATE}
        checks: list[float] = []
        pairs: list[float] = []
        for round_number in range(args.rounds):
            turn = round_number % len(GATE)
            order = [*GATE][turn:] + [*GATE][:turn]
            for gate in order:
                with tempfile.TemporaryDirectory() as folder:
                    workdir = Path(folder)
                    measured = run(
                        "ringleader",
                        hosts,
                        False,
                        workdir,
                        per_host=1,
                        image=args.image,
                        settings=GATE[gate],
                    )
                    codes = set(measured.codes)
                    at = measured.phases.get(phases.LAUNCHED)
                    print(f"{hosts} hosts, gate {gate}: launched at {at} s, codes {codes}")
                    if codes != {0} or at is None:
                        print("  the job failed: round left out", file=sys.stderr)
                        continue
                    launched[gate].append(at)
                    found = sorted(workdir.glob("*/algo-1/output/data/job.json"))
                    span = longest_check(found[0]) if found and gate == "on" else None
                    if span is not None:
                        checks.append(span)
                    span = pair_probes(found[0]) if found and gate == "all" else None
                    if span is not None:
                        pairs.append(span)
        rows.append((hosts, launched, checks, pairs))
    print()
    print(
        "| hosts | launched, gate off | gate on | pairs=all | gate's cost | pairs' cost "
        "| a host's checks, longest | pair probes, asked -> all in | rounds |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for hosts, launched, checks, pairs in rows:
        if not all(launched.values()):
            print(f"| {hosts} | - | - | - | - | - | - | - | no complete round |")
            continue
        off, on, all_pairs = (statistics.median(launched[gate]) for gate in ("off", "on", "all"))
        longest = f"{statistics.median(checks) * 1000:.0f} ms" if checks else "-"
        probed = f"{statistics.median(pairs) * 1000:.0f} ms" if pairs else "-"
        rounds = " + ".join(str(len(launched[gate])) for gate in ("off", "on", "all"))
        print(
            f"| {hosts} | {off:.2f} s | {on:.2f} s | {all_pairs:.2f} s | {on - off:+.2f} s "
            f"| {all_pairs - on:+.2f} s | {longest} | {probed} | {rounds} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
