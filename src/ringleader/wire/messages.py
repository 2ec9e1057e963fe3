"""The control messages, one frozen dataclass per kind, and their one codec.

`encode` turns a message into its control frame and `decode` a control frame into its message;
nothing else reads or writes a message's fields. A field that is missing or of the wrong type
is a ProtocolError, and so is a kind this version does not know (UnknownMessage, which a reader
that tolerates newer peers may skip).

Who sends what:
- the leader, first on every connection to its control port: Greeting (the job it leads, and a
  nonce); the worker answers Join (who it is, for which job, which of its two connections this
  is, with its proof and nonce: ringleader.wire.auth), the leader Welcome (its own proof, and
  on the control connection the job's ssh key) or Refused (why, and nothing more follows).
- a worker to the leader, on its control connection: Hello, then RankStart, RankEnd (relayed
  from its host agent), RanksExit (its own launcher exited), Sigterm, and Bye once it has the
  job's exit code; on its pulse connection, after the Welcome, only Pulse (both ways).
- the leader to its workers: Launched, Terminate, Exit; between two attempts (restarts in
  place), Restart, which each worker answers Ready once its ranks of the last attempt are gone;
  with ringleader_health_pairs=all, once every worker said hello, ProbePeers, which each worker
  answers Probed.
- a probe (ringleader.wire.probe), after its Welcome on a PROBE_LINK connection: frames of its
  own (ringleader.wire.linkprobe), no messages.
- a rank wrapper to its host agent: RankStart (with the user process's PID), RankEnd; the
  agent answers Terminate (stop your rank) and Ack (the record arrived).
- the hang watch: Progress (wrapper to agent, worker to leader: these ranks made progress),
  DumpStacks (leader to workers, agent to wrappers: take your ranks' stacks now), Stacks (the
  way back, one rank's), StacksWanted (a worker got SIGQUIT: the leader dumps every rank).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, TypeVar

from ringleader.core.health import CheckResult
from ringleader.core.progress import RankStep
from ringleader.core.records import RankRecord
from ringleader.core.stacks import RankStacks
from ringleader.core.straggler import WaitCount
from ringleader.core.timeline import Mark
from ringleader.wire import frames
from ringleader.wire.frames import JsonObject, ProtocolError

if TYPE_CHECKING:
    # Imported where a spec is read: every rank wrapper imports this module, and the spec's
    # module brings the job's configuration with it (some 15 ms of each rank's start).
    from ringleader.launch.spawn import SpawnSpec

_T = TypeVar("_T")


class UnknownMessage(ProtocolError):
    """A well-formed control frame of a type this version does not know."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"unknown message type {kind[:50]!r}")
        self.kind = kind


@dataclass(frozen=True)
class ErrorReport:
    """A worker's error before the job could start (a configuration error, ...)."""

    code: int  # the exit code it calls for
    message: str


@dataclass(frozen=True)
class Greeting:
    """The leader's first message on every connection to its control port: the job it leads.
    A worker that gets another job's, or none, has not reached its own leader."""

    kind: ClassVar[str] = "greeting"
    job: str
    nonce: str  # fresh for this connection: the worker's proof covers it


# The two connections a worker opens to its leader, and the short one of a reachability probe
# (to the leader, or to another worker: ringleader.wire.probe).
CONTROL_LINK = "control"
PULSE_LINK = "pulse"
PROBE_LINK = "probe"


@dataclass(frozen=True)
class Join:
    """A worker's answer to the greeting: who it is, in which job, on which of its links."""

    kind: ClassVar[str] = "join"
    host: str
    job: str
    link: str  # CONTROL_LINK, PULSE_LINK or PROBE_LINK
    nonce: str  # fresh for this connection: the leader's proof covers it
    proof: str | None = None  # None: this job has no secret


@dataclass(frozen=True)
class Welcome:
    """The leader admits a worker's connection."""

    kind: ClassVar[str] = "welcome"
    proof: str | None = None
    ssh_key: str | None = None  # the job's public ssh key, for this host's authorized_keys
    # On the control connection: the leader's addresses on the job's network interface, which
    # the worker's health gate probes.
    probe_addresses: tuple[str, ...] = ()


