"""Many pulse links on one thread (wire.liveness.PulseLoop), over socket pairs."""

import queue
import socket
import subprocess
import sys
import threading
import time

from ringleader.wire.liveness import PULSE_FRAME, PulseLoop
from ringleader.wire.protocol import Channel

INTERVAL = 0.05
TIMEOUT = 0.5
LINKS = 50


def test_one_thread_pulses_every_link_and_names_only_the_silent_one_lost():
    # Threads by identity: one an earlier test's server left to end on its own may end meanwhile
    threads_before = set(threading.enumerate())
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
        assert len(set(threading.enumerate()) - threads_before) == 2  # the loop and `answer`
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


PULSE_PROCESS = [sys.executable, "-m", "ringleader.wire.pulse_process"]
PULSE_SETTINGS = ["--interval", "0.05", "--timeout", "30", "--setting", "ringleader_leader_timeout"]


def test_a_pulse_process_whose_parent_has_gone_ends_quietly() -> None:
    """A link that closes after the parent stopped reading (its pipe closed: a worker host's
    entry point ended first on a busy machine) is not reported, and no traceback of the pulse
    loop reaches the job's output; the process still ends 0 when its control socket closes."""
    control, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    link, peer = socket.socketpair()
    with child_end:
        child = subprocess.Popen(
            [*PULSE_PROCESS, "--control-fd", str(child_end.fileno()), *PULSE_SETTINGS],
            pass_fds=(child_end.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    assert child.stdout is not None and child.stderr is not None
    with link:
        socket.send_fds(control, [b"watch\talgo-2"], [link.fileno()])
    peer.settimeout(30)
    assert peer.recv(64)  # the pulse loop has the link: its first pulse arrived
    child.stdout.close()  # the parent has gone
    peer.close()  # the link ends after it: the loop's loss has nobody to go to
    control.close()
    errors = child.stderr.read().decode()
    assert child.wait(timeout=30) == 0, errors
    assert "Traceback" not in errors, errors
