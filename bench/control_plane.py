"""The leader's control plane against N simulated worker hosts on loopback (no containers).

This process is the leader: ringleader's real ControlServer (one thread reading every
connection: accept, handshake, hellos; a few admission threads; broadcast), its real pulse
process (one child, one thread, for every pulse link), and the real verdict path
(Leader.tell_workers: finish(), then every worker's bye). The workers are simulated by
bench/probe/control_workers.py, --per-process hosts per process, each host joining with
ringleader's own connect_to_leader (both links, the job secret's proofs), saying hello, pulsing
every interval and answering the exit with its bye. The leader process and its pulse child are
measured alone (psutil); the simulators' CPU is shown beside it, as it shares the machine's
cores.

Printed per N (one column each; the median over --trials when more than one):
  hellos accepted   from the first connect until the leader has the last hello it got (a
                    worker joins both links, then says hello), all hosts starting at once
  hosts without     hellos that never came: hosts that gave up (no greeting on any try until
    hello           the startup deadline reads as another process on the port, a
                    configuration error), control links the leader dropped for want of a
                    hello within ringleader_leader_timeout; the rows below are measured with
                    the hosts that did say hello
  turned away       connections the leader closed at once (accept() failed, or no admission
                    thread), each retried by its host after its backoff; past
                    MAX_UNIDENTIFIED waiting to join, the rest wait in the listen queue
  slowest join      the longest connect_to_leader() of any host, per link
  join CPU          leader + pulse process CPU-seconds spent while they joined
  steady CPU        cores used by the leader and by its pulse process over --steady s of
                    pulses at the default interval (after one interval to settle)
  RSS, threads      of each, at the end of that window
  silent noticed    one host stops pulsing, its connections open (its kernel still answers,
                    so it gets FROZEN_FACTOR timeouts): from its last pulse until the leader's
                    WorkerLost. A partitioned host (no ACK) would take one timeout; loopback
                    cannot drop packets without changing the machine's firewall.
  fan-out           broadcast of a terminate (median of --rounds) and the verdict (the exit,
                    sent by finish()): from the call until the last host has it; p50 and max
  all byes          tell_workers(): from finish() until every worker's bye is in
  close             ControlServer.close(): links closed, pulse process ended, its per-host
                    summaries logged (it gets STOP_SECONDS for them)
  false losses      hosts declared lost that were not silenced

RLIMIT_NOFILE is raised to its hard limit (each simulator process holds 2 descriptors per
host, the leader 1 per host, its pulse process 1 per host). A size that cannot be reached
says what limit it hit.

--listen-backlog B is an experiment, not ringleader as it is: the control server listens with
backlog B instead of its own (wire.control.listen_backlog: two per worker, at least 256; the
kernel caps it at net.core.somaxconn).

Usage: .venv/bin/python bench/control_plane.py [--hosts N] [--per-process 512] [--steady 10]
       [--rounds 3] [--trials 1] [--leader-timeout 10] [--startup 180] [--listen-backlog B]
"""

import argparse
import json
import os
import queue
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from ringleader.config.timeouts import Timeouts
from ringleader.core.outcome import Outcome
from ringleader.launch.strategy import LaunchPlan
from ringleader.supervise.common import RunningLauncher
from ringleader.supervise.eventloop import EventQueue, SystemClock
from ringleader.supervise.leader import Leader, LeaderParts
from ringleader.wire.control import MAX_UNIDENTIFIED, Admission, ControlServer, Liveness
from ringleader.wire.events import WorkerHello, WorkerLost
from ringleader.wire.liveness import FROZEN_FACTOR, STARVED_PATIENCE_FACTOR
from ringleader.wire.messages import Terminate
from ringleader.wire.pulse_process import STOP_SECONDS