@dataclass(frozen=True)
class Refused:
    """The leader does not admit a connection; it closes it next."""

    kind: ClassVar[str] = "refused"
    reason: str


@dataclass(frozen=True)
class Hello:
    """A worker's first message on its control connection: it is ready, or it has an error."""

    kind: ClassVar[str] = "hello"
    host: str
    error: ErrorReport | None = None
    timeline: tuple[Mark, ...] = ()  # the worker's timeline until it said hello
    # The worker's time.time() as it sent this: the leader takes its clock's offset from it.
    sent_at: float | None = None
    host_key: str | None = None  # this host's sshd's public key, made for this job
    health: tuple[CheckResult, ...] = ()  # its health checks before the first attempt
    # Its address on the job's interface, where its peers probe it (ringleader_health_pairs=all)
    probe_address: str | None = None


@dataclass(frozen=True)
class ProbePeers:
    """Leader to workers, once every worker said hello (ringleader_health_pairs=all): probe
    your share of these workers (ringleader.wire.probe.peers_to_probe) and report."""

    kind: ClassVar[str] = "probe-peers"
    peers: tuple[tuple[str, str], ...]  # every worker's (name, address on the job's interface)


@dataclass(frozen=True)
class Probed:
    """A worker's pair probes, the answer to ProbePeers."""

    kind: ClassVar[str] = "probed"
    host: str
    health: tuple[CheckResult, ...] = ()


@dataclass(frozen=True)
class Bye:
    """A worker's last message: it has the job's exit code."""

    kind: ClassVar[str] = "bye"
    host: str
    timeline: tuple[Mark, ...] = ()  # the worker's timeline since its hello (verdict, exited)


@dataclass(frozen=True)
class Pulse:
    """I am alive (the only message on a pulse connection after its hello)."""

    kind: ClassVar[str] = "pulse"


@dataclass(frozen=True)
class Launched:
    """The leader started the job's launcher; with spawned ranks, the spec every host needs."""

    kind: ClassVar[str] = "launched"
    spawn: "SpawnSpec | None" = None


@dataclass(frozen=True)
class Terminate:
    """Stop your ranks: SIGTERM, then SIGKILL `grace` seconds later."""

    kind: ClassVar[str] = "terminate"
    grace: float


@dataclass(frozen=True)
class Exit:
    """The job's exit code and failure text: reply Bye, then exit."""

    kind: ClassVar[str] = "exit"
    code: int
    failure: str | None


@dataclass(frozen=True)
class Restart:
    """The job's ranks start again: end what is left of the last attempt's, then say Ready."""

    kind: ClassVar[str] = "restart"
    attempt: int  # the attempt that comes next


@dataclass(frozen=True)
class Ready:
    """A worker's answer to Restart: its ranks of the last attempt are gone."""

    kind: ClassVar[str] = "ready"
    host: str
    attempt: int
    health: tuple[CheckResult, ...] = ()  # its health checks before that attempt


@dataclass(frozen=True)
class RankStart:
    """A rank started; from a rank wrapper, with its user process's PID."""

    kind: ClassVar[str] = "rank-start"
    rank: int
    host: str
    pid: int | None = None
    attempt: int = 0
    exit_note: str | None = None  # where the user process notes the code it exits with


@dataclass(frozen=True)
class RankEnd:
    """A rank ended, with what its wrapper recorded."""

    kind: ClassVar[str] = "rank-end"
    record: RankRecord


@dataclass(frozen=True)
class RanksExit:
    """A worker's own launcher (spawned ranks) exited: its ranks are done."""

    kind: ClassVar[str] = "ranks-exited"
    host: str
    code: int


@dataclass(frozen=True)
class Sigterm:
    """SIGTERM arrived on a worker."""

    kind: ClassVar[str] = "sigterm"
    host: str


@dataclass(frozen=True)
class Ack:
    """The host agent has a rank's record."""

    kind: ClassVar[str] = "ack"


