"""Liveness between the leader and a worker, on a connection of its own.

Each worker opens a second TCP connection to the leader's control port just for pulses. Both
ends send a pulse every interval from a thread that does nothing else and read the other end's
pulses on another, in a process of their own (ringleader.wire.pulse_process). Nothing else
travels on this connection, so a pulse never waits behind megabytes of rank output in a send
buffer, behind the leader printing, or behind JSON work and the GIL: a host is declared lost
only when its pulses really stopped (or its connection closed).

Silence alone is not loss: while the peer's kernel acknowledges our pulses, or the keepalive
probes our kernel sends when the link is idle (which need no CPU time of ours), the peer host
is up and only starved, and it gets FROZEN_FACTOR timeouts before it counts as lost.
"""

import collections
import contextlib
import statistics
import threading
import time
from collections.abc import Callable

from ringleader.wire import messages
from ringleader.wire.protocol import Channel, ChannelClosed, ProtocolError

# Sent as it is, and not decoded where it arrives: any frame on a pulse connection is a pulse.
PULSE_FRAME = messages.encode(messages.Pulse())
# A peer whose kernel still acknowledges our pulses is starved, not gone: it gets this many
# timeouts of silence before it counts as lost.
FROZEN_FACTOR = 3.0

# Called once, with why the peer is considered gone and the wall-clock time it was last heard.
OnLost = Callable[[str, float], None]


class Pulse:
    """Sends pulses to the peer and watches for the peer's; `on_lost` fires at most once."""

    def __init__(
        self, channel: Channel, interval: float, timeout: float, setting: str, on_lost: OnLost
    ) -> None:
        self._channel = channel
        self._interval = interval
        self._timeout = timeout
        self._setting = setting  # named in the loss message: which setting bounds the wait
        self._on_lost = on_lost
        self._stopped = threading.Event()
        self._reported = threading.Lock()
        # Silences are measured on the monotonic clock (a wall-clock step must not fake or hide
        # one); the wall-clock time is what the verdict compares with other events.
        self.last_heard = time.time()
        self._heard_at = time.monotonic()
        self._gaps: collections.deque[float] = collections.deque(maxlen=100_000)
        # Without this, a pulse process starved of CPU sends nothing for the peer to
        # acknowledge, and its watcher, once it runs again, mistakes a live peer for a
        # partitioned one (seen with busy-polling ranks on 2 cores).
        channel.ask_peer_kernel_when_idle(interval)
        threading.Thread(target=self._send_loop, name="pulse-send", daemon=True).start()
        threading.Thread(target=self._watch_loop, name="pulse-watch", daemon=True).start()

    def stop(self) -> None:
        """Stop both threads and close the connection without reporting a loss."""
        self._stopped.set()
        self._channel.close()

    def gap_summary(self) -> str:
        """How regularly the peer's pulses arrived: count, p50, p99 and largest gap."""
        gaps = sorted(self._gaps)
        if len(gaps) < 2:
            return f"{len(gaps)} pulse(s)"
        cuts = statistics.quantiles(gaps, n=100, method="inclusive")
        return (
            f"{len(gaps)} pulses, gap p50 {cuts[49]:.3f} s, p99 {cuts[98]:.3f} s, "
            f"max {gaps[-1]:.3f} s"
        )

    def _send_loop(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                self._channel.send_frame(PULSE_FRAME)
            except ChannelClosed as error:
                self._lost(f"pulse connection closed ({error})")
                return

    def _watch_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                self._channel.receive_frame(self._timeout)
            except TimeoutError:
                silent = time.monotonic() - self._heard_at
                if silent < FROZEN_FACTOR * self._timeout and self._peer_kernel_answers():
                    continue  # not partitioned: its processes are only starved for CPU
                self._lost(self._silence_reason(silent))
                return
            except ProtocolError as error:
                self._lost(f"protocol error on the pulse connection: {error}")
                return
            except ChannelClosed as error:
                self._lost(f"pulse connection closed ({error})")
                return
            now = time.monotonic()
            self._gaps.append(now - self._heard_at)
            self._heard_at, self.last_heard = now, time.time()

    def _peer_kernel_answers(self) -> bool:
        """The peer's TCP stack acknowledged our pulses within the timeout: the host is up and
        reachable, even if its processes cannot run (a partition or a dead host sends no ACK)."""
        age = self._channel.last_ack_age()
        return age is not None and age < self._timeout

    def _silence_reason(self, silent: float) -> str:
        if silent >= FROZEN_FACTOR * self._timeout:
            return (
                f"no pulse for {silent:.0f} s although its network stack answers "
                f"({FROZEN_FACTOR:g} x {self._setting})"
            )
        return f"no pulse for {self._timeout:g} s ({self._setting})"

    def _lost(self, reason: str) -> None:
        if self._stopped.is_set() or not self._reported.acquire(blocking=False):
            return
        self._on_lost(reason, self.last_heard)
        with contextlib.suppress(Exception):
            self._channel.close()