SIMULATOR = Path(__file__).resolve().parent / "probe" / "control_workers.py"
SIZES = (64, 256, 1024, 4096)
JOB = "bench-control-plane"
SSH_KEY = "ssh-ed25519 " + "A" * 68 + " ringleader-bench"  # as long as a real one
LOOPBACK = frozenset({"127.0.0.1"})
REPLY_SECONDS = 60.0  # a simulator's answer to a command


class Unreachable(Exception):
    """This size cannot be run here: which limit it hits."""


@dataclass
class Result:
    hosts: int
    values: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class Simulators:
    """The simulator processes and their reports."""

    def __init__(self, hosts: int, per_process: int, port: int, secret: bytes, t: Timeouts) -> None:
        env = dict(os.environ, RL_BENCH_SECRET=secret.hex())
        self.procs: list[subprocess.Popen[str]] = []
        self.reports: list[queue.Queue[dict[str, Any]]] = []
        self.owner: dict[str, int] = {}
        for index, first in enumerate(range(0, hosts, per_process)):
            count = min(per_process, hosts - first)
            proc = subprocess.Popen(
                [
                    sys.executable,
                    str(SIMULATOR),
                    *("--port", str(port), "--job", JOB),
                    *("--first", str(first), "--count", str(count)),
                    *("--interval", repr(t.pulse_interval), "--timeout", repr(t.leader_loss)),
                    *("--startup", repr(t.startup)),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            reports: queue.Queue[dict[str, Any]] = queue.Queue()
            threading.Thread(target=_read_reports, args=(proc, reports), daemon=True).start()
            self.procs.append(proc)
            self.reports.append(reports)
            for host in range(first, first + count):
                self.owner[f"sim-{host:05d}"] = index

    def send(self, command: dict[str, Any], only: int | None = None) -> None:
        for index, proc in enumerate(self.procs):
            if only is None or only == index:
                assert proc.stdin is not None
                proc.stdin.write(json.dumps(command) + "\n")
                proc.stdin.flush()

    def expect(self, index: int, event: str, timeout: float = REPLY_SECONDS) -> dict[str, Any]:
        """The next report of `event` from simulator `index` (others of its are dropped)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                report = self.reports[index].get(timeout=max(deadline - time.monotonic(), 0))
            except queue.Empty:
                raise TimeoutError(
                    f"simulator {index}: no {event!r} within {timeout:g} s"
                ) from None
            if report.get("event") == "eof":
                raise RuntimeError(f"simulator {index} ended (exit {self.procs[index].poll()})")
            if report.get("event") == event:
                return report

    def poll(self, index: int, event: str) -> dict[str, Any] | None:
        """A report of `event` from simulator `index` if one is in (others are dropped)."""
        while True:
            try:
                report = self.reports[index].get_nowait()
            except queue.Empty:
                return None
            if report.get("event") == "eof":
                raise RuntimeError(f"simulator {index} ended (exit {self.procs[index].poll()})")
            if report.get("event") == event:
                return report

    def got(self, kind: str, round_: int, timeout: float) -> list[float]:
        """Every host's receipt time of its round-th `kind` message."""
        times: list[float] = []
        for index in range(len(self.procs)):
            deadline = time.monotonic() + timeout
            while True:
                report = self.expect(index, "got", max(deadline - time.monotonic(), 0))
                if report["kind"] == kind and report["round"] == round_:
                    times.extend(report["times"])
                    break
        return sorted(times)

    def cpu(self) -> float:
        return sum(_cpu(psutil.Process(proc.pid)) for proc in self.procs if proc.poll() is None)

    def quit(self) -> None:
        for proc in self.procs:
            if proc.poll() is None and proc.stdin is not None:
                try:
                    proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                    proc.stdin.close()
                except OSError:
                    pass
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _read_reports(proc: "subprocess.Popen[str]", into: "queue.Queue[dict[str, Any]]") -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        into.put(json.loads(line))
    into.put({"event": "eof"})


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def raise_descriptor_limit(hosts: int, per_process: int) -> str:
    """Raise RLIMIT_NOFILE to its hard limit (inherited by the children); Unreachable when
    even that is too few."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    need = max(hosts, 2 * min(per_process, hosts)) + 256
    if hard != resource.RLIM_INFINITY and hard < need:
        raise Unreachable(
            f"RLIMIT_NOFILE hard limit {hard} < {need} descriptors needed by one process "
            f"(leader: 1 per host; a simulator process: 2 per host)"
        )
    return f"RLIMIT_NOFILE {soft} -> {hard}" if soft < hard else f"RLIMIT_NOFILE {hard}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def pulse_child(server_pid: int) -> psutil.Process:
    for child in psutil.Process(server_pid).children():
        if "ringleader.wire.pulse_process" in " ".join(child.cmdline()):
            return child
    raise RuntimeError("no pulse process")


def never_launches(plan: LaunchPlan) -> RunningLauncher:
    raise AssertionError("the bench only tells the workers its verdict")


def force_listen_backlog(backlog: int) -> None:
    """An experiment, not ringleader as it is: every server socket this process creates
    listens with `backlog` (the kernel caps it at net.core.somaxconn)."""
    create_server = socket.create_server

    def with_backlog(address: Any, **options: Any) -> socket.socket:
        return create_server(address, **{**options, "backlog": backlog})

    socket.create_server = with_backlog  # type: ignore[assignment]


def run_size(hosts: int, args: argparse.Namespace) -> Result:
    result = Result(hosts)
    if args.listen_backlog is not None:
        force_listen_backlog(args.listen_backlog)
        somaxconn = Path("/proc/sys/net/core/somaxconn").read_text().strip()
        result.notes.append(
            f"EXPERIMENT: listen backlog forced to {args.listen_backlog} (somaxconn {somaxconn})"
        )
    result.notes.append(raise_descriptor_limit(hosts, args.per_process))
    timeouts = Timeouts(leader_loss=args.leader_timeout, startup=args.startup)
    liveness = Liveness(timeouts.pulse_interval, timeouts.leader_loss)
    names = [f"sim-{index:05d}" for index in range(hosts)]
    events = EventQueue()
    logs: list[str] = []
    me = psutil.Process()
    rss_before = me.memory_info().rss
    port = free_port()
    secret = os.urandom(32)
    server = ControlServer(
        port,
        events,
        liveness,
        lambda _frame: None,
        names,
        logs.append,
        Admission(JOB, secret, SSH_KEY),
        addresses_of=lambda _host: LOOPBACK,
    )
    pulses = pulse_child(me.pid)
    sims = Simulators(hosts, args.per_process, port, secret, timeouts)
    lost: list[WorkerLost] = []
    present: list[str] = []
    values = result.values
    window = threading.Event()  # never set: a measurement window, not a synchronisation

    def leader_cpu() -> float:
        return _cpu(me) + _cpu(pulses)

    try:
        # Every hello accepted.
        cpu0 = leader_cpu()
        sims.send({"cmd": "join"})
        hellos: set[str] = set()
        all_hellos = time.time()
        joined: dict[int, dict[str, Any]] = {}
        deadline = time.monotonic() + args.startup + 30
        while len(hellos) < hosts and time.monotonic() < deadline:
            event = events.next(min(deadline, time.monotonic() + 0.5))
            if isinstance(event, WorkerHello):
                hellos.add(event.host)
                all_hellos = time.time()
            elif isinstance(event, WorkerLost):
                lost.append(event)
            for index in range(len(sims.procs)):
                if index not in joined and (report := sims.poll(index, "joined")) is not None:
                    joined[index] = report
                    if len(joined) == len(sims.procs):  # what is still on its way
                        deadline = min(deadline, time.monotonic() + liveness.timeout + 5)
        for index in range(len(sims.procs)):
            if index not in joined:
                joined[index] = sims.expect(index, "joined", args.startup)
        reports = list(joined.values())
        failed = {host: why for report in reports for host, why in report["failed"].items()}
        values["slowest control join s"] = max(report["slowest_control"] for report in reports)
        values["slowest pulse join s"] = max(report["slowest_pulse"] for report in reports)
        values["turned away"] = float(server._turned_away)  # the bench looks inside
        present = sorted(hellos)
        if not present:
            raise Unreachable(f"no host joined: {next(iter(failed.values()), 'no reason')}")
        values["hosts measured"] = float(len(present))
        values["hosts without hello"] = float(hosts - len(hellos))
        values["  gave up: not the leader"] = float(
            sum("not this job's leader" in why or "never greeted" in why for why in failed.values())
        )
        values["  dropped: no hello in time"] = float(
            sum("no hello within" in event.reason for event in lost)
        )
        for why in dict.fromkeys(failed.values()):
            result.notes.append(f"a host did not join: {why}")
            break
        for event in lost[:1]:
            result.notes.append(f"the leader dropped {event.host} as it joined: {event.reason}")
        lost.clear()  # from now on, every loss but the silenced host's is a false one
        values["hellos accepted s"] = all_hellos - min(report["first_try"] for report in reports)
        values["join CPU s"] = leader_cpu() - cpu0

        # Steady pulses.
        window.wait(liveness.interval)  # every link's first pulses have gone both ways
        wall0, cpu_leader0, cpu_pulse0, cpu_sims0 = (
            time.monotonic(),
            _cpu(me),
            _cpu(pulses),
            sims.cpu(),
        )
        window.wait(args.steady)
        wall = time.monotonic() - wall0
        values["steady CPU leader"] = (_cpu(me) - cpu_leader0) / wall
        values["steady CPU pulse"] = (_cpu(pulses) - cpu_pulse0) / wall
        values["steady CPU total"] = values["steady CPU leader"] + values["steady CPU pulse"]
        values["sim CPU (beside)"] = (sims.cpu() - cpu_sims0) / wall
        values["RSS leader MiB"] = me.memory_info().rss / 2**20
        values["RSS leader KiB/host"] = (me.memory_info().rss - rss_before) / 1024 / len(present)
        values["RSS pulse MiB"] = pulses.memory_info().rss / 2**20
        values["threads leader"] = float(me.num_threads())
        values["threads pulse"] = float(pulses.num_threads())

        # A silent host noticed.
        silent = present[len(present) // 2]
        owner = sims.owner[silent]
        sims.send({"cmd": "silence", "host": silent}, only=owner)
        last_pulse = sims.expect(owner, "silenced")["last_pulse"]
        patience = STARVED_PATIENCE_FACTOR * FROZEN_FACTOR * timeouts.leader_loss + 30
        deadline = time.monotonic() + patience
        while True:
            event = events.next(deadline)
            if event is None:
                result.notes.append(f"{silent} silent, not lost within {patience:g} s")
                break
            if isinstance(event, WorkerLost):
                lost.append(event)
                if event.host == silent:
                    values["silent noticed s"] = time.time() - last_pulse
                    result.notes.append(f"{silent} lost: {event.reason}")
                    break

        # Fan-out of a broadcast, then of the verdict.
        spreads: list[tuple[float, float, float]] = []
        for round_ in range(args.rounds):
            sent = time.time()
            server.broadcast(Terminate(timeouts.sigterm_grace))
            returned = time.time()
            times = sims.got("terminate", round_, REPLY_SECONDS)
            spreads.append((returned - sent, times[len(times) // 2] - sent, times[-1] - sent))
        values["terminate send s"] = statistics.median(spread[0] for spread in spreads)
        values["terminate fan-out p50 s"] = statistics.median(spread[1] for spread in spreads)
        values["terminate fan-out max s"] = statistics.median(spread[2] for spread in spreads)
        parts = LeaderParts(
            events=events,
            clock=SystemClock(),
            start_launcher=never_launches,
            check_ssh=None,
            log=logs.append,
            link=server,
        )
        leader = Leader("leader", present, timeouts, parts)
        sent = time.time()
        leader.tell_workers(Outcome(1, "Rank 7 on host sim-00003 exited with code 1.\n"))
        values["all byes s"] = time.time() - sent
        times = sims.got("exit", 0, REPLY_SECONDS)
        values["verdict fan-out p50 s"] = times[len(times) // 2] - sent
        values["verdict fan-out max s"] = times[-1] - sent
        if "every worker has the exit code" not in logs:
            result.notes.append("not every worker confirmed: " + logs[-1][:200])
        while (event := events.next(time.monotonic())) is not None:
            if isinstance(event, WorkerLost):
                lost.append(event)
        # Only losses until now count: after close() every control connection ends as one.
        values["false losses"] = float(sum(1 for event in lost if event.host != silent))
        for event in [event for event in lost if event.host != silent][:3]:
            result.notes.append(f"false loss: {event.host}: {event.reason}")
    finally:
        closing = time.monotonic()
        server.close()
        values["close s"] = time.monotonic() - closing
        sims.quit()
    summaries = sum(1 for line in logs if line.startswith("pulses from "))
    values["pulse summaries"] = float(summaries)
    if summaries < len(present):
        result.notes.append(
            f"{summaries} pulse summaries logged for {len(present)} hosts: the pulse process "
            f"did not end within STOP_SECONDS ({STOP_SECONDS:g} s) and was killed"
        )
    return result


ROWS: Sequence[tuple[str, str, Callable[[float], str]]] = (
    ("hellos accepted s", "hellos accepted", lambda v: f"{v:.2f} s"),
    ("hosts without hello", "hosts without hello", lambda v: f"{v:.0f}"),
    ("hosts measured", "hosts measured below", lambda v: f"{v:.0f}"),
    ("  gave up: not the leader", "  gave up: no greeting", lambda v: f"{v:.0f}"),
    ("  dropped: no hello in time", "  dropped: no hello (overlaps)", lambda v: f"{v:.0f}"),
    ("turned away", "  turned away", lambda v: f"{v:.0f}"),
    ("slowest control join s", "  slowest control join", lambda v: f"{v:.2f} s"),
    ("slowest pulse join s", "  slowest pulse join", lambda v: f"{v:.2f} s"),
    ("join CPU s", "join CPU (leader+pulse)", lambda v: f"{v:.2f} s"),
    ("steady CPU total", "steady CPU (leader+pulse)", lambda v: f"{v:.3f} cores"),
    ("steady CPU leader", "  leader process", lambda v: f"{v:.3f} cores"),
    ("steady CPU pulse", "  pulse process", lambda v: f"{v:.3f} cores"),
    ("sim CPU (beside)", "  simulators (beside)", lambda v: f"{v:.3f} cores"),
    ("RSS leader MiB", "RSS leader", lambda v: f"{v:.0f} MiB"),
    ("RSS leader KiB/host", "  per host", lambda v: f"{v:.0f} KiB"),
    ("RSS pulse MiB", "RSS pulse process", lambda v: f"{v:.0f} MiB"),
    ("threads leader", "threads leader", lambda v: f"{v:.0f}"),
    ("threads pulse", "threads pulse process", lambda v: f"{v:.0f}"),
    ("silent noticed s", "silent host noticed", lambda v: f"{v:.1f} s"),
    ("terminate send s", "broadcast() returns", lambda v: f"{v * 1000:.0f} ms"),
    ("terminate fan-out p50 s", "terminate fan-out p50", lambda v: f"{v * 1000:.0f} ms"),
    ("terminate fan-out max s", "terminate fan-out max", lambda v: f"{v * 1000:.0f} ms"),
    ("verdict fan-out p50 s", "verdict fan-out p50", lambda v: f"{v * 1000:.0f} ms"),
    ("verdict fan-out max s", "verdict fan-out max", lambda v: f"{v * 1000:.0f} ms"),
    ("all byes s", "verdict -> all byes", lambda v: f"{v * 1000:.0f} ms"),
    ("close s", "close()", lambda v: f"{v:.2f} s"),
    ("pulse summaries", "pulse summaries logged", lambda v: f"{v:.0f}"),
    ("false losses", "false losses", lambda v: f"{v:.0f}"),
)


def print_table(results: dict[int, list[Result]], errors: dict[int, str], trials: int) -> None:
    sizes = sorted(set(results) | set(errors))
    label = 32
    width = 14
    title = "N (hosts)" + (f", median of {trials} trials" if trials > 1 else "")
    print(f"{title:<{label}}" + "".join(f"{size:>{width},}" for size in sizes))
    for key, name, show in ROWS:
        cells = []
        for size in sizes:
            found = [r.values[key] for r in results.get(size, []) if key in r.values]
            cells.append(show(statistics.median(found)) if found else "-")
        print(f"{name:<{label}}" + "".join(f"{cell:>{width}}" for cell in cells))
    for size in sizes:
        for result in results.get(size, []):
            for note in dict.fromkeys(result.notes):
                print(f"N={size}: {note}")
        if size in errors:
            print(f"N={size}: not reached: {errors[size]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, help=f"one size (default: each of {SIZES})")
    parser.add_argument("--per-process", type=int, default=512, help="hosts per simulator")
    parser.add_argument("--steady", type=float, default=10.0, help="seconds of steady pulses")
    parser.add_argument("--rounds", type=int, default=3, help="terminate broadcasts")
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--leader-timeout", type=float, default=Timeouts().leader_loss)
    parser.add_argument("--startup", type=float, default=Timeouts().startup)
    parser.add_argument(
        "--listen-backlog",
        type=int,
        help="an experiment: force the control server's listen backlog (ringleader's: "
        "wire.control.listen_backlog)",
    )
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one trial
    args = parser.parse_args()
    if args.json:  # one size, one trial, in a process of its own: its result as JSON
        try:
            result = run_size(args.hosts, args)
        except Unreachable as error:
            print(json.dumps({"error": str(error)}))
            return 0
        print(json.dumps({"values": result.values, "notes": result.notes}))
        return 0
    sizes = (args.hosts,) if args.hosts else SIZES
    results: dict[int, list[Result]] = {}
    errors: dict[int, str] = {}
    print(
        f"pulse interval {Timeouts(leader_loss=args.leader_timeout).pulse_interval:g} s, "
        f"ringleader_leader_timeout {args.leader_timeout:g} s, {args.per_process} hosts per "
        f"simulator process, MAX_UNIDENTIFIED {MAX_UNIDENTIFIED}, {os.cpu_count()} CPUs",
        flush=True,
    )
    for size in sizes:
        for trial in range(args.trials):
            started = time.monotonic()
            # Each size in a fresh leader process: its memory and threads are its own.
            done = subprocess.run(
                [
                    *(sys.executable, __file__, "--json", "--hosts", str(size)),
                    *("--per-process", str(args.per_process), "--steady", str(args.steady)),
                    *("--rounds", str(args.rounds), "--leader-timeout", str(args.leader_timeout)),
                    *("--startup", str(args.startup)),
                    *(
                        ("--listen-backlog", str(args.listen_backlog))
                        if args.listen_backlog
                        else ()
                    ),
                ],
                capture_output=True,
                text=True,
            )
            lines = done.stdout.strip().splitlines()
            if done.returncode != 0 or not lines:
                errors[size] = f"exit {done.returncode}: {done.stderr.strip()[-2000:]}"
                break
            answer = json.loads(lines[-1])
            if "error" in answer:
                errors[size] = answer["error"]
                break
            results.setdefault(size, []).append(Result(size, answer["values"], answer["notes"]))
            print(f"N={size} trial {trial + 1}: {time.monotonic() - started:.0f} s", flush=True)
    print()
    print_table(results, errors, args.trials)
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
