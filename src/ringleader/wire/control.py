"""The control channel between the leader and its workers (TCP, framed messages).

Each worker opens two connections to the leader's control port. The control connection
carries, worker -> leader: hello (sshd is up, or a configuration error), rank-start, output
frames and rank-end relayed from its host agent, sigterm (SIGTERM arrived on that host), bye
(exit code received, with the worker's last timeline marks); leader -> worker: launched,
terminate (stop your ranks, with the grace to give them), exit (the job's exit code and
failure text; reply bye, then exit). The pulse connection carries only pulses, both ways
(ringleader.wire.liveness), served on the leader by one pulse process for all workers.

Every connection starts with a handshake. The leader greets it with the job's identity and a
nonce; a worker that gets another job's identity or something else has not reached its leader
(another process holds the port) and ends with a configuration error naming the port. One that
gets nothing within ringleader_leader_timeout tries again (a leader accepting thousands of hosts
greets late) until the startup deadline, and only then ends with that error.

The worker joins: its name, the job, which of its two connections this is, and, when the job
has a secret, its proof (ringleader.wire.auth); the leader welcomes it with its own proof (and,
on the control connection, the job's ssh key) or refuses it. A join is admitted only for this
job, from one of its workers' own addresses, with the right proof, and only once per worker and
connection: a live link is never replaced. A third, short link is the health gate's
reachability probe (ringleader.wire.probe), admitted the same way before every attempt.

At most MAX_UNIDENTIFIED connections wait to join at
once, each at most JOIN_TIMEOUT seconds and with a first frame of at most JOIN_FRAME_BYTES;
more wait, not greeted yet, in the listen queue (the kernel's: listen_backlog).
"""

import contextlib
import queue
import socket
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from ringleader.config.timeouts import LEADER_TIMEOUT_KEY
from ringleader.core.errors import ConfigError
from ringleader.core.health import CheckResult
from ringleader.core.timeline import Mark
from ringleader.wire import auth, messages
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
    WorkerProbed,
    WorkerReady,
)
from ringleader.wire.linkprobe import answer_probe
from ringleader.wire.liveness import bound_sends, close_at_once, cut
from ringleader.wire.messages import (
    CONTROL_LINK,
    PROBE_LINK,
    PULSE_LINK,
    Bye,
    ErrorReport,
    Exit,
    Greeting,
    Hello,
    Join,
    Message,
    Probed,
    Progress,
    RankEnd,
    RanksExit,
    RankStart,
    Ready,
    Refused,
    Sigterm,
    Stacks,
    StacksWanted,
    UnknownMessage,
    Welcome,
)
from ringleader.wire.ports import listen_problem
from ringleader.wire.protocol import (
    Channel,
    ChannelClosed,
    OutputHandler,
    ProtocolError,
    is_output,
)
from ringleader.wire.pulse_process import PulseHub
from ringleader.wire.server_loop import CallPool, ServerLoop

JOIN_TIMEOUT = 10.0  # a connection that has not joined this long after its greeting is dropped
MAX_UNIDENTIFIED = 64  # connections waiting to join at once; more wait in the listen queue
ADMISSION_THREADS = 8  # joins answered at once (each may wait on a name lookup)
JOIN_FRAME_BYTES = 16 << 10  # a join is a few hundred bytes
STARTUP_TIMEOUT_SETTING = "ringleader_startup_timeout"
CONTROL_PORT_SETTING = "ringleader_control_port"
_GREETING_CHECK_SECONDS = 0.5  # how often a worker waiting for a greeting looks at its stop
_PROBE_SECONDS = 1.0  # asking what holds a taken control port for its greeting

# The addresses a host name stands for (resolved when its join arrives).
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


class ControlPortTaken(ConfigError):
    """The leader cannot listen on its control port; `running_job`: the job whose leader
    holds it (from its greeting), else None."""

    def __init__(self, problem: str, running_job: str | None) -> None:
        if running_job is not None:
            problem += f": the leader of the job {running_job[:100]!r} is running there"
        super().__init__(
            CONTROL_PORT_SETTING, f"{problem}; choose another port or stop that process"
        )
        self.running_job = running_job


