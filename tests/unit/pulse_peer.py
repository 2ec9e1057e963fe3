"""A pulse peer for tests: one link in a PulseLoop of its own, as a worker's end would run."""

from ringleader.wire.liveness import OnLost, PulseLoop
from ringleader.wire.protocol import Channel


class Pulse:
    """Sends pulses to one peer and watches for the peer's; `on_lost` fires at most once."""

    def __init__(
        self, channel: Channel, interval: float, timeout: float, setting: str, on_lost: OnLost
    ) -> None:
        self._loop = PulseLoop(interval, timeout, setting)
        self._link = self._loop.watch(channel, on_lost)

    @property
    def last_heard(self) -> float:
        return self._link.last_heard

    def stop(self) -> None:
        """Stop and close the connection without reporting a loss."""
        self._loop.stop()
