"""A worker's two connections to its leader: control (messages, output) and pulse (liveness).

Whatever the leader sends becomes a LeaderMessage event; a closed or silent leader becomes one
LeaderLost event. Sending never raises and never waits: the worker's own messages go out from
a thread of their own, so a send held up behind its ranks' output (a partitioned leader does
not take it) cannot keep the worker from noticing that the leader is lost. A broken link shows
up as LeaderLost.
"""

import contextlib
import queue
import select
import threading
from collections.abc import Sequence

from ringleader.config.timeouts import LEADER_TIMEOUT_KEY
from ringleader.core.health import CheckResult
from ringleader.core.timeline import Mark
from ringleader.wire.control import Liveness, hello_message
from ringleader.wire.events import Event, LeaderLost, LeaderMessage
from ringleader.wire.liveness import close_at_once
from ringleader.wire.messages import Message, UnknownMessage
from ringleader.wire.protocol import Channel, ChannelClosed, ProtocolError
from ringleader.wire.pulse_process import PulseHub


class LeaderLink:
    def __init__(
        self,
        host: str,
        leader: str,
        control: Channel,
        pulse: Channel,
        liveness: Liveness,
        events: "queue.Queue[Event]",
    ) -> None:
        """Start watching the leader on both connections (joined already: wire.control) and
        pulsing to it; `hello` follows, once this host's checks are done."""
        self.channel = control
        self._host = host
        self._events = events
        self._liveness = liveness
        self._lost = threading.Lock()
        self._closed = threading.Event()
        self._reader_done = threading.Event()
        self._outbox: queue.SimpleQueue[Message | None] = queue.SimpleQueue()
        threading.Thread(target=self._send_loop, name="leader-sender", daemon=True).start()
        self._leader = leader
        self._pulse = PulseHub(liveness.interval, liveness.timeout, LEADER_TIMEOUT_KEY)
        self._pulse.watch(leader, pulse, lambda reason, _last_heard: self._pulse_lost(reason))
        threading.Thread(target=self._read, name="leader-reader", daemon=True).start()

    def hello(
        self,
        marks: Sequence[Mark] = (),
        host_key: str | None = None,
        health: Sequence[CheckResult] = (),
        probe_address: str | None = None,
        error: tuple[int, str] | None = None,
    ) -> None:
        """This host's first message: its timeline so far, its sshd's public key, its checks
        before the first attempt, where its peers probe it; or its error (exit code, message),
        after which the leader ends the job and closes the link (`until_closed`). Sent at once,
        before anything else goes out (a broken link shows up as LeaderLost)."""
        message = hello_message(self._host, error, marks, host_key, health, probe_address)
        with contextlib.suppress(ChannelClosed):
            self.channel.send(message)

    def until_closed(self, seconds: float) -> None:
        """Wait, at most `seconds`, for the leader to close the control connection."""
        self._reader_done.wait(seconds)

    def send(self, message: Message) -> None:
        """Queue a message for the leader; it goes out in order, after what was queued before."""
        self._outbox.put(message)

    def close(self) -> str:
        """Close both connections; how regularly the leader's pulses came."""
        self._closed.set()
        self._outbox.put(None)
        summaries = self._pulse.stop()
        if self._lost.locked():
            close_at_once(self.channel)  # the leader does not read: nothing may wait on it
        else:
            self.channel.close()
        self._pulse.reap()
        return summaries.get(self._leader, "no pulse summary")

    def _send_loop(self) -> None:
        while (message := self._outbox.get()) is not None:
            with contextlib.suppress(ChannelClosed):
                self.channel.send(message)

    def _read(self) -> None:
        try:
            while True:
                try:
                    message = self.channel.receive_message(timeout=None)
                except UnknownMessage:
                    continue  # a type this version does not know: nothing to act on
                except ProtocolError as error:
                    self._report_lost(f"protocol error on the control connection: {error}")
                    return
                except ChannelClosed as error:
                    self._report_lost(f"control connection closed ({error})")
                    return
                self._events.put(LeaderMessage(message))
        finally:
            self._reader_done.set()

    def _pulse_lost(self, reason: str) -> None:
        """The pulse link says the leader is gone. What the leader sent before it went (its
        verdict, read by a host that ran again after being frozen) comes first: while the
        control connection has something unread, the reader gets up to one pulse interval to
        turn it into events (it ends at the connection's end)."""
        if self._control_has_unread():
            self._reader_done.wait(self._liveness.interval)
        self._report_lost(reason)

    def _control_has_unread(self) -> bool:
        try:
            readable, _, _ = select.select([self.channel.fileno()], [], [], 0)
        except (OSError, ValueError):
            return False
        return bool(readable)

    def _report_lost(self, reason: str) -> None:
        if not self._closed.is_set() and self._lost.acquire(blocking=False):
            self._events.put(LeaderLost(reason))
