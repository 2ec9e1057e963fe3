"""A worker's two connections to its leader: control (messages, output) and pulse (liveness).

Whatever the leader sends becomes a LeaderMessage event; a closed or silent leader becomes one
LeaderLost event. Sending never raises: a broken link shows up as LeaderLost.
"""

import contextlib
import queue
import threading
from collections.abc import Sequence

from ringleader.core.timeline import Mark
from ringleader.wire.control import LEADER_TIMEOUT_SETTING, Liveness, hello_message, pulse_hello
from ringleader.wire.events import Event, LeaderLost, LeaderMessage
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
        marks: Sequence[Mark] = (),
    ) -> None:
        """Say hello on both connections and start watching the leader."""
        self.channel = control
        self._events = events
        self._lost = threading.Lock()
        self._closed = threading.Event()
        self.send(hello_message(host, marks=marks))
        with contextlib.suppress(ChannelClosed):
            pulse.send(pulse_hello(host))
        self._leader = leader
        self._pulse = PulseHub(liveness.interval, liveness.timeout, LEADER_TIMEOUT_SETTING)
        self._pulse.watch(leader, pulse, lambda reason, _last_heard: self._report_lost(reason))
        threading.Thread(target=self._read, name="leader-reader", daemon=True).start()

    def send(self, message: Message) -> None:
        with contextlib.suppress(ChannelClosed):
            self.channel.send(message)

    def close(self) -> str:
        """Close both connections; how regularly the leader's pulses came."""
        self._closed.set()
        summaries = self._pulse.stop()
        self.channel.close()
        return summaries.get(self._leader, "no pulse summary")

    def _read(self) -> None:
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

    def _report_lost(self, reason: str) -> None:
        if not self._closed.is_set() and self._lost.acquire(blocking=False):
            self._events.put(LeaderLost(reason))