@dataclass(frozen=True)
class Progress:
    """These ranks of `host` made progress (output, a heartbeat, a step) since the last
    Progress; `steps`: the step of each of them that has a step source."""

    kind: ClassVar[str] = "progress"
    host: str
    ranks: tuple[int, ...]  # those that moved (none: only `waits` changed)
    steps: tuple[RankStep, ...] = ()
    waits: tuple[WaitCount, ...] = ()  # stack samples so far, and those waiting (stragglers)


# Why stacks are taken: the job hung (the verdict follows), or someone asked (SIGQUIT).
HANG = "hang"
ON_DEMAND = "on demand"


@dataclass(frozen=True)
class DumpStacks:
    """Take the stacks of your ranks now."""

    kind: ClassVar[str] = "dump-stacks"
    reason: str  # HANG or ON_DEMAND


@dataclass(frozen=True)
class Stacks:
    """One rank's stacks, taken for a DumpStacks."""

    kind: ClassVar[str] = "stacks"
    reason: str
    stacks: RankStacks


@dataclass(frozen=True)
class StacksWanted:
    """SIGQUIT arrived on a worker: the leader dumps every rank's stacks."""

    kind: ClassVar[str] = "stacks-wanted"
    host: str


Message = (
    Greeting
    | Join
    | Welcome
    | Refused
    | Hello
    | ProbePeers
    | Probed
    | Bye
    | Pulse
    | Launched
    | Terminate
    | Exit
    | Restart
    | Ready
    | RankStart
    | RankEnd
    | RanksExit
    | Sigterm
    | Ack
    | Progress
    | DumpStacks
    | Stacks
    | StacksWanted
)


def encode(message: Message) -> bytes:
    """The control frame of `message` (without the newline that ends every frame)."""
    return frames.control_frame({"type": message.kind, **_fields(message)})


def decode(frame: bytes) -> Message:
    """The message a control frame carries; ProtocolError when it is not one."""
    data = frames.decode(frame)
    kind: str = data["type"]
    read = _Fields(data, f"{kind} message")
    if kind == Greeting.kind:
        return Greeting(read.text("job"), read.text("nonce"))
    if kind == Join.kind:
        return Join(
            read.text("host"),
            read.text("job"),
            read.text("link"),
            read.text("nonce"),
            read.optional_text("proof"),
        )
    if kind == Welcome.kind:
        return Welcome(
            read.optional_text("proof"),
            read.optional_text("ssh_key"),
            read.texts("probe_addresses"),
        )
    if kind == Refused.kind:
        return Refused(read.text("reason"))
    if kind == Hello.kind:
        sent_at = None if data.get("sent_at") is None else read.number("sent_at")
        return Hello(
            read.text("host"),
            _error_report(read),
            _timeline(read),
            sent_at,
            read.optional_text("host_key"),
            _health(read),
            read.optional_text("probe_address"),
        )
    if kind == ProbePeers.kind:
        return ProbePeers(tuple(_peer(read, item) for item in read.optional_list("peers")))
    if kind == Probed.kind:
        return Probed(read.text("host"), _health(read))
    if kind == Bye.kind:
        return Bye(read.text("host"), _timeline(read))
    if kind == Pulse.kind:
        return Pulse()
    if kind == Launched.kind:
        from ringleader.launch.spawn import SpawnSpec

        spec = read.optional_object("spawn")
        return Launched(None if spec is None else read.parsed("spawn", SpawnSpec.from_json))
    if kind == Terminate.kind:
        return Terminate(read.number("grace"))
    if kind == Exit.kind:
        return Exit(read.integer("code"), read.optional_text("failure"))
    if kind == Restart.kind:
        return Restart(read.integer("attempt"))
    if kind == Ready.kind:
        return Ready(read.text("host"), read.integer("attempt"), _health(read))
    if kind == RankStart.kind:
        return RankStart(
            read.integer("rank"),
            read.text("host"),
            read.optional_integer("pid"),
            read.optional_integer("attempt") or 0,
            read.optional_text("exit_note"),
        )
    if kind == RankEnd.kind:
        return RankEnd(read.parsed("record", RankRecord.from_json))
    if kind == RanksExit.kind:
        return RanksExit(read.text("host"), read.integer("code"))
    if kind == Sigterm.kind:
        return Sigterm(read.text("host"))
    if kind == Ack.kind:
        return Ack()
    if kind == Progress.kind:
        return Progress(read.text("host"), read.integers("ranks"), _steps(read), _waits(read))
    if kind == DumpStacks.kind:
        return DumpStacks(read.text("reason"))
    if kind == Stacks.kind:
        return Stacks(read.text("reason"), read.parsed("stacks", RankStacks.from_json))
    if kind == StacksWanted.kind:
        return StacksWanted(read.text("host"))
    raise UnknownMessage(kind)


