"""Pulse links run in a process of their own, so no busy thread of the host's entry point (rank
output relay, printing, JSON) can hold the GIL while a pulse is due or arriving.

One child process serves every pulse connection of its parent: a worker's one link to its
leader, or all of the leader's links to its workers (one process per worker cost the leader
of a 32-host job 31 Python start-ups and as many resident interpreters), on one thread
(liveness.PulseLoop).

The parent hands each connected socket, named by its peer host, to
`python -m ringleader.wire.pulse_process` over a Unix socket pair (SCM_RIGHTS), and reads one
line per event from the child's stdout: `lost<TAB>host<TAB>last_heard<TAB>reason` when a peer
is gone; at the end `summary<TAB>host<TAB>text` for each peer, then `summarized`, before the
links close. Closing the socket pair (or the parent dying) ends the child.
"""

import argparse
import functools
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence

from ringleader.core.exiting import exit_at_once
from ringleader.wire.liveness import OnLost, PulseLink, PulseLoop
from ringleader.wire.protocol import Channel

STOP_SECONDS = 2.0  # how long a running child gets to report its summaries once asked
# How long a child still starting when asked to stop may take to run: a Python start-up on a
# starved machine takes seconds (seen: a stop right after the start, under the CI's load,
# killed the child before it ran, and the summaries were lost).
START_SECONDS = 30.0
_WATCH = "watch"
_READY = "ready"  # the child's first line: it runs, and reads its control socket
_SUMMARIZED = "summarized"  # the child's line after the last summary
_MESSAGE_BYTES = 4096


class PulseHub:
    """Pulse links to any number of peers (the contract of PulseLoop), in one child."""

    def __init__(self, interval: float, timeout: float, setting: str) -> None:
        self._on_lost: dict[str, OnLost] = {}
        self._summaries: dict[str, str] = {}
        self._lock = threading.Lock()
        self._ready = threading.Event()  # the child runs, or has ended
        self._summarized = threading.Event()  # every summary is in, or the child has ended
        self._control, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with child_end:
            self._child = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "ringleader.wire.pulse_process",
                    "--control-fd",
                    str(child_end.fileno()),
                    "--interval",
                    repr(interval),
                    "--timeout",
                    repr(timeout),
                    "--setting",
                    setting,
                ],
                pass_fds=(child_end.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
            )
        threading.Thread(target=self._read, name="pulse-hub", daemon=True).start()

    def watch(self, host: str, channel: Channel, on_lost: OnLost) -> None:
        """Pulse with `host` over `channel` (the child owns it from now on); a link to the same
        host replaces the previous one, which ends without a loss being reported."""
        with self._lock:
            self._on_lost[host] = on_lost
        try:
            socket.send_fds(self._control, [f"{_WATCH}\t{host}".encode()], [channel.fileno()])
        except OSError:
            on_lost("the pulse process has ended", 0.0)
        finally:
            channel.release()

    def mute(self) -> None:
        """Report no more losses: the peers are about to go, as planned."""
        with self._lock:
            self._on_lost.clear()

    def stop(self) -> dict[str, str]:
        """End every link without reporting a loss; how regularly each peer's pulses came, by
        host. Returns once the child has reported them: it closes the connections and ends
        right after. A child still starting gets START_SECONDS to run first; one that does
        not report within STOP_SECONDS after that is killed."""
        self.mute()
        self._control.close()
        self._ready.wait(START_SECONDS)
        if not self._summarized.wait(STOP_SECONDS):
            self._child.kill()
            self._summarized.wait(STOP_SECONDS)  # the reader sees its end
        with self._lock:
            return dict(self._summaries)

    def reap(self) -> None:
        """Once stopped: wait for the child to be gone (it closes its links and ends), at most
        STOP_SECONDS, then kill it. A host's sweep at the job's end then finds nothing of
        ringleader's own (a cluster host's agent named it a leftover of the job)."""
        try:
            self._child.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.wait()

    def _read(self) -> None:
        assert self._child.stdout is not None
        for raw in self._child.stdout:
            kind, _, rest = raw.decode(errors="replace").rstrip("\n").partition("\t")
            host, _, rest = rest.partition("\t")
            if kind == "lost":
                last_heard, _, reason = rest.partition("\t")
                with self._lock:
                    on_lost = self._on_lost.get(host)
                if on_lost is not None:
                    on_lost(reason, float(last_heard))
            elif kind == "summary":
                with self._lock:
                    self._summaries[host] = rest
            elif kind == _READY:
                self._ready.set()
            elif kind == _SUMMARIZED:
                self._summarized.set()
        self._child.wait()  # its output ended with it: reaped here, nothing waits for it
        self._ready.set()
        self._summarized.set()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ringleader.wire.pulse_process")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--interval", type=float, required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--setting", required=True)
    args = parser.parse_args(argv)
    # Its life is its parent's (the socket pair ends it). A stop signal sent to every process
    # of the job at once (Slurm's scancel and time limit) must not end the pulses before the
    # parent has handled its own: its peers would take this host for lost.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    out_lock = threading.Lock()
    parent_gone = threading.Event()

    def report(line: str) -> None:
        # A parent that has ended (its end of the pipe closed) has nobody left to tell: a link
        # that closes after it (the peers' ends) is not reported, and no traceback reaches the
        # job's output (seen on a worker host under load: BrokenPipeError in the pulse loop).
        with out_lock:
            if parent_gone.is_set():
                return
            try:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            except OSError:
                parent_gone.set()

    def lost(host: str, reason: str, last_heard: float) -> None:
        report(f"lost\t{host}\t{last_heard!r}\t{reason}")

    control = socket.socket(fileno=args.control_fd)
    loop = PulseLoop(args.interval, args.timeout, args.setting)
    links: dict[str, PulseLink] = {}
    report(_READY)
    while True:
        message, fds, _flags, _address = socket.recv_fds(control, _MESSAGE_BYTES, 1)
        if not message:
            break  # the parent asked us to stop, or died
        kind, _, host = message.decode(errors="replace").partition("\t")
        if kind != _WATCH or len(fds) != 1:
            continue
        replaced = links.pop(host, None)
        if replaced is not None:
            loop.end(replaced)
        channel = Channel(socket.socket(fileno=fds[0]))
        links[host] = loop.watch(channel, functools.partial(lost, host))
    # Every summary first, in one write, while the links still run: closing them lets the
    # peers go, and on a crowded machine their ends would otherwise delay the summaries
    # (and so the parent's own end) by up to half a second (32 hosts on 2 cores). They count
    # every pulse that has arrived: the loop has taken every link and read them first.
    loop.settle()
    report("\n".join([*summary_lines(links), _SUMMARIZED]))
    loop.stop()
    return 0


def summary_lines(links: dict[str, PulseLink]) -> list[str]:
    return [f"summary\t{host}\t{link.summary()}" for host, link in sorted(links.items())]


if __name__ == "__main__":
    exit_at_once(main())