@dataclass(frozen=True)
class Admission:
    """Whom a leader admits, what it hands them, and how long their hello may take."""

    job: str  # the identity every connection is greeted with, and every join must name
    secret: bytes | None = None  # every join must prove it knows it (when there is one)
    ssh_key: str | None = None  # the job's public ssh key, for each control connection
    # the leader's addresses on the job's interface, for each control connection (its probes)
    probe_addresses: tuple[str, ...] = ()
    # How long a worker's checks may take between its welcome and its hello, beyond
    # ringleader_leader_timeout (ringleader_health_timeout; its pulses flow meanwhile).
    checks_within: float = 0.0

    def problem(self, join: Join, nonce: str) -> str | None:
        """Why `join` (answering a greeting with `nonce`) is not of this job, or None."""
        if join.job != self.job:
            return f"it joins another job, {join.job[:100]!r}"
        if self.secret is None and join.proof is not None:
            return "it proves a job secret, and this job has none"
        if self.secret is not None:
            expected = auth.join_proof(
                self.secret, self.job, join.host, join.link, nonce, join.nonce
            )
            if not auth.proofs_match(expected, join.proof):
                return f"its proof for {join.host[:100]!r} does not match this job's secret"
        return None


def probe_admitted(join: Join, workers: Collection[str]) -> "_Admitted | None":
    """A reachability probe of one of the job's workers (its proof checked already). Its
    address is not checked: it comes from the worker's address on the job's interface, which
    its name need not resolve to, and a probe carries nothing of the job."""
    return _Admitted(join.host, join.link) if join.host in workers else None


def welcome_message(admission: Admission, join: Join, nonce: str) -> Welcome:
    """The answer to an admitted join: the proof that the job's leader (or, for a probe, the
    job's worker) answers, and on a control connection the job's ssh key and the leader's
    probe addresses."""
    control = join.link == CONTROL_LINK
    ssh_key = admission.ssh_key if control else None
    proof = None
    if admission.secret is not None:
        proof = auth.welcome_proof(
            admission.secret, admission.job, join.host, join.link, join.nonce, nonce, ssh_key or ""
        )
    return Welcome(proof, ssh_key, admission.probe_addresses if control else ())


def listen_backlog(workers: int) -> int:
    """Room for every worker's two connections arriving at once: a full accept queue drops
    joins (seen at 1,024 simulated workers with 256: they got no greeting in time). The kernel
    caps it at net.core.somaxconn (4,096 on the machines measured)."""
    return max(256, 2 * workers + 16)


