"""The control channel between the leader and its workers (TCP, framed messages).

Each worker opens two connections to the leader's control port. The control connection
carries, worker -> leader: hello (sshd is up, or a configuration error), rank-start, output
frames and rank-end relayed from its host agent, sigterm (SIGTERM arrived on that host), bye
(exit code received, with the worker's last timeline marks); leader -> worker: launched,
terminate (stop your ranks, with the grace to give them), exit (the job's exit code and
failure text; reply bye, then exit). The pulse connection carries only pulses, both ways
(ringleader.wire.liveness), served on the leader by one pulse process for all workers.

The leader greets every connection first with the job's identity (Greeting): a worker that
gets another job's identity, something else, or nothing within ringleader_leader_timeout has not
reached its leader (another process holds the port) and ends with a configuration error naming
the port. A connection is believed only when its first message names one of the job's workers
and it comes from that worker's own address; anything else is refused and logged.
"""

import queue
import socket
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from ringleader.core.errors import ConfigError
from ringleader.core.timeline import Mark
from ringleader.wire import messages
from ringleader.wire.events import (
    Event,
    RankEnded,
    RanksExited,
    RanksProgressed,
    RankStarted,
    SigtermReceived,
    StacksRequested,
    StacksTaken,
    WorkerBye,
    WorkerHello,
    WorkerLost,
)
from ringleader.wire.liveness import bound_sends, close_at_once
from ringleader.wire.messages import (
    Bye,
    ErrorReport,
    Exit,
    Greeting,
    Hello,
    Message,
    Progress,
    PulseHello,
    RankEnd,
    RanksExit,
    RankStart,
    Sigterm,
    Stacks,
    StacksWanted,
    UnknownMessage,
)
from ringleader.wire.ports import listen_problem
from ringleader.wire.protocol import (
    Channel,
    ChannelClosed,
    OutputHandler,
    ProtocolError,
    close_listener,
    is_output,
    serve_connections,
)
from ringleader.wire.pulse_process import PulseHub

