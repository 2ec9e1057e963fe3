"""The probe protocol on an admitted PROBE_LINK connection (ringleader.wire.probe): the prober
sends ROUND_TRIPS ping frames, each answered by a pong, then BULK_FRAMES frames of
BULK_FRAME_BYTES, answered by one "got" after the last, and closes."""

import contextlib
import statistics
import time

from ringleader.wire.protocol import Channel, ChannelClosed, ProtocolError

ROUND_TRIPS = 5
BULK_FRAMES = 4
BULK_FRAME_BYTES = 1 << 20
PROBE_BYTES = BULK_FRAMES * BULK_FRAME_BYTES
ANSWER_TIMEOUT = 30.0  # a probe's far end gives it this long, then closes it
_PING, _PONG, _GOT = b"ping", b"pong", b"got"
_BULK = b"x" * BULK_FRAME_BYTES


def answer_probe(channel: Channel, timeout: float = ANSWER_TIMEOUT) -> None:
    """The far end of one admitted probe: pongs, then "got" after the bulk; closed at the
    prober's end, at a frame that is neither, or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    bulk = 0
    with contextlib.suppress(ChannelClosed, TimeoutError, ProtocolError, OSError):
        while True:
            frame = channel.receive_frame(deadline - time.monotonic(), BULK_FRAME_BYTES)
            if frame == _PING:
                channel.send_frame(_PONG)
            elif len(frame) == BULK_FRAME_BYTES:
                bulk += 1
                if bulk == BULK_FRAMES:
                    channel.send_frame(_GOT)
            else:
                break
    channel.close()


def measure(channel: Channel, seconds: float) -> tuple[float, float]:
    """Probe an admitted link: (the median round trip in seconds, bytes per second of the bulk
    transfer); TimeoutError when the far end did not answer within `seconds`."""
    deadline = time.monotonic() + seconds
    trips = []
    for _ in range(ROUND_TRIPS):
        sent = time.perf_counter()
        channel.send_frame(_PING)
        if channel.receive_frame(deadline - time.monotonic(), 16) != _PONG:
            raise ProtocolError("the far end did not answer a ping with a pong")
        trips.append(time.perf_counter() - sent)
    sent = time.perf_counter()
    for _ in range(BULK_FRAMES):
        channel.send_frame(_BULK)
    if channel.receive_frame(deadline - time.monotonic(), 16) != _GOT:
        raise ProtocolError("the far end did not confirm the bulk transfer")
    return statistics.median(trips), PROBE_BYTES / max(time.perf_counter() - sent, 1e-9)
