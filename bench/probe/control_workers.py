"""Simulated worker hosts for bench/control_plane.py: one process speaks the real control
protocol for many hosts at once, on loopback.

Each simulated host joins as a worker's entry point does (ringleader.supervise.follow): its
control connection, then its pulse connection, each through ringleader's own
connect_to_leader (greeting, join with the job secret's proof, welcome), then its hello
(hello_message). From then on one thread of this process reads every connection (selectors,
frames through ringleader's Channel and messages.decode) and one other sends each host's pulse
frame (liveness.PULSE_FRAME) every interval, starting one interval after that host joined, as
a worker's Pulse does. A host answers the leader's exit with its bye, as a worker does.

Not simulated: a worker's own pulse process (liveness.PulseLoop), its host agent and
ranks. What the leader sees is the same: the same frames at the same rate on the same
connections.

Commands come as JSON lines on stdin, reports go out as JSON lines on stdout:
  {"cmd": "join"}                 every host joins now, all at once (a thread per host)
      -> {"event": "joined", "first_try": t, "last_joined": t, "failed": [host, ...]}
  {"cmd": "silence", "host": h}   h sends no pulse from now on; its connections stay open
      -> {"event": "silenced", "host": h, "last_pulse": t}
  {"cmd": "quit"} or end of input close every connection and exit
and by itself, once every host of this process that is still connected has received its
round-th message of a kind (terminate, exit, ...):
      -> {"event": "got", "kind": k, "round": r, "times": [t, ...]}
Times are time.time() (one clock: every process runs on this machine).

Usage: python bench/probe/control_workers.py --port P --job J --first I --count N
       [--interval S] [--timeout S] [--startup S]   (the job's secret, hex, in RL_BENCH_SECRET)
"""

import argparse
import contextlib
import heapq
import json
import os
import selectors
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from ringleader.wire import messages
from ringleader.wire.control import LeaderAddress, bye_message, connect_to_leader, hello_message
from ringleader.wire.liveness import PULSE_FRAME
from ringleader.wire.messages import CONTROL_LINK, PULSE_LINK, Exit
from ringleader.wire.protocol import Channel, ChannelClosed, ProtocolError

SELECT_SECONDS = 0.5  # how often the reader looks whether it should end


def host_name(index: int) -> str:
    return f"sim-{index:05d}"


@dataclass
class Host:
    name: str
    control: Channel | None = None
    pulse: Channel | None = None
    silent: bool = False
    joined_at: float = 0.0
    join_seconds: list[float] = field(default_factory=lambda: [0.0, 0.0])  # control, pulse
    problem: str = ""  # why it did not join
    last_pulse: float = 0.0
    received: dict[str, int] = field(default_factory=lambda: defaultdict(int))


