"""Reachability probes for the health gate: a worker reaches the leader (and, with
ringleader_health_pairs=all, its share of the other workers) on the job's network interface,
and measures the link's round trip and a short bulk transfer.

A probe is a connection to the target's control port, admitted like any of the job's links
(greeting, join with the job's proof, welcome: ringleader.wire.control) on the PROBE_LINK, then
ringleader.wire.linkprobe's exchange. The leader answers probes on its control server; a worker
answers its peers' on a ProbeResponder of its own, listening on its address on the job's
interface, from before its hello until it ends.
"""

import contextlib
import socket
import threading
import time
from collections.abc import Collection, Sequence

from ringleader.core.health import FAILED, OK, CheckResult, LinkSpeed
from ringleader.launch.health import TIMEOUT_KEY, Check
from ringleader.wire import auth, messages
from ringleader.wire.control import (
    JOIN_FRAME_BYTES,
    JOIN_TIMEOUT,
    Admission,
    LeaderAddress,
    Logger,
    NoAnswer,
    NotAdmitted,
    NotTheLeader,
    join_with_retries,
    listen_backlog,
    probe_admitted,
    welcome_message,
)
from ringleader.wire.linkprobe import PROBE_BYTES, ROUND_TRIPS, answer_probe, measure
from ringleader.wire.messages import PROBE_LINK, Greeting, Join, Refused
from ringleader.wire.protocol import Channel, ChannelClosed, ProtocolError


def probe_check(
    target: LeaderAddress, source: str, name: str, interface: str, stop: threading.Event
) -> Check:
    """The health check "this host reaches `name` at `target` on `interface`": failed with why
    when no probe got through in the time the checks have, ok with its numbers otherwise."""

    def check(seconds: float) -> CheckResult:
        deadline = time.monotonic() + seconds
        where = f"{target.host}:{target.port} on {interface}"
        try:
            joined = join_with_retries(target, source, PROBE_LINK, deadline, stop)
        except NotAdmitted as error:
            return CheckResult("", FAILED, f"{where} refused this host: {error}")
        except NotTheLeader as error:
            return CheckResult("", FAILED, f"{where} is not this job's: {error}")
        except NoAnswer as error:
            return CheckResult("", FAILED, f"{where} accepted, and never greeted: {error}")
        if joined is None:
            within = f"within {seconds:.1f} s ({TIMEOUT_KEY})"
            return CheckResult("", FAILED, f"cannot connect to {where} {within}")
        try:
            round_trip, bandwidth = measure(joined.channel, deadline - time.monotonic())
        except (ChannelClosed, TimeoutError, ProtocolError) as error:
            problem = f"{where}: the probe broke off ({error or type(error).__name__})"
            return CheckResult("", FAILED, problem)
        finally:
            joined.channel.close()
        link = LinkSpeed(source, name, round_trip, bandwidth)
        detail = (
            f"{target.host} on {interface}: round trip {round_trip * 1000:.2f} ms (median of "
            f"{ROUND_TRIPS}), {bandwidth / 1e6:.0f} MB/s over {PROBE_BYTES >> 20} MiB"
        )
        return CheckResult("", OK, detail, link)

    return check


def peers_to_probe(workers: Sequence[str], host: str) -> list[str]:
    """The workers `host` probes with ringleader_health_pairs=all: every pair of workers once,
    each worker about half of the others (on a circle of the sorted names, the next
    (n - 1) // 2, and with an even count the one opposite when it sorts after `host`)."""
    ring = sorted(workers)
    if host not in ring:
        return []
    count, place = len(ring), ring.index(host)
    peers = [ring[(place + step) % count] for step in range(1, (count - 1) // 2 + 1)]
    if count % 2 == 0 and count > 1:
        opposite = ring[(place + count // 2) % count]
        if opposite > host:
            peers.append(opposite)
    return peers


def run_in_turn(checks: Sequence[tuple[str, Check]], seconds: float) -> tuple[CheckResult, ...]:
    """Each check after the other (so that two bulk transfers never share this host's link),
    together within `seconds`; one that no time is left for failed, named so."""
    deadline = time.monotonic() + seconds
    results = []
    for name, check in checks:
        left = deadline - time.monotonic()
        if left <= 0:
            late = f"not probed: the probes before it took all of {TIMEOUT_KEY} ({seconds:g} s)"
            results.append(CheckResult(name, FAILED, late))
            continue
        found = check(left)
        results.append(CheckResult(name, found.status, found.detail, found.link))
    return tuple(results)


class ProbeResponder:
    """A worker's end of its peers' probes (ringleader_health_pairs=all): listens on `address`
    (its own on the job's interface) and the control port, admits the job's other workers'
    probes as the leader does, and answers them, each in a thread of its own."""

    def __init__(
        self,
        address: str,
        port: int,
        admission: Admission,
        workers: Collection[str],
        log: Logger,
    ) -> None:
        """OSError when it cannot listen there."""
        self._admission = admission
        self._workers = frozenset(workers)
        self._log = log
        # each peer probes it once at a time: more at once are turned away
        self._answering = threading.BoundedSemaphore(max(len(workers), 1))
        self._server = socket.create_server((address, port), backlog=listen_backlog(len(workers)))
        self._closed = threading.Event()
        threading.Thread(target=self._accept, name="probe-responder", daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                connection, _ = self._server.accept()
            except OSError:
                return  # closed
            if not self._answering.acquire(blocking=False):
                connection.close()
                continue
            threading.Thread(
                target=self._serve, args=(connection,), name="probe-answer", daemon=True
            ).start()

    def _serve(self, connection: socket.socket) -> None:
        try:
            self._answer(connection)
        finally:
            self._answering.release()

    def _answer(self, connection: socket.socket) -> None:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        channel = Channel(connection)
        address = channel.peer_address or "?"
        nonce = auth.new_nonce()
        try:
            channel.send(Greeting(self._admission.job, nonce))
            join = messages.decode(channel.receive_frame(JOIN_TIMEOUT, JOIN_FRAME_BYTES))
            problem = self._problem(join, nonce)
            if problem is not None:
                self._log(f"refused a probe from {address}: {problem}")
                channel.send(Refused(problem))
                channel.close()
                return
            assert isinstance(join, Join)
            channel.send(welcome_message(self._admission, join, nonce))
        except (ChannelClosed, TimeoutError, ProtocolError, OSError):
            channel.close()
            return
        answer_probe(channel)

    def _problem(self, join: messages.Message, nonce: str) -> str | None:
        if not isinstance(join, Join):
            return f"expected a join, got {join.kind!r}"
        if join.link != PROBE_LINK:
            return f"a worker answers probes only, not a {join.link[:50]!r} link"
        problem = self._admission.problem(join, nonce)
        if problem is None and probe_admitted(join, self._workers) is None:
            return f"{join.host[:100]!r} is not one of the workers"
        return problem