class ControlServer:
    """Runs on the leader: admits workers, turns what they send into events, broadcasts."""

    def __init__(
        self,
        port: int,
        events: "queue.Queue[Event]",
        liveness: Liveness,
        on_output: OutputHandler,
        workers: Collection[str],
        log: Logger,
        admission: Admission,
        addresses_of: AddressesOf = resolved_addresses,
    ) -> None:
        """Listen on `port` for the workers of the job `admission` names. A port that cannot be
        listened on is a ConfigError naming what holds it."""
        self._admission = admission
        self._events = events
        self._liveness = liveness
        self._on_output = on_output
        self._workers_allowed = frozenset(workers)
        self._log = log
        self._addresses_of = addresses_of
        self._lock = threading.Lock()
        self._workers: dict[str, Channel] = {}
        self._joined: set[tuple[str, str]] = set()  # (host, link): admitted once, never again
        self._final: Exit | None = None
        self._unidentified = 0  # connections between their accept and their join's answer
        self._turned_away = 0
        self._closing = threading.Event()
        try:
            self._server = socket.create_server(("", port), backlog=listen_backlog(len(workers)))
        except OSError as error:
            raise ControlPortTaken(listen_problem(port, error), job_at(port)) from None
        self._probes = threading.BoundedSemaphore(max(len(workers), 1))  # answered at once
        self._pulses = PulseHub(liveness.interval, liveness.timeout, LEADER_TIMEOUT_KEY)
        # Admitting a join may resolve a host name (slow DNS must hold up neither the other
        # joins nor the workers' frames): a few threads of their own, not one per worker.
        self._admitting = CallPool(ADMISSION_THREADS, "control-admit", log)
        self._loop = ServerLoop(self._server, self._greet, self._accept_failed, "control-loop", log)
        self._loop.start()

    def broadcast(self, message: Message) -> None:
        frame = messages.encode(message)  # once, not once per worker
        with self._lock:
            channels = list(self._workers.values())
        for channel in channels:
            try:
                channel.send_frame(frame)
            except ChannelClosed:
                # Gone, or not reading for ringleader_leader_timeout (a frozen host whose
                # receive window is full): the next send must not wait on it again. The loop
                # reading it sees its end and closes it.
                cut(channel)

    def finish(self, exit_code: int, failure: str | None) -> None:
        """Send the job's result to every worker, including ones that connect from now on."""
        message = Exit(exit_code, failure)
        with self._lock:
            self._final = message
        self.broadcast(message)

    def close(self) -> dict[str, str]:
        """Ends every link; how regularly each worker's pulses came (PulseLink.summary)."""
        self._closing.set()
        # The workers leave once their pulse or control connection closes. Nothing of the
        # leader's waits once they go: their ends crowd a machine of fake hosts, where any
        # thread of ours then waits for a CPU (the loop's stop took up to 0.45 s at 32 hosts
        # on 2 cores). So the pulse process reports every link's summary before it closes the
        # links, and the loop's thread is left to close the listener and every worker's
        # connection as it stops (a worker's channel is read by the loop until it ends). By
        # now every worker that could has confirmed the verdict; the others are gone, frozen
        # or cut off, and the leader's end must not wait on them: reset, no lingering.
        summaries = self._pulses.stop()
        self._loop.stop(wait=False)
        self._admitting.close()
        self._pulses.reap()  # after the loop was told to stop: the workers are not held up
        return summaries

    # On the loop's thread: a new connection is greeted, its join read.

    def _accept_failed(self, error: OSError) -> None:
        self._turn_away(f"accept failed ({error.strerror or error})")

    def _greet(self, connection: socket.socket) -> None:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        channel = Channel(connection)
        bound_sends(channel, JOIN_TIMEOUT)  # the greeting and the answer fit in any buffer
        nonce = auth.new_nonce()
        joining = _Joining(self, channel.peer_address or "?", nonce)
        try:
            channel.send(Greeting(self._admission.job, nonce))
        except ChannelClosed:
            channel.close()
            return
        self._unidentified += 1
        # The rest wait in the listen queue until one is done: closing them instead made
        # 4,096 simulated workers reconnect 19,198 times while they joined.
        self._loop.hold_connections(self._unidentified >= MAX_UNIDENTIFIED)
        self._loop.read(channel, joining, JOIN_FRAME_BYTES, JOIN_TIMEOUT)

    def _join_came(self, joining: "_Joining", channel: Channel, frame: bytes) -> None:
        self._loop.pause(channel)
        try:
            self._admitting.submit(lambda: self._admit(joining, channel, frame))
        except RuntimeError as error:  # no thread to be had, or closing: refuse this one
            self._handshake_over()
            channel.close()
            self._turn_away(f"could not serve it ({error})")

    def _no_join(self, joining: "_Joining", channel: Channel, error: Exception) -> None:
        if isinstance(error, TimeoutError):
            problem = f"no join within {JOIN_TIMEOUT:g} s"
        else:
            problem = f"no join ({error or type(error).__name__})"
        self._handshake_over()
        self._refuse(channel, joining.address, problem)

    def _handshake_over(self) -> None:
        self._unidentified -= 1
        self._loop.hold_connections(self._unidentified >= MAX_UNIDENTIFIED)

    def _turn_away(self, why: str) -> None:
        """Log the first connection turned away, then every hundredth."""
        self._turned_away += 1
        if self._turned_away % 100 == 1:
            self._log(f"turned a connection away: {why} ({self._turned_away} so far)")

    # On an admission thread: the join answered.

    def _admit(self, joining: "_Joining", channel: Channel, frame: bytes) -> None:
        try:
            admitted = self._answer(joining, channel, frame)
        finally:
            self._loop.call_soon(self._handshake_over)
        if admitted is None:
            channel.close()
        elif admitted.link == PULSE_LINK:
            self._watch(admitted.host, channel)
        elif admitted.link == PROBE_LINK:
            self._answer_probe(channel)
        else:
            bound_sends(channel, self._liveness.timeout)  # a worker that stopped reading
            worker = _Worker(self, admitted)
            if not self._loop.call_soon(lambda: self._await_hello(worker, channel)):
                close_at_once(channel)  # the server is closing

    def _answer(self, joining: "_Joining", channel: Channel, frame: bytes) -> "_Admitted | None":
        """Answer the join: the join admitted (its host the worker it comes from), or None
        when refused (logged)."""
        try:
            join = messages.decode(frame)
        except UnknownMessage as error:
            problem = f"expected a join, got {error.kind[:50]!r}"
        except ProtocolError as error:
            problem = f"no join ({error or type(error).__name__})"
        else:
            if isinstance(join, Join):
                admitted, problem = self._identify(join, joining.address, joining.nonce)
                if admitted is not None:
                    return self._welcome(channel, join, joining.nonce, admitted)
            else:
                problem = f"expected a join, got {join.kind!r}"
        self._refuse(channel, joining.address, problem)
        return None

    def _refuse(self, channel: Channel, address: str, problem: str) -> None:
        self._log(f"refused a connection from {address}: {problem}")
        with contextlib.suppress(ChannelClosed):
            channel.send(Refused(problem))
        channel.close()

    def _welcome(
        self, channel: Channel, join: Join, nonce: str, admitted: "_Admitted"
    ) -> "_Admitted | None":
        try:
            channel.send(welcome_message(self._admission, join, nonce))
        except ChannelClosed:
            return None
        return admitted

    def _answer_probe(self, channel: Channel) -> None:
        """A worker's reachability probe, answered in a thread of its own (a bulk transfer
        must hold up no join); one per worker at a time, at most."""
        if not self._probes.acquire(blocking=False):
            channel.close()
            return

        def answer() -> None:
            try:
                answer_probe(channel)
            finally:
                self._probes.release()

        threading.Thread(target=answer, name="control-probe", daemon=True).start()

    def _identify(self, join: Join, address: str, nonce: str) -> "tuple[_Admitted | None, str]":
        """The worker a join comes from, or None and why it is refused."""
        if join.link not in (CONTROL_LINK, PULSE_LINK, PROBE_LINK):
            return None, f"unknown link {join.link[:50]!r}"
        problem = self._admission.problem(join, nonce)
        if problem is not None:
            return None, problem
        if join.link == PROBE_LINK:
            admitted = probe_admitted(join, self._workers_allowed)
            return admitted, "" if admitted else f"{join.host[:100]!r} is not one of the workers"
        admitted, problem = self._by_address(join, address)
        if admitted is None:
            return None, problem
        with self._lock:
            if (admitted.host, join.link) in self._joined:
                return None, (
                    f"{admitted.host} joined already: a second {join.link} connection never "
                    "replaces the first (an entry point that restarted is a lost host)"
                )
            self._joined.add((admitted.host, join.link))
        return admitted, ""

    def _by_address(self, join: Join, address: str) -> "tuple[_Admitted | None, str]":
        """The worker whose address the join comes from: the one it names, or, on a control
        connection, the one whose address it is, to report its error only (a worker whose
        own name is wrong)."""
        if join.host in self._workers_allowed:
            known = self._addresses_of(join.host)
            if address in known:
                return _Admitted(join.host, join.link), ""
            shown = ", ".join(sorted(known)) or "nothing"
            return None, f"it claims to be {join.host}, but {join.host} resolves to {shown}"
        if join.link == CONTROL_LINK:
            for worker in sorted(self._workers_allowed):
                if address in self._addresses_of(worker):
                    return _Admitted(worker, join.link, error_only=True), ""
        return None, f"{join.host[:100]!r} is not one of the job's worker hosts"

    def _watch(self, host: str, channel: Channel) -> None:
        def lost(reason: str, last_heard: float) -> None:
            self._events.put(WorkerLost(host, reason, last_heard))

        self._pulses.watch(host, channel, lost)

    # On the loop's thread: a welcomed worker's hello, then everything it sends.

    def _await_hello(self, worker: "_Worker", channel: Channel) -> None:
        if self._closing.is_set():
            close_at_once(channel)
            return
        self._loop.read(channel, worker, None, self._hello_timeout)

    @property
    def _hello_timeout(self) -> float:
        return self._liveness.timeout + self._admission.checks_within

    def _hello(self, worker: "_Worker", channel: Channel, frame: bytes) -> None:
        """A welcomed worker's first message: its hello (ProtocolError when it is not one)."""
        host = worker.admitted.host
        hello = messages.decode(frame)
        if not isinstance(hello, Hello):
            raise ProtocolError(f"expected a hello from {host}, got {hello.kind!r}")
        if worker.admitted.error_only and hello.error is None:
            self._log(
                f"refused {hello.host[:100]!r} from {host}'s address: a host not in the "
                "job may report only its error"
            )
            self._loop.pause(channel)
            channel.close()
            return
        worker.greeted = True
        self._loop.read(channel, worker, None, None)  # no deadline from now on
        with self._lock:
            self._workers[host] = channel
            final = self._final
        if hello.error is not None:
            self._events.put(WorkerHello(host, hello.error.code, hello.error.message))
        else:
            offset = 0.0 if hello.sent_at is None else time.time() - hello.sent_at
            self._events.put(
                WorkerHello(
                    host,
                    marks=hello.timeline,
                    clock_offset=offset,
                    host_key=hello.host_key,
                    health=hello.health,
                    probe_address=hello.probe_address,
                )
            )
        if final is not None:
            channel.send(final)

    def _worker_ended(
        self, worker: "_Worker", channel: Channel, error: ChannelClosed | TimeoutError
    ) -> None:
        host = worker.admitted.host
        if isinstance(error, TimeoutError):  # only the hello has a deadline
            setting = LEADER_TIMEOUT_KEY
            if self._admission.checks_within:
                setting += " and ringleader_health_timeout"
            error = ChannelClosed(f"no hello within {self._hello_timeout:g} s ({setting})")
        if isinstance(error, ProtocolError):
            # A frame with a field missing or of the wrong type is as garbled as one that
            # does not decode.
            self._log(f"protocol error from {host}: {error}")
            self._events.put(WorkerLost(host, f"protocol error: {error}", time.time(), True))
        else:
            reason = f"control connection closed ({error or type(error).__name__})"
            self._events.put(WorkerLost(host, reason, time.time()))
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
            own = self._own(host, message.host)
            self._events.put(RankStarted(message.rank, own, message.attempt))
        elif isinstance(message, RankEnd):
            self._own(host, message.record.host)
            self._events.put(RankEnded(message.record))
        elif isinstance(message, Sigterm):
            self._events.put(SigtermReceived(host))
        elif isinstance(message, RanksExit):
            self._events.put(RanksExited(host, message.code))
        elif isinstance(message, Bye):
            self._events.put(WorkerBye(host, message.timeline))
        elif isinstance(message, Ready):
            self._events.put(WorkerReady(host, message.attempt, message.health))
        elif isinstance(message, Probed):
            self._events.put(WorkerProbed(self._own(host, message.host), message.health))
        elif isinstance(message, Progress):
            own = self._own(host, message.host)
            self._events.put(RanksProgressed(own, message.ranks, message.steps, message.waits))
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
class _Admitted:
    host: str  # the worker it is
    link: str  # which of its connections
    error_only: bool = False  # named itself wrongly: known by its address, for its error