HELLO_TIMEOUT = 30.0  # a connection that says nothing for this long is dropped
LEADER_TIMEOUT_SETTING = "ringleader_leader_timeout"
CONTROL_PORT_SETTING = "ringleader_control_port"
_GREETING_CHECK_SECONDS = 0.5  # how often a worker waiting for a greeting looks at its stop

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
        *,
        job: str,
        addresses_of: AddressesOf = resolved_addresses,
    ) -> None:
        """Listen on `port` for the workers of `job` (the identity every connection is greeted
        with); a port that cannot be listened on is a ConfigError naming what holds it."""
        self._job = job
        self._events = events
        self._liveness = liveness
        self._on_output = on_output
        self._workers_allowed = frozenset(workers)
        self._log = log
        self._addresses_of = addresses_of
        self._lock = threading.Lock()
        self._workers: dict[str, Channel] = {}
        self._replaced: set[int] = set()  # id() of control channels a reconnect replaced
        self._final: Exit | None = None
        try:
            self._server = socket.create_server(("", port), backlog=256)
        except OSError as error:
            raise ConfigError(
                CONTROL_PORT_SETTING,
                f"{listen_problem(port, error)}; choose another port or stop that process",
            ) from None
        self._pulses = PulseHub(liveness.interval, liveness.timeout, LEADER_TIMEOUT_SETTING)
        threading.Thread(
            target=serve_connections, args=(self._server, self._serve), daemon=True
        ).start()

    def broadcast(self, message: Message) -> None:
        with self._lock:
            channels = list(self._workers.values())
        for channel in channels:
            try:
                channel.send(message)
            except ChannelClosed:
                # Gone, or not reading for ringleader_leader_timeout (a frozen host whose
                # receive window is full): the next send must not wait on it again.
                close_at_once(channel)

    def finish(self, exit_code: int, failure: str | None) -> None:
        """Send the job's result to every worker, including ones that connect from now on."""
        message = Exit(exit_code, failure)
        with self._lock:
            self._final = message
        self.broadcast(message)

    def close(self) -> None:
        close_listener(self._server)
        with self._lock:
            channels = list(self._workers.values())
        # The workers leave once their channel closes: release them before the pulse process
        # winds down (a busy machine takes a while to run it to its end). By now every worker
        # that could has confirmed the verdict; the others are gone, frozen or cut off, and
        # the leader's end must not wait on them: reset, no lingering.
        self._pulses.mute()
        for channel in channels:
            close_at_once(channel)
        for host, summary in sorted(self._pulses.stop().items()):
            self._log(f"pulses from {host}: {summary}")

    def _serve(self, channel: Channel) -> None:
        address = channel.peer_address or "?"
        try:
            channel.send(Greeting(self._job))
        except ChannelClosed:
            channel.close()
            return
        hello, problem = self._receive_hello(channel)
        host = None
        if hello is not None:
            host, problem = self._identify(hello, address)
        if host is None:
            self._log(f"refused a connection from {address}: {problem}")
            channel.close()
        elif isinstance(hello, PulseHello):
            self._watch(host, channel)
        elif isinstance(hello, Hello):
            self._serve_worker(host, hello, channel)

    @staticmethod
    def _receive_hello(channel: Channel) -> tuple[Hello | PulseHello | None, str]:
        """A connection's first message, or None and why it is not a hello."""
        try:
            message = channel.receive_message(timeout=HELLO_TIMEOUT)
        except UnknownMessage as error:
            return None, f"expected a hello, got {error.kind[:50]!r}"
        except (ChannelClosed, TimeoutError) as error:
            return None, f"no hello ({error or 'timeout'})"
        if isinstance(message, Hello | PulseHello):
            return message, ""
        return None, f"expected a hello, got {message.kind!r}"

    def _identify(self, hello: Hello | PulseHello, address: str) -> tuple[str | None, str]:
        """The worker a hello comes from, or None and why it is refused."""
        host = hello.host
        if host in self._workers_allowed:
            known = self._addresses_of(host)
            if address in known:
                return host, ""
            shown = ", ".join(sorted(known)) or "nothing"
            return None, f"it claims to be {host}, but {host} resolves to {shown}"
        if isinstance(hello, Hello) and hello.error is not None:
            # A worker whose own name is misconfigured still reports its error: it is known
            # by its address.
            for worker in sorted(self._workers_allowed):
                if address in self._addresses_of(worker):
                    return worker, ""
        return None, f"{host[:100]!r} is not one of the job's worker hosts"

    def _watch(self, host: str, channel: Channel) -> None:
        def lost(reason: str, last_heard: float) -> None:
            self._events.put(WorkerLost(host, reason, last_heard))

        self._pulses.watch(host, channel, lost)

    def _serve_worker(self, host: str, hello: Hello, channel: Channel) -> None:
        bound_sends(channel, self._liveness.timeout)  # a worker that stopped reading
        with self._lock:
            previous = self._workers.get(host)
            if previous is not None:
                self._replaced.add(id(previous))
            self._workers[host] = channel
            final = self._final
        if previous is not None:
            self._log(f"{host} connected again: its entry point restarted; dropping the old link")
            previous.close()
        error = hello.error
        try:
            if error is not None:
                self._events.put(WorkerHello(host, error.code, error.message))
            else:
                offset = 0.0 if hello.sent_at is None else time.time() - hello.sent_at
                self._events.put(WorkerHello(host, marks=hello.timeline, clock_offset=offset))
            if final is not None:
                channel.send(final)
            while True:
                self._dispatch(host, channel.receive_frame(timeout=None))
        except ProtocolError as error:
            # A frame with a field missing or of the wrong type is as garbled as one that
            # does not decode.
            self._log(f"protocol error from {host}: {error}")
            self._events.put(WorkerLost(host, f"protocol error: {error}", time.time(), True))
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

    def _dispatch(self, host: str, frame: bytes) -> None:
        if is_output(frame):
            try:
                self._on_output(frame)
            except (KeyError, TypeError, ValueError) as error:  # the batch lacks a field
                raise ProtocolError(
                    f"malformed output frame ({type(error).__name__}: {error})"
                ) from error
            return
        try:
            message = messages.decode(frame)
        except UnknownMessage as unknown:
            self._log(f"ignored a message of unknown type {unknown.kind[:50]!r} from {host}")
            return
        if isinstance(message, RankStart):
            self._events.put(RankStarted(message.rank, self._own(host, message.host)))
        elif isinstance(message, RankEnd):
            self._own(host, message.record.host)
            self._events.put(RankEnded(message.record))
        elif isinstance(message, Sigterm):
            self._events.put(SigtermReceived(host))
        elif isinstance(message, RanksExit):
            self._events.put(RanksExited(host, message.code))
        elif isinstance(message, Bye):
            self._events.put(WorkerBye(host, message.timeline))
        elif isinstance(message, Progress):
            self._events.put(RanksProgressed(self._own(host, message.host), message.ranks))
        elif isinstance(message, Stacks):
            self._own(host, message.stacks.host)
            self._events.put(StacksTaken(message.reason, message.stacks))
        elif isinstance(message, StacksWanted):
            self._events.put(StacksRequested(self._own(host, message.host)))
        else:
            self._log(f"ignored a {message.kind!r} message from {host}: not one a worker sends")

    @staticmethod
    def _own(host: str, claimed: str) -> str:
        """A worker speaks only for the ranks of its own host."""
        if claimed != host:
            raise ProtocolError(f"{host} sent a rank event for host {claimed[:100]!r}")
        return host


