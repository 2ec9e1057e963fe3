"""Many pulse links on one thread (wire.liveness.PulseLoop), over socket pairs."""

import queue
import socket
import threading
import time
from collections.abc import Callable

import pytest

from ringleader.wire.liveness import (
    FROZEN_FACTOR,
    PULSE_FRAME,
    SHARED_MACHINE_PATIENCE_FACTOR,
    SHARED_MACHINE_VARIABLE,
    STARVED_PATIENCE_FACTOR,
    Lost,
    PulseLoop,
    Silence,
    parse_cpu_pressure,
    patience_factor,
    saturated,
)
from ringleader.wire.protocol import Channel

INTERVAL = 0.05
TIMEOUT = 0.5
LINKS = 50


def test_one_thread_pulses_every_link_and_names_only_the_silent_one_lost():
    threads_before = threading.active_count()
    loop = PulseLoop(INTERVAL, TIMEOUT, "the_setting")
    lost: queue.Queue = queue.Queue()
    peers = []
    for index in range(LINKS):
        ours, theirs = socket.socketpair()
        loop.watch(Channel(ours), lambda reason, _at, index=index: lost.put((index, reason)))
        peers.append(theirs)
    silent = 7
    stop = threading.Event()

    def answer() -> None:  # every peer but one pulses back, as a worker does
        while not stop.wait(INTERVAL):
            for index, peer in enumerate(peers):
                if index != silent:
                    peer.sendall(PULSE_FRAME + b"\n")

    answering = threading.Thread(target=answer, daemon=True)
    answering.start()
    try:
        assert threading.active_count() == threads_before + 2  # the loop and `answer`
        index, reason = lost.get(timeout=10 * TIMEOUT)
        assert index == silent
        assert "no pulse for" in reason and "the_setting" in reason
        time.sleep(3 * TIMEOUT)  # the test watches for a false loss; no product code waits
        assert lost.empty()
        for index, peer in enumerate(peers):  # each got pulses, whole frames
            if index != silent:
                data = peer.recv(65536)
                assert data.startswith(PULSE_FRAME + b"\n") and data.endswith(b"\n")
    finally:
        stop.set()
        answering.join()
        loop.stop()
        for peer in peers:
            peer.close()


def test_a_peer_that_does_not_read_never_holds_the_loop_up():
    """Its send buffer fills; the pulses to the others still go out on time."""
    loop = PulseLoop(0.001, 60.0, "s")
    full_ours, full_theirs = socket.socketpair()
    full_ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    ours, theirs = socket.socketpair()
    loop.watch(Channel(full_ours), lambda *_: None)
    loop.watch(Channel(ours), lambda *_: None)
    try:
        deadline = time.monotonic() + 10.0
        received = 0
        theirs.settimeout(10.0)
        while received < 200 * (len(PULSE_FRAME) + 1) and time.monotonic() < deadline:
            received += len(theirs.recv(65536))
        assert received >= 200 * (len(PULSE_FRAME) + 1)  # far more than fits the full one
    finally:
        loop.stop()
        for sock in (full_theirs, theirs):
            sock.close()


PSI = """some avg10=93.90 avg60=39.64 avg300=39.80 total=22074620421
full avg10=0.00 avg60=0.00 avg300=0.00 total=0
"""


def test_the_cpu_stall_is_read_from_the_kernels_pressure_file() -> None:
    assert parse_cpu_pressure(PSI) == pytest.approx(22074.620421)
    assert parse_cpu_pressure("") is None
    assert parse_cpu_pressure("full avg10=0.00 total=5\n") is None


def test_a_saturated_stretch_is_one_in_which_a_task_waited_nearly_all_the_time() -> None:
    assert saturated(10.0, 12.0, stalled=1.9)  # 95% of the time some task waited
    assert not saturated(12.0, 14.0, stalled=1.0)  # 50%: busy, not starved
    assert not saturated(14.0, 14.0, stalled=0.0)


def test_fake_hosts_on_one_machine_wait_longer_when_starved() -> None:
    assert patience_factor({}) == STARVED_PATIENCE_FACTOR
    assert patience_factor({SHARED_MACHINE_VARIABLE: "1"}) == SHARED_MACHINE_PATIENCE_FACTOR
    silence = Silence(1.0, "setting", 0.0, patience=SHARED_MACHINE_PATIENCE_FACTOR)
    silence.woke(0.0, 100.0)  # starved the whole time
    limit = FROZEN_FACTOR * 1.0
    assert not isinstance(silence.check(STARVED_PATIENCE_FACTOR * limit + 0.1, 0.0), Lost)
    lost = silence.check(SHARED_MACHINE_PATIENCE_FACTOR * limit, 0.0)
    assert isinstance(lost, Lost)
    assert f"waited at most {SHARED_MACHINE_PATIENCE_FACTOR:g} x" in lost.reason


def test_a_silent_peer_on_a_saturated_machine_is_lost_only_at_the_patience_cap() -> None:
    """While the kernel says the CPUs are saturated, a silent peer whose kernel answers is not
    lost after FROZEN_FACTOR timeouts but at the cap, and the loss says why. The control: the
    same peer without saturation is lost at FROZEN_FACTOR timeouts."""
    interval, timeout = 0.05, 0.3
    started = time.monotonic()

    def loss(cpu_stall: Callable[[], float | None]) -> tuple[str, float]:
        with socket.create_server(("127.0.0.1", 0)) as server:
            ours = socket.create_connection(server.getsockname())
            theirs, _ = server.accept()  # never reads or writes: only its kernel answers
        lost: queue.Queue[str] = queue.Queue()
        began = time.monotonic()
        loop = PulseLoop(interval, timeout, "setting", cpu_stall=cpu_stall)
        try:
            loop.watch(Channel(ours), lambda reason, _heard: lost.put(reason))
            return lost.get(timeout=30), time.monotonic() - began
        finally:
            loop.stop()
            theirs.close()

    reason, waited = loss(lambda: time.monotonic() - started)  # some task waited all the time
    assert waited >= STARVED_PATIENCE_FACTOR * FROZEN_FACTOR * timeout - 0.05, reason
    assert "this host itself ran late" in reason and "waited at most 2 x" in reason, reason
    reason, waited = loss(lambda: 0.0)
    assert waited < STARVED_PATIENCE_FACTOR * FROZEN_FACTOR * timeout, reason
    assert "ran late" not in reason or "waited at most" not in reason, reason