def _fields(message: Message) -> JsonObject:
    """`message`'s fields as JSON (its type apart); optional ones only when they are set."""
    if isinstance(message, Greeting):
        return {"job": message.job, "nonce": message.nonce}
    if isinstance(message, Join):
        who = {"host": message.host, "job": message.job, "link": message.link}
        return _set({**who, "nonce": message.nonce}, proof=message.proof)
    if isinstance(message, Welcome):
        addresses = list(message.probe_addresses) or None
        return _set({}, proof=message.proof, ssh_key=message.ssh_key, probe_addresses=addresses)
    if isinstance(message, Refused):
        return {"reason": message.reason}
    if isinstance(message, Hello):
        fields: JsonObject = {"host": message.host}
        if message.timeline:
            fields["timeline"] = [mark.to_json() for mark in message.timeline]
        if message.error is not None:
            fields["error"] = {"code": message.error.code, "message": message.error.message}
        if message.health:
            fields["health"] = [result.to_json() for result in message.health]
        return _set(
            fields,
            sent_at=message.sent_at,
            host_key=message.host_key,
            probe_address=message.probe_address,
        )
    if isinstance(message, ProbePeers):
        return {"peers": [list(peer) for peer in message.peers]}
    if isinstance(message, Probed):
        return {"host": message.host, "health": [result.to_json() for result in message.health]}
    if isinstance(message, Bye):
        return {"host": message.host, "timeline": [mark.to_json() for mark in message.timeline]}
    if isinstance(message, Sigterm | StacksWanted):
        return {"host": message.host}
    if isinstance(message, Pulse | Ack):
        return {}
    if isinstance(message, Launched):
        return {} if message.spawn is None else {"spawn": message.spawn.to_json()}
    if isinstance(message, Terminate):
        return {"grace": message.grace}
    if isinstance(message, Exit):
        return {"code": message.code, "failure": message.failure}
    if isinstance(message, Restart):
        return {"attempt": message.attempt}
    if isinstance(message, Ready):
        fields = {"host": message.host, "attempt": message.attempt}
        if message.health:
            fields["health"] = [result.to_json() for result in message.health]
        return fields
    if isinstance(message, RankStart):
        attempt = message.attempt or None  # attempt 0 is the default: not sent
        fields = {"rank": message.rank, "host": message.host}
        return _set(fields, pid=message.pid, attempt=attempt, exit_note=message.exit_note)
    if isinstance(message, RankEnd):
        return {"record": message.record.to_json()}
    if isinstance(message, RanksExit):
        return {"host": message.host, "code": message.code}
    if isinstance(message, Progress):
        fields = {"host": message.host, "ranks": list(message.ranks)}
        if message.steps:
            fields["steps"] = [step.to_json() for step in message.steps]
        if message.waits:
            fields["waits"] = [count.to_json() for count in message.waits]
        return fields
    if isinstance(message, DumpStacks):
        return {"reason": message.reason}
    if isinstance(message, Stacks):
        return {"reason": message.reason, "stacks": message.stacks.to_json()}
    raise TypeError(f"not a wire message: {message!r}")  # typing.assert_never is 3.11+


def _set(fields: JsonObject, **optional: object) -> JsonObject:
    """`fields` with each optional field that is set."""
    return {**fields, **{name: value for name, value in optional.items() if value is not None}}


def _error_report(read: "_Fields") -> ErrorReport | None:
    error = read.optional_object("error")
    if error is None:
        return None
    inner = _Fields(error, f"{read.label}'s error")
    return ErrorReport(inner.integer("code"), inner.text("message"))


