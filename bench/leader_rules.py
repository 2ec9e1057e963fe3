"""The leader's CPU per event, replaying a whole job through supervise/leader.py with fake
collaborators (no sockets, no containers): N hosts x 8 ranks, every worker's hello, every rank
starting, --progress rounds of progress from every host, every rank ending, the launcher's
exit, then the verdict and every worker's bye.

Two source trees side by side, in alternating rounds (the median of --rounds each): `before`,
a git worktree of --before (made under build/bench-before-REV once), and `after`, this tree.
Each round runs in a fresh Python (python -c ... with that tree's src first on sys.path).

Printed per tree: events stepped, the leader's CPU in all (process time of run() and
tell_workers()), CPU per event in microseconds, the same for tell_workers() alone (the verdict
sent, every worker's bye taken), and the verdict (both must agree), then the ratios after /
before.

Usage: .venv/bin/python bench/leader_rules.py [--hosts 1024] [--ranks-per-host 8]
       [--progress 5] [--rounds 5] [--before 7a477b3]
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Runs in the child: imports ringleader from the tree whose src is first on sys.path.
REPLAY = r"""
import json, sys, time
from ringleader.config.job import Timeouts
from ringleader.core.records import RankRecord
from ringleader.launch.strategy import LaunchPlan
from ringleader.supervise.leader import Leader, LeaderParts
from ringleader.wire.events import (
    LauncherExited, RankEnded, RanksProgressed, RankStarted, WorkerBye, WorkerHello,
)

hosts_n, per_host, rounds = (int(arg) for arg in sys.argv[1:4])
hosts = [f"algo-{n + 1}" for n in range(hosts_n)]
world = hosts_n * per_host


class Clock:
    now = 1000.0
    def monotonic(self): return self.now
    def time(self): return self.now


clock = Clock()
script = [WorkerHello(host) for host in hosts[1:]]
script += [RankStarted(rank, hosts[rank // per_host]) for rank in range(world)]
for _ in range(rounds):
    script += [
        RanksProgressed(host, tuple(range(i * per_host, (i + 1) * per_host)))
        for i, host in enumerate(hosts)
    ]
script += [
    RankEnded(RankRecord(rank, hosts[rank // per_host], 0, None, 1000.0, 1001.0, False, ()))
    for rank in range(world)
]
script += [LauncherExited(0)]
byes = [WorkerBye(host) for host in hosts[1:]]


class Events:
    def __init__(self, items): self.items, self.at = items, 0
    def next(self, deadline):
        if self.at < len(self.items):
            self.at += 1
            clock.now += 0.0001
            return self.items[self.at - 1]
        if deadline is not None:
            clock.now = max(clock.now, deadline)
        return None


class Launcher:
    def kill(self): pass
    def output_tail(self): return ()
    def rank_codes(self): return {}


class Link:
    def broadcast(self, message): pass
    def finish(self, code, failure): events.items.extend(byes)


class Strategy:
    world_size = world
    def prepare(self, attempt=0): return LaunchPlan(("mpirun", "true"), {})


events = Events(script)
parts = LeaderParts(
    events=events, clock=clock, start_launcher=lambda plan: Launcher(), check_ssh=None,
    log=lambda text: None, link=Link(),
)
leader = Leader(hosts[0], hosts[1:], Timeouts(startup=600, hang=3600), parts)
began = time.process_time()
outcome = leader.run(Strategy())
ran, run_events = time.process_time(), events.at
leader.tell_workers(outcome)
told = time.process_time()
print(json.dumps({
    "events": events.at, "cpu": told - began, "exit": outcome.exit_code,
    "byes": events.at - run_events, "byes_cpu": told - ran,
}))
"""


def worktree(rev: str) -> Path:
    path = ROOT / "build" / f"bench-before-{rev}"
    if not path.exists():
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev],
            check=True,
            capture_output=True,
        )
    return path


def replay(tree: Path, hosts: int, per_host: int, progress: int) -> dict[str, float]:
    code = f"import sys; sys.path.insert(0, {str(tree / 'src')!r}); exec({REPLAY!r})"
    done = subprocess.run(
        [sys.executable, "-c", code, str(hosts), str(per_host), str(progress)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1024)
    parser.add_argument("--ranks-per-host", type=int, default=8)
    parser.add_argument("--progress", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", default="7a477b3")
    args = parser.parse_args()
    trees = {"before": worktree(args.before), "after": ROOT}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for round_number in range(args.rounds):
        order = list(trees) if round_number % 2 == 0 else list(reversed(trees))
        for name in order:
            runs[name].append(replay(trees[name], args.hosts, args.ranks_per_host, args.progress))
    print(
        f"{args.hosts} hosts x {args.ranks_per_host} ranks, {args.progress} progress rounds; "
        f"median of {args.rounds} alternating rounds"
    )
    print(f"{'tree':<8} {'events':>8} {'CPU s':>8} {'us/event':>9} {'byes':>6} {'us/bye':>7}  exit")
    per_event, per_bye = {}, {}
    for name, results in runs.items():
        cpu = statistics.median(result["cpu"] for result in results)
        events = results[0]["events"]
        per_event[name] = cpu / events * 1e6
        byes = results[0]["byes"]
        per_bye[name] = statistics.median(result["byes_cpu"] for result in results) / byes * 1e6
        exits = sorted({int(result["exit"]) for result in results})
        print(
            f"{name:<8} {events:>8.0f} {cpu:>8.3f} {per_event[name]:>9.2f} {byes:>6.0f} "
            f"{per_bye[name]:>7.2f}  {exits}"
        )
    print(
        f"after / before: {per_event['after'] / per_event['before']:.2f} per event, "
        f"{per_bye['after'] / per_bye['before']:.2f} per bye"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
