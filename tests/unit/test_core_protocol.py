"""Framed channel over a real socket pair: one frame per line, its first byte says its kind."""

import socket

import pytest

from ringleader.wire import protocol
from ringleader.wire.frames import control_frame
from ringleader.wire.protocol import (
    OUTPUT_FRAME,
    Channel,
    ChannelClosed,
    ProtocolError,
    decode,
    decode_output,
    is_output,
    output_frame,
)


def send(channel, message):
    """A control frame for any JSON object: what a peer of this or another version may send."""
    channel.send_frame(control_frame(message))


@pytest.fixture
def pair():
    left, right = socket.socketpair()
    a, b = Channel(left), Channel(right)
    yield a, b, left, right
    a.close()
    b.close()


def test_round_trip(pair):
    a, b, _, _ = pair
    send(a, {"type": "hello", "host": "algo-2", "n": [1, 2], "text": "é\nline"})
    send(a, {"type": "bye"})
    assert b.receive(timeout=1.0) == {
        "type": "hello",
        "host": "algo-2",
        "n": [1, 2],
        "text": "é\nline",
    }
    assert b.receive(timeout=1.0) == {"type": "bye"}
    send(b, {"type": "exit", "code": 3})
    assert a.receive(timeout=1.0) == {"type": "exit", "code": 3}


def test_timeout_then_still_usable(pair):
    a, b, _, _ = pair
    with pytest.raises(TimeoutError):
        b.receive(timeout=0.05)
    send(a, {"type": "pulse"})
    assert b.receive(timeout=1.0) == {"type": "pulse"}


def test_partial_message_survives_a_timeout(pair):
    _, b, left, _ = pair
    left.sendall(b'{"type": "rank-')
    with pytest.raises(TimeoutError):
        b.receive(timeout=0.05)
    left.sendall(b'start", "rank": 1}\n{"type": "x"}\n')
    assert b.receive(timeout=1.0) == {"type": "rank-start", "rank": 1}
    assert b.receive(timeout=1.0) == {"type": "x"}


def test_eof_is_channel_closed(pair):
    a, b, _, _ = pair
    send(a, {"type": "last"})
    a.close()
    assert b.receive(timeout=1.0) == {"type": "last"}
    with pytest.raises(ChannelClosed):
        b.receive(timeout=1.0)


def test_receive_on_a_channel_closed_by_another_thread_is_channel_closed(pair):
    # ControlServer.close() closes channels whose _serve threads are between two receive()
    # calls; the next receive() must end that thread with ChannelClosed, not a raw OSError.
    a, _, _, _ = pair
    a.close()
    with pytest.raises(ChannelClosed):
        a.receive(timeout=0.1)


def test_send_on_a_closed_channel_is_channel_closed(pair):
    a, _, _, _ = pair
    a.close()
    with pytest.raises(ChannelClosed):
        send(a, {"type": "pulse"})


def test_send_after_peer_closed_is_channel_closed(pair):
    a, b, _, _ = pair
    b.close()
    with pytest.raises(ChannelClosed):
        for _ in range(100):  # the first sends may still land in the socket buffer
            send(a, {"type": "pulse", "pad": "x" * 1000})


def test_protocol_error_is_a_channel_closed():
    # Code that only cares whether the peer is still usable catches ChannelClosed.
    assert issubclass(ProtocolError, ChannelClosed)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (b"not json\n", "unknown frame kind"),
        (b"[1, 2]\n", "unknown frame kind"),
        (b"\n", "unknown frame kind"),
        (b"{not json\n", "garbled"),
        (b'{"type": "x"\n', "garbled"),
        (b'{"host": "algo-2"}\n', "without a type"),
        (b'{"type": 3}\n', "without a type"),
        (b'{"type": null}\n', "without a type"),
    ],
)
def test_garbled_control_message_is_protocol_error(pair, line, problem):
    _, b, left, _ = pair
    left.sendall(line)
    with pytest.raises(ProtocolError, match=problem):
        b.receive(timeout=1.0)


@pytest.mark.parametrize("frame", [b"Onot json", b"O[1, 2]", b"O", b'O"text"'])
def test_garbled_output_frame_is_protocol_error(frame):
    assert is_output(frame)
    with pytest.raises(ProtocolError, match="garbled"):
        decode_output(frame)


def test_output_frame_round_trip_without_decoding_on_the_way(pair):
    a, b, _, _ = pair
    batch = {"rank": 3, "host": "algo-2", "stream": "stderr", "lines": ["é", "x\ny", ""]}
    frame = output_frame(batch)
    assert frame.startswith(OUTPUT_FRAME)
    assert b"\n" not in frame  # one frame, one line
    a.send_frame(frame)
    send(a, {"type": "bye"})
    received = b.receive_frame(timeout=1.0)
    assert received == frame  # relayed as it came
    assert is_output(received)
    assert decode_output(received) == batch
    assert "type" not in decode_output(received)
    assert b.receive(timeout=1.0) == {"type": "bye"}


def test_an_output_frame_is_not_a_control_message(pair):
    a, b, _, _ = pair
    a.send_frame(output_frame({"rank": 0, "host": "h", "stream": "stdout", "lines": ["x"]}))
    with pytest.raises(ProtocolError, match="unknown frame kind"):
        b.receive(timeout=1.0)


@pytest.mark.parametrize(
    "line",
    [
        b'{"host":"algo-2","type":"rank-start","rank":1}',
        b'{"rank":1,"host":"algo-2","stream":"stdout","lines":["x"],"type":"rank-start"}',
        b'{ "lines": [], "type" : "rank-start"}',
    ],
)
def test_control_message_is_control_whatever_its_key_order(pair, line):
    _, b, left, _ = pair
    assert not is_output(line)
    left.sendall(line + b"\n")
    frame = b.receive_frame(timeout=1.0)
    assert not is_output(frame)
    assert decode(frame)["type"] == "rank-start"


@pytest.mark.parametrize(
    "line",
    [
        b'O{"lines":["x"],"stream":"stdout","host":"algo-2","rank":0}',
        b'O{"type":"rank-start","rank":0,"host":"algo-2","stream":"stdout","lines":["x"]}',
        b'O{"host":"algo-2","rank":0,"lines":["x"],"stream":"stdout"}',
    ],
)
def test_output_frame_is_output_whatever_its_key_order(pair, line):
    _, b, left, _ = pair
    left.sendall(line + b"\n")
    frame = b.receive_frame(timeout=1.0)
    assert is_output(frame)
    batch = decode_output(frame)
    assert (batch["rank"], batch["host"], batch["stream"], batch["lines"]) == (
        0,
        "algo-2",
        "stdout",
        ["x"],
    )


def test_a_frame_longer_than_the_limit_is_protocol_error(pair, monkeypatch):
    monkeypatch.setattr(protocol, "MAX_FRAME_BYTES", 1000)
    _, b, left, _ = pair
    left.sendall(b'{"type": "x", "pad": "' + b"y" * 5000)  # no newline in sight
    with pytest.raises(ProtocolError, match="longer than"):
        b.receive_frame(timeout=1.0)
