"""Liveness between the leader and a worker, on a connection of its own.

Each worker opens a second TCP connection to the leader's control port just for pulses. Both
ends send a pulse every interval and read the other end's pulses on a thread that does nothing
else (PulseLoop: one for all of a process's links), in a process of their own
(ringleader.wire.pulse_process). Nothing else
travels on this connection, so a pulse never waits behind megabytes of rank output in a send
buffer, behind the leader printing, or behind JSON work and the GIL: a host is declared lost
only when its pulses really stopped (or its connection closed).

When a silent peer counts as lost is decided by `Silence` (pure, so every case is a unit test
with an injected clock):
- Silence alone is not loss: while the peer's kernel acknowledges our pulses, or the keepalive
  probes our kernel sends when the link is idle (which need no CPU time of ours), the peer host
  is up and only frozen or starved, and it gets FROZEN_FACTOR timeouts before it counts as lost.
  A partitioned or dead host acknowledges nothing and is lost after one timeout.
- An observer that is starved itself must not blame a live peer: the seconds during which its
  own timers fired late (it, or the whole machine, did not get the CPU) do not count towards the
  silence, up to STARVED_PATIENCE_FACTOR times the usual limit.
"""

import contextlib
import heapq
import itertools
import math
import queue
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ringleader.core.frozen import evolve
from ringleader.wire import messages
from ringleader.wire.protocol import Channel, ChannelClosed, ProtocolError

# Sent as it is, and not decoded where it arrives: any frame on a pulse connection is a pulse.
PULSE_FRAME = messages.encode(messages.Pulse())
# A peer whose kernel still acknowledges our pulses is frozen or starved, not gone: it gets
# this many timeouts of silence before it counts as lost.
FROZEN_FACTOR = 3.0
# An observer whose own timers fired late during a silence discounts that time, but waits at
# most this many times its usual limit in all.
STARVED_PATIENCE_FACTOR = 2.0
# The peer's kernel answers while its last ACK is younger than this part of the timeout. Our
# pulses go out every quarter timeout and are acknowledged at once (and when we cannot send
# them, keepalive probes are answered within the keepalive idle time plus a second); after a
# partition the last ACK is at least three quarters of a timeout old once the silence reaches
# the timeout, so a partition is still caught at one timeout.
FRESH_ACK_FRACTION = 0.625
# How long PulseLoop.stop() waits for its thread to close every link.
STOP_SECONDS = 5.0
# Any frame on a pulse connection is a pulse: one longer than this is not.
_PULSE_FRAME_LIMIT = 4096
# The shortest wait between two looks at a silence (a floor, so rounding never spins).
MIN_CHECK_SECONDS = 0.001

# Pulse gaps are counted in buckets this much wider than the one below (a quantile read from
# one is within about 1% of the true value either way), from GAP_FLOOR seconds up.
GAP_BUCKET_RATIO = 1.02
GAP_FLOOR = 1e-4

# Called once, with why the peer is considered gone and the wall-clock time it was last heard.
OnLost = Callable[[str, float], None]


@dataclass(frozen=True)
class Lost:
    reason: str


class Gaps:
    """The gaps between a peer's pulses, in constant memory: a count per log-width bucket
    (GAP_BUCKET_RATIO), so a job of any length and its end-of-job summary cost the same (a
    list of every gap grew 45 MiB an hour at 1,024 hosts, and its summaries outran the pulse
    process's STOP_SECONDS)."""

    def __init__(self) -> None:
        self._buckets: dict[int, int] = {}
        self.count = 0
        self.largest = 0.0

    def add(self, gap: float) -> None:
        bucket = math.floor(math.log(max(gap, GAP_FLOOR) / GAP_FLOOR, GAP_BUCKET_RATIO))
        self._buckets[bucket] = self._buckets.get(bucket, 0) + 1
        self.count += 1
        self.largest = max(self.largest, gap)

    def quantile(self, fraction: float) -> float:
        """The gap `fraction` of all gaps are at most (the middle of its bucket, never more
        than the largest); 0.0 when there is none."""
        rank = max(math.ceil(fraction * self.count), 1)
        seen = 0
        for bucket in sorted(self._buckets):
            seen += self._buckets[bucket]
            if seen >= rank:
                middle: float = GAP_FLOOR * GAP_BUCKET_RATIO ** (bucket + 0.5)
                return min(middle, self.largest)
        return self.largest


