"""The control channel between the leader and its workers (TCP, framed messages).

Each worker opens two connections to the leader's control port. The control connection
carries, worker -> leader: hello (sshd is up, or a configuration error), rank-start, output
frames and rank-end relayed from its host agent, sigterm (SIGTERM arrived on that host), bye
(exit code received, with the worker's last timeline marks); leader -> worker: launched,
terminate (stop your ranks, with the grace to give them), exit (the job's exit code and
failure text; reply bye, then exit). The pulse connection carries only pulses, both ways
(ringleader.wire.liveness), served on the leader by one pulse process for all workers.

A connection is believed only when its first message names one of the job's workers and it
comes from that worker's own address; anything else is refused and logged.
"""

import contextlib
import queue
import socket
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from ringleader.core.records import RankRecord
from ringleader.core.timeline import Mark
from ringleader.wire.events import (
    Event,
    RankEnded,
    RanksExited,
    RankStarted,
    SigtermReceived,
    WorkerBye,
    WorkerHello,
    WorkerLost,
)
from ringleader.wire.liveness import PULSE_HELLO
from ringleader.wire.protocol import (
    Channel,
    ChannelClosed,
    Message,
    OutputHandler,
    ProtocolError,
    close_listener,
    decode,
    is_output,
    serve_connections,
)
from ringleader.wire.pulse_process import PulseHub

HELLO_TIMEOUT = 30.0  # a connection that says nothing for this long is dropped
LEADER_TIMEOUT_SETTING = "ringleader_leader_timeout"

# The addresses a host name stands for (resolved when its hello arrives).
AddressesOf = Callable[[str], Collection[str]]
Logger = Callable[[str], None]


@dataclass(frozen=True)
class Liveness:
    """How often pulses go out, and how long a silent peer is given before it is lost."""

    interval: float
    timeout: float


def resolved_addresses(host: str) -> set[str]:
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return set()
    return {str(info[4][0]) for info in infos}