class _Joining:
    """A connection greeted and not yet joined: its join goes to the server's admission."""

    def __init__(self, server: ControlServer, address: str, nonce: str) -> None:
        self._server = server
        self.address = address
        self.nonce = nonce

    def frame(self, channel: Channel, frame: bytes) -> None:
        self._server._join_came(self, channel, frame)

    def ended(self, channel: Channel, error: ChannelClosed | TimeoutError) -> None:
        self._server._no_join(self, channel, error)


class _Worker:
    """A welcomed worker's control connection: its hello, then its messages."""

    def __init__(self, server: ControlServer, admitted: _Admitted) -> None:
        self._server = server
        self.admitted = admitted
        self.greeted = False

    def frame(self, channel: Channel, frame: bytes) -> None:
        if self.greeted:
            self._server._dispatch(self.admitted.host, frame)
        else:
            self._server._hello(self, channel, frame)

    def ended(self, channel: Channel, error: ChannelClosed | TimeoutError) -> None:
        self._server._worker_ended(self, channel, error)


def job_at(port: int) -> str | None:
    """The job whose leader holds `port` on this host, from its greeting; None when what
    holds it does not greet like one (within _PROBE_SECONDS)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=_PROBE_SECONDS) as sock:
            message = Channel(sock).receive_message(timeout=_PROBE_SECONDS, limit=4096)
    except (OSError, ProtocolError, ChannelClosed):
        return None
    return message.job if isinstance(message, Greeting) else None


@dataclass(frozen=True)
class LeaderAddress:
    """Where a worker finds its leader, and how it knows the leader is its own."""

    host: str
    port: int
    job: str  # the job's identity, which the leader's greeting must carry
    greeting_timeout: float  # how long the leader may take to answer (ringleader_leader_timeout)
    secret: bytes | None = None  # the job's, when its launcher handed one out


@dataclass(frozen=True)
class Joined:
    """A connection the leader admitted, and what it handed over."""

    channel: Channel
    ssh_key: str | None  # the job's public ssh key (control connection of an mpi job)
    probe_addresses: tuple[str, ...] = ()  # the leader's, on the job's interface


def connect_to_leader(
    leader: LeaderAddress, host: str, link: str, deadline: float, stop: threading.Event
) -> Joined | None:
    """Connect to this job's leader as `host`'s `link` connection, retrying while its
    container or server is not up yet (join_with_retries).

    Returns None when `deadline` (a time.monotonic() value) passes or `stop` is set. Raises
    ConfigError (ringleader_control_port) when what answers is not this job's leader (another
    job's greeting, something else, a proof that does not match the job's secret), when the
    leader refuses this host, or when a try got no greeting and none greeted by `deadline`.
    """
    try:
        return join_with_retries(leader, host, link, deadline, stop)
    except (NotTheLeader, NotAdmitted, NoAnswer) as error:
        raise ConfigError(CONTROL_PORT_SETTING, join_problem(leader, error)) from None


def join_with_retries(
    leader: LeaderAddress, host: str, link: str, deadline: float, stop: threading.Event
) -> Joined | None:
    """`host`'s `link` connection to what `leader` names, tried again while it is refused or
    closed before its greeting (a leader going down, or not up yet), or not greeted within the
    greeting timeout (a leader busy with thousands of hosts), until `deadline`; None then, or
    when `stop` is set. The retry delay grows from 50 ms to 1 s: fast when hosts start
    together, cheap when one is late. Raises NotTheLeader, NotAdmitted, and NoAnswer when a
    try got no greeting and none greeted by `deadline`."""
    delay = 0.05
    # A try whose connection got no greeting: what held the port then was silent. A later try
    # refused or closed does not undo that (the port's holder may go with the leader's host,
    # whose leader gave up on it); only a greeting does.
    unanswered: NoAnswer | None = None
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            joined = join_once(leader, host, link, deadline, stop)
        except NoAnswer as error:
            # A leader busy accepting thousands of hosts greets late; what else holds the port
            # never does. Only the startup deadline tells them apart.
            unanswered, joined = error, None
        if joined is not None:
            return joined
        stop.wait(min(delay, max(deadline - time.monotonic(), 0)))
        delay = min(delay * 2, 1.0)
    if unanswered is not None and not stop.is_set():
        raise unanswered
    return None


def join_once(
    leader: LeaderAddress, host: str, link: str, deadline: float, stop: threading.Event
) -> Joined | None:
    """One try: a connection this job's leader admitted, or None (refused, closed before its
    greeting or welcome, `stop` set or `deadline` passed); NotTheLeader when another process
    answers, NotAdmitted when the leader refuses this host."""
    try:
        sock = socket.create_connection(
            (leader.host, leader.port), timeout=min(max(deadline - time.monotonic(), 0.01), 5)
        )
    except OSError:
        return None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    channel = Channel(sock)
    try:
        greeting = _from_leader(channel, "greeting", leader.greeting_timeout, deadline, stop)
        if greeting is None:
            channel.close()
            return None
        if not isinstance(greeting, Greeting):
            raise NotTheLeader(f"it sent a {greeting.kind!r} message instead of a greeting")
        if greeting.job != leader.job:
            raise NotTheLeader(f"the leader of another job, {greeting.job[:100]!r}, answers there")
        nonce = auth.new_nonce()
        proof = None
        if leader.secret is not None:
            proof = auth.join_proof(leader.secret, leader.job, host, link, greeting.nonce, nonce)
        channel.send(Join(host, leader.job, link, nonce, proof))
        # It greeted as this job's leader: a late welcome is a busy leader, not another process.
        answer = _from_leader(channel, "welcome", None, deadline, stop)
    except ChannelClosed:  # gone before it answered: not up yet, or going down
        channel.close()
        return None
    except (NotTheLeader, NoAnswer):
        channel.close()
        raise
    if answer is None:
        channel.close()
        return None
    if isinstance(answer, Refused):
        channel.close()
        raise NotAdmitted(answer.reason)
    if not isinstance(answer, Welcome):
        channel.close()
        raise NotTheLeader(f"it answered the join with a {answer.kind!r} message")
    if leader.secret is not None:
        expected = auth.welcome_proof(
            leader.secret, leader.job, host, link, nonce, greeting.nonce, answer.ssh_key or ""
        )
        if not auth.proofs_match(expected, answer.proof):
            channel.close()
            raise NotTheLeader("its proof does not match this job's secret")
    return Joined(channel, answer.ssh_key, answer.probe_addresses)


class NotTheLeader(Exception):
    """What answered on the control port is not this job's leader: why."""