def _health(read: "_Fields") -> tuple[CheckResult, ...]:
    """A host's health checks; one that cannot be read is a protocol error (they decide)."""
    results = []
    for item in read.optional_list("health"):
        try:
            results.append(CheckResult.from_json(item))
        except (KeyError, TypeError, ValueError) as error:
            raise ProtocolError(f"malformed {read.label}: 'health' ({error!r})") from error
    return tuple(results)


def _steps(read: "_Fields") -> tuple[RankStep, ...]:
    return _each(read, "steps", RankStep.from_json)


def _waits(read: "_Fields") -> tuple[WaitCount, ...]:
    return _each(read, "waits", WaitCount.from_json)


def _each(read: "_Fields", name: str, parse: Callable[[Any], _T]) -> tuple[_T, ...]:
    """Every item of the optional list `name`, parsed; one that is not is a protocol error."""
    found = []
    for item in read.optional_list(name):
        try:
            found.append(parse(item))
        except (TypeError, ValueError) as error:
            raise ProtocolError(f"malformed {read.label}: {name!r} ({error})") from error
    return tuple(found)


def _peer(read: "_Fields", item: Any) -> tuple[str, str]:
    if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)):
        raise ProtocolError(f"malformed {read.label}: 'peers' (each [name, address], not {item!r})")
    return item[0], item[1]


def _timeline(read: "_Fields") -> tuple[Mark, ...]:
    """Timeline marks; one that cannot be read is left out (they are only for the timeline)."""
    marks = []
    for item in read.optional_list("timeline"):
        try:
            marks.append(Mark.from_json(item))
        except (KeyError, TypeError, ValueError):
            continue
    return tuple(marks)


class _Fields:
    """Reads the fields of one JSON object (`label`: what it is, for errors), each checked for
    its type."""

    def __init__(self, data: JsonObject, label: str) -> None:
        self._data = data
        self.label = label

    def text(self, name: str) -> str:
        value = self._data.get(name)
        if not isinstance(value, str):
            self._fail(name, "a string")
        return value

    def optional_text(self, name: str) -> str | None:
        return None if self._data.get(name) is None else self.text(name)

    def integer(self, name: str) -> int:
        value = self._data.get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            self._fail(name, "an integer")
        return value

    def integers(self, name: str) -> tuple[int, ...]:
        values = self.optional_list(name)
        if not all(isinstance(value, int) and not isinstance(value, bool) for value in values):
            self._fail(name, "a list of integers")
        return tuple(values)

    def texts(self, name: str) -> tuple[str, ...]:
        """A list of strings, empty when the field is missing."""
        found = self.optional_list(name)
        if not all(isinstance(item, str) for item in found):
            self._fail(name, "a list of strings")
        return tuple(found)

    def optional_integer(self, name: str) -> int | None:
        return None if self._data.get(name) is None else self.integer(name)

    def number(self, name: str) -> float:
        value = self._data.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            self._fail(name, "a number")
        return float(value)

    def object(self, name: str) -> JsonObject:
        value = self._data.get(name)
        if not isinstance(value, dict):
            self._fail(name, "an object")
        return value

    def optional_object(self, name: str) -> JsonObject | None:
        return None if self._data.get(name) is None else self.object(name)

    def optional_list(self, name: str) -> list[Any]:
        value = self._data.get(name)
        if value is None:
            return []
        if not isinstance(value, list):
            self._fail(name, "a list")
        return value

    def parsed(self, name: str, parse: Callable[[JsonObject], _T]) -> _T:
        """An object field read by `parse`, whose KeyError, TypeError or ValueError is a
        ProtocolError."""
        value = self.object(name)
        try:
            return parse(value)
        except (KeyError, TypeError, ValueError) as error:
            raise ProtocolError(
                f"malformed {self.label}: {name!r} ({type(error).__name__}: {error})"
            ) from error

    def _fail(self, name: str, expected: str) -> NoReturn:
        shown = repr(self._data[name])[:100] if name in self._data else "nothing"
        raise ProtocolError(f"malformed {self.label}: {name!r} must be {expected}, not {shown}")