class ControlServer:
    """Runs on the leader: accepts workers, turns what they send into events, broadcasts."""

    def __init__(
        self,
        port: int,
        events: "queue.Queue[Event]",
        liveness: Liveness,
        on_output: OutputHandler,
        workers: Collection[str],
        log: Logger,
        addresses_of: AddressesOf = resolved_addresses,
    ) -> None:
        self._events = events
        self._liveness = liveness
        self._on_output = on_output
        self._workers_allowed = frozenset(workers)
        self._log = log
        self._addresses_of = addresses_of
        self._lock = threading.Lock()
        self._workers: dict[str, Channel] = {}
        self._replaced: set[int] = set()  # id() of control channels a reconnect replaced
        self._pulses = PulseHub(liveness.interval, liveness.timeout, LEADER_TIMEOUT_SETTING)
        self._final: Message | None = None
        self._server = socket.create_server(("", port), backlog=256)
        threading.Thread(
            target=serve_connections, args=(self._server, self._serve), daemon=True
        ).start()

    def broadcast(self, message: Message) -> None:
        with self._lock:
            channels = list(self._workers.values())
        for channel in channels:
            with contextlib.suppress(ChannelClosed):
                channel.send(message)

    def finish(self, exit_code: int, failure: str | None) -> None:
        """Send the job's result to every worker, including ones that connect from now on."""
        message: Message = {"type": "exit", "code": exit_code, "failure": failure}
        with self._lock:
            self._final = message
        self.broadcast(message)

    def close(self) -> None:
        close_listener(self._server)
        with self._lock:
            channels = list(self._workers.values())
        # The workers leave once their channel closes: release them before the pulse process
        # winds down (a busy machine takes a while to run it to its end).
        self._pulses.mute()
        for channel in channels:
            channel.close()
        for host, summary in sorted(self._pulses.stop().items()):
            self._log(f"pulses from {host}: {summary}")

    def _serve(self, channel: Channel) -> None:
        address = channel.peer_address or "?"
        try:
            hello = channel.receive(timeout=HELLO_TIMEOUT)
        except (ChannelClosed, TimeoutError) as error:
            self._log(f"refused a connection from {address}: no hello ({error or 'timeout'})")
            channel.close()
            return
        host, problem = self._identify(hello, address)
        if host is None:
            self._log(f"refused a connection from {address}: {problem}")
            channel.close()
            return
        if hello["type"] == PULSE_HELLO:
            self._watch(host, channel)
        else:
            self._serve_worker(host, hello, channel)

    def _identify(self, hello: Message, address: str) -> tuple[str | None, str]:
        """The worker a hello comes from, or None and why it is refused."""
        kind, host = hello.get("type"), hello.get("host")
        if kind not in ("hello", PULSE_HELLO):
            return None, f"expected a hello, got {str(kind)[:50]!r}"
        if isinstance(host, str) and host in self._workers_allowed:
            known = self._addresses_of(host)
            if address in known:
                return host, ""
            shown = ", ".join(sorted(known)) or "nothing"
            return None, f"it claims to be {host}, but {host} resolves to {shown}"
        if kind == "hello" and isinstance(hello.get("error"), dict):
            # A worker whose own name is misconfigured still reports its error: it is known
            # by its address.
            for worker in sorted(self._workers_allowed):
                if address in self._addresses_of(worker):
                    return worker, ""
        return None, f"{str(host)[:100]!r} is not one of the job's worker hosts"

    def _watch(self, host: str, channel: Channel) -> None:
        def lost(reason: str, last_heard: float) -> None:
            self._events.put(WorkerLost(host, reason, last_heard))

        self._pulses.watch(host, channel, lost)

    def _serve_worker(self, host: str, hello: Message, channel: Channel) -> None:
        with self._lock:
            previous = self._workers.get(host)
            if previous is not None:
                self._replaced.add(id(previous))
            self._workers[host] = channel
            final = self._final
        if previous is not None:
            self._log(f"{host} connected again: its entry point restarted; dropping the old link")
            previous.close()
        error = hello.get("error")
        try:
            if isinstance(error, dict):
                self._events.put(WorkerHello(host, int(error["code"]), str(error["message"])))
            else:
                self._events.put(WorkerHello(host, marks=_marks(hello.get("timeline"))))
            if final is not None:
                channel.send(final)
            while True:
                frame = channel.receive_frame(timeout=None)
                if is_output(frame):
                    self._on_output(frame)
                else:
                    self._dispatch(host, decode(frame))
        except (ProtocolError, KeyError, ValueError, TypeError) as error:
            # A frame that decodes but lacks a field or has one of the wrong type is as
            # garbled as one that does not decode.
            problem = (
                str(error)
                if isinstance(error, ProtocolError)
                else f"malformed message ({type(error).__name__}: {error})"
            )
            self._log(f"protocol error from {host}: {problem}")
            self._events.put(WorkerLost(host, f"protocol error: {problem}", time.time(), True))
        except ChannelClosed as error:
            with self._lock:
                replaced = id(channel) in self._replaced
            reason = (
                "its entry point connected again (restarted) while the job ran"
                if replaced
                else f"control connection closed ({error or type(error).__name__})"
            )
            self._events.put(WorkerLost(host, reason, time.time()))
        finally:
            with self._lock:
                if self._workers.get(host) is channel:
                    del self._workers[host]
            channel.close()

    def _dispatch(self, host: str, message: Message) -> None:
        kind = message["type"]
        if kind == "rank-start":
            self._events.put(RankStarted(int(message["rank"]), self._own(host, message["host"])))
        elif kind == "rank-end":
            record = RankRecord.from_json(message["record"])
            self._own(host, record.host)
            self._events.put(RankEnded(record))
        elif kind == "sigterm":
            self._events.put(SigtermReceived(host))
        elif kind == "ranks-exited":
            self._events.put(RanksExited(host, int(message["code"])))
        elif kind == "bye":
            self._events.put(WorkerBye(host, _marks(message.get("timeline"))))
        else:
            self._log(f"ignored a message of unknown type {kind[:50]!r} from {host}")

    @staticmethod
    def _own(host: str, claimed: object) -> str:
        """A worker speaks only for the ranks of its own host."""
        if claimed != host:
            raise ProtocolError(f"{host} sent a rank event for host {str(claimed)[:100]!r}")
        return host


def connect_to_leader(
    leader: str, port: int, deadline: float, stop: threading.Event
) -> Channel | None:
    """Connect, retrying while the leader's container or server is not up yet.

    Returns None when `deadline` (a time.monotonic() value) passes or `stop` is set. The retry
    delay grows from 50 ms to 1 s: fast when hosts start together, cheap when one is late.
    """
    delay = 0.05
    while not stop.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        try:
            sock = socket.create_connection((leader, port), timeout=min(remaining, 5.0))
        except OSError:
            stop.wait(min(delay, max(deadline - time.monotonic(), 0)))
            delay = min(delay * 2, 1.0)
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return Channel(sock)
    return None


def hello_message(
    host: str, error: tuple[int, str] | None = None, marks: Sequence[Mark] = ()
) -> dict[str, Any]:
    """A worker's first message; `marks`: its timeline so far."""
    message: dict[str, Any] = {"type": "hello", "host": host}
    if marks:
        message["timeline"] = [mark.to_json() for mark in marks]
    if error is not None:
        message["error"] = {"code": error[0], "message": error[1]}
    return message


def bye_message(host: str, marks: Sequence[Mark]) -> dict[str, Any]:
    """A worker's last message: it has the verdict; `marks`: its timeline since the hello."""
    return {"type": "bye", "host": host, "timeline": [mark.to_json() for mark in marks]}


def pulse_hello(host: str) -> dict[str, Any]:
    return {"type": PULSE_HELLO, "host": host}


def _marks(value: Any) -> tuple[Mark, ...]:
    """A hello's timeline; what cannot be read is left out (it is only for the timeline)."""
    marks = []
    for item in value if isinstance(value, list) else ():
        with contextlib.suppress(KeyError, TypeError, ValueError):
            marks.append(Mark.from_json(item))
    return tuple(marks)
