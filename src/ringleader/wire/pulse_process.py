"""A pulse link run in a process of its own, so no busy thread of the host's entry point (rank
output relay, printing, JSON) can hold the GIL while a pulse is due or arriving.

The parent hands the connected socket to `python -m ringleader.wire.pulse_process` and reads one
line per event from the child's stdout: `lost<TAB>last_heard<TAB>reason` when the peer is gone,
`summary<TAB>text` at the end. Closing the child's stdin (or the parent dying) ends the child.
"""

import argparse
import contextlib
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence

from ringleader.wire.liveness import OnLost, Pulse
from ringleader.wire.protocol import Channel

STOP_SECONDS = 2.0  # how long the child gets to report its summary and end once asked


class PulseProcess:
    """The same contract as Pulse; the pulses themselves run in a child process."""

    def __init__(
        self, channel: Channel, interval: float, timeout: float, setting: str, on_lost: OnLost
    ) -> None:
        self._on_lost = on_lost
        self._summary = "no pulse summary"
        self._ended = threading.Event()
        fd = channel.fileno()
        self._child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ringleader.wire.pulse_process",
                "--fd",
                str(fd),
                "--interval",
                repr(interval),
                "--timeout",
                repr(timeout),
                "--setting",
                setting,
            ],
            pass_fds=(fd,),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        channel.release()  # the child owns the connection now
        threading.Thread(target=self._read, name="pulse-process", daemon=True).start()

    def request_stop(self) -> None:
        """Ask the child to end (see stop); returns at once."""
        assert self._child.stdin is not None
        with contextlib.suppress(OSError):
            self._child.stdin.close()

    def stop(self) -> None:
        """End the child (it closes the connection) without reporting a loss."""
        self.request_stop()
        try:
            self._child.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.wait()
        self._ended.wait(STOP_SECONDS)

    def gap_summary(self) -> str:
        return self._summary

    def _read(self) -> None:
        assert self._child.stdout is not None
        for raw in self._child.stdout:
            kind, _, rest = raw.decode(errors="replace").rstrip("\n").partition("\t")
            if kind == "lost":
                last_heard, _, reason = rest.partition("\t")
                self._on_lost(reason, float(last_heard))
            elif kind == "summary":
                self._summary = rest
        self._ended.set()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ringleader.wire.pulse_process")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--interval", type=float, required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--setting", required=True)
    args = parser.parse_args(argv)
    done = threading.Event()
    out_lock = threading.Lock()

    def report(line: str) -> None:
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def lost(reason: str, last_heard: float) -> None:
        report(f"lost\t{last_heard!r}\t{reason}")

    channel = Channel(socket.socket(fileno=args.fd))
    pulse = Pulse(channel, args.interval, args.timeout, args.setting, lost)

    def wait_for_parent() -> None:
        sys.stdin.buffer.read()  # EOF: the parent asked us to stop, or died
        done.set()

    threading.Thread(target=wait_for_parent, daemon=True).start()
    done.wait()
    pulse.stop()
    report(f"summary\t{pulse.gap_summary()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
