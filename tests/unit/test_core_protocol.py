"""Newline-delimited JSON channel over a real socket pair."""

import socket

import pytest

from ringleader.wire.protocol import Channel, ChannelClosed


@pytest.fixture
def pair():
    left, right = socket.socketpair()
    a, b = Channel(left), Channel(right)
    yield a, b, left, right
    a.close()
    b.close()


def test_round_trip(pair):
    a, b, _, _ = pair
    a.send({"type": "hello", "host": "algo-2", "n": [1, 2], "text": "é\nline"})
    a.send({"type": "bye"})
    assert b.receive(timeout=1.0) == {
        "type": "hello",
        "host": "algo-2",
        "n": [1, 2],
        "text": "é\nline",
    }
    assert b.receive(timeout=1.0) == {"type": "bye"}
    b.send({"type": "exit", "code": 3})
    assert a.receive(timeout=1.0) == {"type": "exit", "code": 3}


def test_timeout_then_still_usable(pair):
    a, b, _, _ = pair
    with pytest.raises(TimeoutError):
        b.receive(timeout=0.05)
    a.send({"type": "heartbeat"})
    assert b.receive(timeout=1.0) == {"type": "heartbeat"}


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
    a.send({"type": "last"})
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
        a.send({"type": "heartbeat"})


def test_send_after_peer_closed_is_channel_closed(pair):
    a, b, _, _ = pair
    b.close()
    with pytest.raises(ChannelClosed):
        for _ in range(100):  # the first sends may still land in the socket buffer
            a.send({"type": "heartbeat", "pad": "x" * 1000})


@pytest.mark.parametrize("line", [b"not json\n", b"[1, 2]\n"])
def test_garbled_message_is_channel_closed(pair, line):
    _, b, left, _ = pair
    left.sendall(line)
    with pytest.raises(ChannelClosed, match="garbled"):
        b.receive(timeout=1.0)