class NotAdmitted(Exception):
    """This job's leader refused the connection: why."""


class NoAnswer(Exception):
    """What holds the control port accepted the connection and sent nothing: why."""


def _from_leader(
    channel: Channel,
    expected: str,
    timeout: float | None,
    deadline: float,
    stop: threading.Event,
) -> Message | None:
    """The leader's next message (`expected`: which, for errors); None when `stop` was set
    or `deadline` (the whole connect's) passed first. NoAnswer when nothing came within
    `timeout` (None: until the deadline), NotTheLeader when something else came;
    ChannelClosed when the connection closed first."""
    answer_deadline = deadline if timeout is None else time.monotonic() + timeout
    while not stop.is_set():
        now = time.monotonic()
        if now >= answer_deadline and timeout is not None:
            raise NoAnswer(f"no {expected} within {timeout:g} s ({LEADER_TIMEOUT_KEY})")
        if now >= deadline:
            return None
        wait = min(answer_deadline, deadline) - now
        try:
            frame = channel.receive_frame(timeout=min(wait, _GREETING_CHECK_SECONDS))
        except TimeoutError:
            continue
        except ProtocolError as error:  # a line longer than any frame of ours
            raise NotTheLeader(f"it sent something else ({error})") from None
        try:
            return messages.decode(frame)
        except ProtocolError:
            raise NotTheLeader(f"it sent {frame[:60]!r} instead of a {expected}") from None
    return None