@dataclass(frozen=True)
class Silence:
    """What one end knows about its peer's silence and about its own timeliness: a frozen
    value, each change a new one (the pulse loop keeps the latest per link).

    Times are the caller's monotonic seconds. `heard` when a pulse arrives, `woke` whenever one
    of this end's own timers fires (when it was due, when it really ran), `check` to learn
    whether the peer is lost or else how long until it could be.
    """

    timeout: float
    setting: str  # named in the loss message: which setting bounds the wait
    heard_at: float
    late: tuple[tuple[float, float], ...] = ()  # (due, ran) of our timers that ran late
    worst_lateness: float = 0.0

    def heard(self, now: float) -> "Silence":
        # every late run recorded so far ended before the silence that begins now
        return evolve(self, heard_at=now, late=())

    def woke(self, due: float, now: float) -> "Silence":
        """One of our own timers, due at `due`, ran at `now`."""
        if now <= due:
            return self
        worst = max(self.worst_lateness, now - due)
        return evolve(self, late=(*self.late, (due, now)), worst_lateness=worst)

    def starved(self, now: float) -> float:
        """Seconds of the current silence during which this end itself ran late."""
        total, covered_to = 0.0, self.heard_at
        for due, ran in sorted(self.late):
            start, end = max(due, covered_to), min(ran, now)
            if end > start:
                total += end - start
                covered_to = end
        return total

    def check(self, now: float, ack_age: float | None) -> Lost | float:
        """Lost, or the seconds until the silence could make the peer lost.

        `ack_age`: seconds since the peer's kernel last acknowledged anything (None: unknown).
        """
        silent = now - self.heard_at
        starved = self.starved(now)
        fresh_for = FRESH_ACK_FRACTION * self.timeout
        answers = ack_age is not None and ack_age < fresh_for
        limit = self.timeout * (FROZEN_FACTOR if answers else 1.0)
        cap = STARVED_PATIENCE_FACTOR * limit
        if silent - starved >= limit or silent >= cap:
            return Lost(self._reason(silent, starved, answers, capped=silent >= cap))
        wait = min(limit - (silent - starved), cap - silent)
        if answers and ack_age is not None:  # look again when that ACK would be stale
            wait = min(wait, fresh_for - ack_age)
        return max(wait, MIN_CHECK_SECONDS)

    def _reason(self, silent: float, starved: float, answers: bool, capped: bool) -> str:
        if answers:
            text = (
                f"no pulse for {silent:.0f} s; its kernel still answers: frozen or starved "
                f"({FROZEN_FACTOR:g} x {self.setting})"
            )
        elif silent < self.timeout + 0.5:
            text = f"no pulse for {self.timeout:g} s ({self.setting})"
        else:
            text = f"no pulse for {silent:.0f} s ({self.setting})"
        if starved >= 0.5:
            text += f"; this host itself ran late for {starved:.0f} s of it"
            if capped:
                text += f" (waited at most {STARVED_PATIENCE_FACTOR:g} x as long)"
        return text


def close_at_once(channel: Channel) -> None:
    """Close without lingering: SO_LINGER 0 resets the connection and drops whatever the peer
    has not taken (what it took stays readable to it), so nothing waits on a peer that does
    not read (frozen, partitioned). A thread of ours reading the channel sees its end."""
    cut(channel)
    channel.release()