class Simulator:
    def __init__(
        self, leader: LeaderAddress, names: list[str], interval: float, startup: float
    ) -> None:
        self._leader = leader
        self._startup = startup  # how long a host tries to join (ringleader_startup_timeout)
        self._interval = interval
        self._hosts = {name: Host(name) for name in names}
        self._out_lock = threading.Lock()
        self._lock = threading.Lock()  # the schedule, the hosts' state
        self._wake = threading.Condition(self._lock)
        self._due: list[tuple[float, str]] = []  # (monotonic time of its next pulse, host)
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._connected: set[str] = set()  # hosts whose control connection is open
        # (kind, round) -> receipt time by host
        self._got: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
        self._reported: set[tuple[str, int]] = set()
        threading.Thread(target=self._send_pulses, name="sim-pulses", daemon=True).start()
        threading.Thread(target=self._read, name="sim-reader", daemon=True).start()

    def report(self, **fields: object) -> None:
        with self._out_lock:
            sys.stdout.write(json.dumps(fields) + "\n")
            sys.stdout.flush()

    def join_all(self) -> None:
        first_try = time.time()
        threads = [
            threading.Thread(target=self._join, args=(host,), name="sim-join", daemon=True)
            for host in self._hosts.values()
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        hosts = self._hosts.values()
        self.report(
            event="joined",
            first_try=first_try,
            last_joined=max((host.joined_at for host in hosts), default=first_try),
            slowest_control=max((host.join_seconds[0] for host in hosts), default=0.0),
            slowest_pulse=max((host.join_seconds[1] for host in hosts), default=0.0),
            failed={host.name: host.problem for host in hosts if host.problem},
        )

    def _join(self, host: Host) -> None:
        """Both links, then the hello, as ringleader.supervise.follow does."""
        deadline = time.monotonic() + self._startup
        joined = []
        for link in (CONTROL_LINK, PULSE_LINK):
            started = time.monotonic()
            try:
                link_joined = connect_to_leader(self._leader, host.name, link, deadline, self._stop)
            except Exception as error:  # a refusal (ConfigError): this host did not join
                link_joined, host.problem = None, f"{link}: {error}"
            host.join_seconds[len(joined)] = time.monotonic() - started
            if link_joined is None:
                host.problem = host.problem or f"{link}: not joined within {self._startup:g} s"
                for done in joined:
                    done.channel.close()
                return
            joined.append(link_joined)
        control, pulse = joined[0].channel, joined[1].channel
        try:
            control.send(hello_message(host.name))
        except ChannelClosed as error:
            host.problem = f"hello: {error}"
            control.close()
            pulse.close()
            return
        now = time.monotonic()
        with self._lock:
            host.control, host.pulse = control, pulse
            host.joined_at = host.last_pulse = time.time()  # until its first pulse
            self._connected.add(host.name)
            heapq.heappush(self._due, (now + self._interval, host.name))
            self._wake.notify()
        self._selector.register(control.fileno(), selectors.EVENT_READ, (host, "control"))
        self._selector.register(pulse.fileno(), selectors.EVENT_READ, (host, "pulse"))

    def silence(self, name: str) -> None:
        with self._lock:
            host = self._hosts[name]
            host.silent = True
            last = host.last_pulse
        self.report(event="silenced", host=name, last_pulse=last)

    def _send_pulses(self) -> None:
        """Each host's pulse every interval from its join on, as its own Pulse would."""
        with self._lock:
            while not self._stop.is_set():
                if not self._due:
                    self._wake.wait(SELECT_SECONDS)
                    continue
                due, name = self._due[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                heapq.heapreplace(self._due, (due + self._interval, name))
                host = self._hosts[name]
                if host.silent or host.pulse is None:
                    continue
                try:
                    host.pulse.send_frame(PULSE_FRAME)
                except ChannelClosed:
                    host.pulse = None
                    continue
                host.last_pulse = time.time()

    def _read(self) -> None:
        while not self._stop.is_set():
            if not self._selector.get_map():
                self._stop.wait(SELECT_SECONDS / 10)
                continue
            for key, _ in self._selector.select(SELECT_SECONDS):
                host, link = key.data
                channel = host.control if link == "control" else host.pulse
                if channel is None:
                    continue
                try:
                    frames = self._frames(channel)
                except ChannelClosed:
                    self._closed(host, link, key.fd)
                    continue
                if link == "control":
                    for frame in frames:
                        self._on_control(host, frame)

    @staticmethod
    def _frames(channel: Channel) -> list[bytes]:
        """The frames readable now: one read, then what it completed (Channel keeps the rest)."""
        frames = []
        try:
            frames.append(channel.receive_frame(timeout=1.0))
            while True:
                frames.append(channel.receive_frame(timeout=0.0))
        except TimeoutError:
            pass
        return frames

    def _on_control(self, host: Host, frame: bytes) -> None:
        now = time.time()
        try:
            message = messages.decode(frame)
        except ProtocolError:
            return
        kind = message.kind
        with self._lock:
            round_ = host.received[kind]
            host.received[kind] += 1
            self._got[(kind, round_)][host.name] = now
        if isinstance(message, Exit) and host.control is not None:
            with contextlib.suppress(ChannelClosed):
                host.control.send(bye_message(host.name, ()))
        self._maybe_report(kind, round_)

    def _maybe_report(self, kind: str, round_: int) -> None:
        with self._lock:
            got = self._got[(kind, round_)]
            if (kind, round_) in self._reported or len(got) < len(self._connected):
                return
            if not self._connected <= got.keys():
                return
            self._reported.add((kind, round_))
            times = sorted(got.values())
        self.report(event="got", kind=kind, round=round_, times=times)

    def _closed(self, host: Host, link: str, fd: int) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(fd)
        with self._lock:
            channel = host.control if link == "control" else host.pulse
            if link == "control":
                host.control = None
                self._connected.discard(host.name)
            else:
                host.pulse = None
            pending = [key for key in self._got if key not in self._reported]
        if channel is not None:
            channel.close()
        for kind, round_ in pending:  # every host still connected may have it now
            self._maybe_report(kind, round_)

    def quit(self) -> None:
        self._stop.set()
        with self._lock:
            self._wake.notify()
            channels = [
                channel
                for host in self._hosts.values()
                for channel in (host.control, host.pulse)
                if channel is not None
            ]
        for channel in channels:
            channel.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--first", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--interval", type=float, default=2.5)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--startup", type=float, default=180.0)
    args = parser.parse_args()
    secret_hex = os.environ.get("RL_BENCH_SECRET")
    secret = bytes.fromhex(secret_hex) if secret_hex else None
    leader = LeaderAddress("127.0.0.1", args.port, args.job, args.timeout, secret)
    names = [host_name(index) for index in range(args.first, args.first + args.count)]
    simulator = Simulator(leader, names, args.interval, args.startup)
    for line in sys.stdin:
        command = json.loads(line)
        if command["cmd"] == "join":
            threading.Thread(target=simulator.join_all, name="sim-joins", daemon=True).start()
        elif command["cmd"] == "silence":
            simulator.silence(command["host"])
        elif command["cmd"] == "quit":
            break
    simulator.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