@dataclass(frozen=True)
class LeaderAddress:
    """Where a worker finds its leader, and how it knows the leader is its own."""

    host: str
    port: int
    job: str  # the job's identity, which the leader's greeting must carry
    greeting_timeout: float  # how long the leader may take to greet (ringleader_leader_timeout)


def connect_to_leader(
    leader: LeaderAddress, deadline: float, stop: threading.Event
) -> Channel | None:
    """Connect to this job's leader, retrying while its container or server is not up yet.

    Returns None when `deadline` (a time.monotonic() value) passes or `stop` is set. The retry
    delay grows from 50 ms to 1 s: fast when hosts start together, cheap when one is late. A
    connection closed before its greeting is retried like a refused one (a leader going down,
    or not up yet). Raises ConfigError (ringleader_control_port) when what answers is not this
    job's leader: another job's greeting, something else, or nothing within the greeting
    timeout.
    """
    delay = 0.05
    while not stop.is_set() and time.monotonic() < deadline:
        channel = _greeted_connection(leader, deadline, stop)
        if channel is not None:
            return channel
        stop.wait(min(delay, max(deadline - time.monotonic(), 0)))
        delay = min(delay * 2, 1.0)
    return None


def _greeted_connection(
    leader: LeaderAddress, deadline: float, stop: threading.Event
) -> Channel | None:
    """One try: a connection this job's leader greeted, or None (refused, closed before its
    greeting, `stop` set or `deadline` passed); ConfigError when another process answers."""
    try:
        sock = socket.create_connection(
            (leader.host, leader.port), timeout=min(max(deadline - time.monotonic(), 0.01), 5)
        )
    except OSError:
        return None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    channel = Channel(sock)
    try:
        greeting = _receive_greeting(channel, leader.greeting_timeout, deadline, stop)
        if greeting is not None and greeting.job != leader.job:
            raise NotTheLeader(f"the leader of another job, {greeting.job[:100]!r}, answers there")
    except ChannelClosed:
        greeting = None
    except NotTheLeader as error:
        channel.close()
        raise ConfigError(CONTROL_PORT_SETTING, _not_the_leader(leader, str(error))) from None
    if greeting is None:
        channel.close()
        return None
    return channel


class NotTheLeader(Exception):
    """What answered on the control port sent no greeting: why."""


def _receive_greeting(
    channel: Channel, timeout: float, deadline: float, stop: threading.Event
) -> Greeting | None:
    """The leader's greeting; None when `stop` was set or `deadline` (the whole connect's)
    passed first. NotTheLeader when something else or nothing came within `timeout`;
    ChannelClosed when the connection closed first."""
    greeting_deadline = time.monotonic() + timeout
    while not stop.is_set():
        now = time.monotonic()
        if now >= greeting_deadline:
            raise NotTheLeader(f"no greeting within {timeout:g} s ({LEADER_TIMEOUT_SETTING})")
        if now >= deadline:
            return None
        wait = min(greeting_deadline, deadline) - now
        try:
            frame = channel.receive_frame(timeout=min(wait, _GREETING_CHECK_SECONDS))
        except TimeoutError:
            continue
        except ProtocolError as error:  # a line longer than any frame of ours
            raise NotTheLeader(f"it sent something else ({error})") from None
        try:
            message = messages.decode(frame)
        except ProtocolError:
            message = None
        if isinstance(message, Greeting):
            return message
        raise NotTheLeader(f"it sent {frame[:60]!r} instead of a greeting")
    return None


def _not_the_leader(leader: LeaderAddress, problem: str) -> str:
    return (
        f"what answers on {leader.host}:{leader.port} is not this job's leader: {problem}. "
        f"Another process holds the port on {leader.host} (the leader's failure file names "
        "it); choose another port"
    )


def hello_message(
    host: str, error: tuple[int, str] | None = None, marks: Sequence[Mark] = ()
) -> Hello:
    """A worker's first message; `error`: (exit code, message); `marks`: its timeline so far.
    It carries the worker's clock, from which the leader measures the offset to its own."""
    return Hello(host, None if error is None else ErrorReport(*error), tuple(marks), time.time())


def bye_message(host: str, marks: Sequence[Mark]) -> Bye:
    """A worker's last message: it has the verdict; `marks`: its timeline since the hello."""
    return Bye(host, tuple(marks))


def pulse_hello(host: str) -> PulseHello:
    return PulseHello(host)