def cut(channel: Channel) -> None:
    """Make the connection reset when it is closed, and wake whoever reads it (it sees the
    connection's end and closes it): the descriptor stays open until then, so its number
    cannot go to a new connection while a selector still watches it."""
    with contextlib.suppress(OSError):  # already closed: nothing to do
        channel.set_option(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        channel.shut_reading()


def bound_sends(channel: Channel, seconds: float) -> None:
    """A send held up by the peer's full receive window fails after `seconds` (SO_SNDTIMEO)
    instead of blocking its thread for as long as the peer does not read."""
    whole = int(seconds)
    value = struct.pack("ll", whole, int((seconds - whole) * 1e6))
    with contextlib.suppress(OSError):
        channel.set_option(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)


class PulseLink:
    """One peer's link in a PulseLoop: its silence, its gaps, whether it is over."""

    def __init__(self, channel: Channel, silence: Silence, on_lost: OnLost) -> None:
        self.channel = channel
        self.silence = silence
        self.on_lost = on_lost
        self.gaps = Gaps()
        # Silences are measured on the monotonic clock (a wall-clock step must not fake or hide
        # one); the wall-clock time is what the verdict compares with other events.
        self.last_heard = time.time()
        self.unsent = b""  # the part of a pulse the peer's full window did not take yet
        self.check_at = 0.0  # when its silence is looked at next (monotonic)
        self.over = False

    def summary(self) -> str:
        """How regularly the peer's pulses arrived: count, p50, p99 and largest gap; and how
        late this end's own timers ran at worst."""
        gaps = self.gaps
        late = f"; own timers late by at most {self.silence.worst_lateness:.3f} s"
        if gaps.count < 2:
            return f"{gaps.count} pulse(s){late}"
        return (
            f"{gaps.count} pulses, gap p50 {gaps.quantile(0.5):.3f} s, "
            f"p99 {gaps.quantile(0.99):.3f} s, max {gaps.largest:.3f} s{late}"
        )


class PulseLoop:
    """Pulse links to any number of peers on one thread: every interval a pulse to each, and
    each peer's pulses read as they come (a selector). Two threads per link cost the leader's
    pulse process 8,193 threads and 208 MiB at 4,096 simulated hosts (bench/control_plane.py).

    Sends never wait: a peer that does not read keeps what its window did not take for the next
    interval. Each link's `on_lost` fires at most once, on this thread; the loop's timers that
    ran late count as this end's own lateness for every link (Silence.woke).
    """

    def __init__(self, interval: float, timeout: float, setting: str) -> None:
        self._interval = interval
        self._timeout = timeout
        self.setting = setting
        self._selector = selectors.DefaultSelector()
        self._links: dict[Channel, PulseLink] = {}
        self._checks: list[tuple[float, int, PulseLink]] = []  # stale ones are skipped
        self._order = itertools.count()
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._wake_in, self._wake_out = socket.socketpair()
        self._wake_in.setblocking(False)
        self._wake_out.setblocking(False)
        self._selector.register(self._wake_in, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._run, name="pulse-loop", daemon=True)
        self._thread.start()

    def watch(self, channel: Channel, on_lost: OnLost) -> PulseLink:
        """Pulse with the peer on `channel` (the loop owns it from now on)."""
        link = PulseLink(channel, Silence(self._timeout, self.setting, time.monotonic()), on_lost)
        # Without this, a pulse process starved of CPU sends nothing for the peer to
        # acknowledge, and its watcher, once it runs again, mistakes a live peer for a
        # partitioned one (seen with busy-polling ranks on 2 cores).
        channel.ask_peer_kernel_when_idle(self._interval)
        self._call(lambda: self._add(link))
        return link

    def end(self, link: PulseLink) -> None:
        """End one link and close its connection without reporting a loss."""
        self._call(lambda: self._drop(link, close=True))

    def settle(self) -> None:
        """Return once the loop's thread has taken every link handed to it so far and read
        every pulse that had arrived on them (waiting at most STOP_SECONDS): their summaries,
        taken next, count them. Without it a summary taken on another thread counted what
        this one happened to have run by then: no pulse at all on most links handed over
        just before the stop, their pulses waiting unread."""
        settled = threading.Event()
        self._call(lambda: self._settle(settled))
        settled.wait(STOP_SECONDS)

    def stop(self) -> None:
        """End every link and close the connections without reporting a loss; returns once
        the loop's thread has ended (waiting at most STOP_SECONDS)."""
        self._stopping.set()
        self._wake()
        if threading.current_thread() is not self._thread:
            self._thread.join(STOP_SECONDS)

    def _call(self, command: Callable[[], None]) -> None:
        self._commands.put(command)
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full: a wake-up is pending already
            self._wake_out.send(b"\0")

    def _run(self) -> None:
        next_pulse = time.monotonic() + self._interval
        try:
            while not self._stopping.is_set():
                due = min(next_pulse, self._next_check())
                ready = self._selector.select(max(due - time.monotonic(), 0.0))
                for key, _ in ready:
                    if key.fileobj is self._wake_in:
                        with contextlib.suppress(OSError):
                            self._wake_in.recv(4096)
                    else:
                        self._readable(key.data)
                while not self._commands.empty():
                    self._commands.get()()
                now = time.monotonic()
                if now >= next_pulse:
                    self._pulse_all(next_pulse, now)
                    next_pulse = now + self._interval
                self._check_due(now)
        finally:
            for link in list(self._links.values()):
                self._drop(link, close=True)
            self._selector.close()
            self._wake_in.close()
            self._wake_out.close()

    def _settle(self, settled: threading.Event) -> None:
        # The commands queued before this one have run: every link handed over is watched.
        for key, _ in self._selector.select(0):
            if key.fileobj is not self._wake_in:
                self._readable(key.data)
        settled.set()

    def _add(self, link: PulseLink) -> None:
        self._links[link.channel] = link
        self._selector.register(link.channel, selectors.EVENT_READ, link)
        self._check_later(link, time.monotonic() + link.silence.timeout)

    def _drop(self, link: PulseLink, close: bool) -> None:
        if link.over:
            return
        link.over = True
        self._links.pop(link.channel, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(link.channel)
        if close:
            with contextlib.suppress(Exception):
                link.channel.close()

    def _lost(self, link: PulseLink, reason: str, at_once: bool = False) -> None:
        """Report the loss once; a peer that went silent gets its connection closed at once
        (it does not read: a graceful close would wait on it)."""
        if link.over:
            return
        self._drop(link, close=not at_once)
        link.on_lost(reason, link.last_heard)
        if at_once:
            close_at_once(link.channel)

    def _readable(self, link: PulseLink) -> None:
        if link.over:
            return
        now = time.monotonic()
        try:
            link.channel.read_available(_PULSE_FRAME_LIMIT)
            pulses = 0
            while link.channel.buffered_frame(_PULSE_FRAME_LIMIT) is not None:
                link.gaps.add(now - link.silence.heard_at)
                link.silence = link.silence.heard(now)
                pulses += 1
        except ProtocolError as error:
            self._lost(link, f"protocol error on the pulse connection: {error}")
            return
        except ChannelClosed as error:
            self._lost(link, f"pulse connection closed ({error})")
            return
        if not pulses:
            return
        link.last_heard = time.time()
        checked = link.silence.check(now, link.channel.last_ack_age())
        self._check_later(link, now + (checked if isinstance(checked, float) else 0.0))

    def _pulse_all(self, due: float, now: float) -> None:
        for link in list(self._links.values()):
            link.silence = link.silence.woke(due, now)
            try:
                if not link.unsent:
                    link.unsent = PULSE_FRAME + b"\n"
                sent = link.channel.send_without_waiting(link.unsent)
                link.unsent = link.unsent[sent:]
            except ChannelClosed as error:
                self._lost(link, f"pulse connection closed ({error})")

    def _check_later(self, link: PulseLink, at: float) -> None:
        link.check_at = at
        heapq.heappush(self._checks, (at, next(self._order), link))

    def _next_check(self) -> float:
        while self._checks and self._stale(*self._checks[0]):
            heapq.heappop(self._checks)
        return self._checks[0][0] if self._checks else float("inf")

    @staticmethod
    def _stale(at: float, _order: int, link: PulseLink) -> bool:
        return link.over or link.check_at != at

    def _check_due(self, now: float) -> None:
        while self._checks and self._checks[0][0] <= now:
            at, order, link = heapq.heappop(self._checks)
            if self._stale(at, order, link):
                continue
            link.silence = link.silence.woke(at, now)
            verdict = link.silence.check(now, link.channel.last_ack_age())
            if isinstance(verdict, Lost):
                self._lost(link, verdict.reason, at_once=True)
            else:
                self._check_later(link, now + verdict)