def join_problem(leader: LeaderAddress, error: Exception) -> str:
    where = f"{leader.host}:{leader.port}"
    if isinstance(error, NotAdmitted):
        return f"the leader on {where} refused this host: {error}"
    if isinstance(error, NoAnswer):
        return (
            f"what answers on {where} never greeted this host: {error}, on every try until "
            f"the startup deadline ({STARTUP_TIMEOUT_SETTING}). Another process holds the "
            f"port on {leader.host} (the leader's failure file names it), or the leader is "
            "too busy to greet its hosts; choose another port, or raise those timeouts"
        )
    return (
        f"what answers on {where} is not this job's leader: {error}. Another process holds "
        f"the port on {leader.host} (the leader's failure file names it); choose another port"
    )


def hello_message(
    host: str,
    error: tuple[int, str] | None = None,
    marks: Sequence[Mark] = (),
    host_key: str | None = None,
    health: Sequence[CheckResult] = (),
    probe_address: str | None = None,
) -> Hello:
    """A worker's first message after its welcome; `error`: (exit code, message); `marks`: its
    timeline so far; `host_key`: its sshd's public key; `health`: its checks. It carries the
    worker's clock, from which the leader measures the offset to its own."""
    return Hello(
        host,
        None if error is None else ErrorReport(*error),
        tuple(marks),
        time.time(),
        host_key,
        tuple(health),
        probe_address,
    )


def bye_message(host: str, marks: Sequence[Mark]) -> Bye:
    """A worker's last message: it has the verdict; `marks`: its timeline since the hello."""
    return Bye(host, tuple(marks))
