"""The hang verdict (pure): which rank holds a hung job up, named from every rank's stacks.

When no rank shows progress for ringleader_hang_timeout seconds, the leader has every rank's
stacks taken (ringleader.core.stacks) and names the culprit in the failure file's first line.
Ranks are grouped by where the main thread of their user process stands in Python; the largest
group is taken to wait (in a collective, for the others) and every rank outside it is a culprit.
Only Python frames count, each function by its own name: native frames differ from process to
process (unsymbolized addresses move with ASLR), and py-spy names `Event.wait` what faulthandler
names `wait`, so ranks dumped either way still group together.
"""

import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ringleader.core.stacks import FAULTHANDLER, PROC, PY_SPY, Frame, RankStacks, ThreadStack

HEADLINE_LIMIT = 400  # characters: one line, read first in the failure file
# Progress this close to the latest counts as last too: ranks that stopped together (each
# printed its last step line) are named together, not told apart by milliseconds.
LAST_PROGRESS_WINDOW = 1.0
# What the headline names of a list of ranks (numbers and runs of them, hosts) and of the
# culprit groups; the summary names all.
_HEADLINE_RUNS = 8
_HEADLINE_HOSTS = 3
_HEADLINE_GROUPS = 3
_INDENT = "    "

_METHOD_NAMES = {
    PY_SPY: "py-spy",
    FAULTHANDLER: "faulthandler",
    PROC: "/proc",
    "": "nothing (see the notes)",
}
_PACKAGES = re.compile(r"/(?:site|dist)-packages/")
_STANDARD_LIBRARY = re.compile(r"/lib/python\d+\.\d+t?/|^<frozen ")
# ringleader's own code, wherever it is installed (site-packages, or a source checkout).
_OWN_CODE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# Native code of the interpreter and the C library: what any blocked Python sits in, never
# what a rank waits for.
_SYSTEM_LIBRARY = re.compile(
    r"/(?:libc|libpthread|libpython\d*(?:\.\d+)*|ld-linux[-\w]*|python\d*(?:\.\d+)*)"
    r"(?:[-.\d]*\.so[.\d]*)?$"
)
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")  # a native frame without a symbol
# The rank wrapper's notes name the rank's own processes; without them, equal notes of
# different ranks read as one.
_PIDS = re.compile(r" for pids? \d+(?:, \d+)*")


@dataclass(frozen=True)
class LastProgress:
    """A rank's last progress the leader saw (an output line or a heartbeat)."""

    rank: int
    host: str
    at: float  # time.time() on the leader's clock

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "host": self.host, "at": self.at}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "LastProgress":
        return cls(int(data["rank"]), str(data["host"]), float(data["at"]))


@dataclass(frozen=True)
class MissingStacks:
    """A rank whose stacks did not arrive: its host did not answer within
    ringleader_stack_dump_timeout, it was lost, or the rank ended first."""

    rank: int
    host: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "host": self.host, "reason": self.reason}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "MissingStacks":
        return cls(int(data["rank"]), str(data["host"]), str(data["reason"]))


def is_user_frame(frame: Frame) -> bool:
    """Python code of the user's own: not native, not an installed package, not the standard
    library, not ringleader's."""
    return not (
        frame.native
        or _PACKAGES.search(frame.file)
        or _STANDARD_LIBRARY.search(frame.file)
        or frame.file.startswith(_OWN_CODE)
    )


# ---------------------------------------------------------------------------------- grouping
@dataclass(frozen=True)
class StackGroup:
    """Ranks whose user process's main thread stands in the same Python frames; ranks without
    a Python stack group by their /proc state instead."""

    members: tuple[RankStacks, ...]  # by rank
    frames: tuple[Frame, ...]  # one member's main-thread stack, innermost first
    state: str = ""  # that member's /proc state

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(member.rank for member in self.members)

    @property
    def hosts(self) -> tuple[str, ...]:
        """Each host once, in the order of its first rank."""
        return tuple(dict.fromkeys(member.host for member in self.members))

    @property
    def python(self) -> bool:
        return any(not frame.native for frame in self.frames)


_Key = tuple[str, tuple[tuple[str, str, int | None], ...]]


def group_stacks(stacks: Sequence[RankStacks]) -> list[StackGroup]:
    """Ranks by identical Python stack: the largest group first, equal ones by lowest rank."""
    by_key: dict[_Key, list[RankStacks]] = {}
    for rank in sorted(stacks, key=lambda each: each.rank):
        by_key.setdefault(_key(rank), []).append(rank)
    groups = [_group(members) for members in by_key.values()]
    return sorted(groups, key=lambda group: (-len(group.members), group.ranks[0]))


def _main_thread(stacks: RankStacks) -> ThreadStack | None:
    return stacks.processes[0].main_thread if stacks.processes else None


def _state(stacks: RankStacks) -> str:
    return stacks.processes[0].state if stacks.processes else ""


def _own_name(function: str) -> str:
    """`wrapper` for py-spy's `_exception_logger.<locals>.wrapper`: faulthandler's name."""
    return function.rsplit(".", 1)[-1]


def _key(stacks: RankStacks) -> _Key:
    thread = _main_thread(stacks)
    frames = thread.frames if thread is not None else ()
    python = tuple((_own_name(f.function), f.file, f.line) for f in frames if not f.native)
    return ("", python) if python else (_state(stacks), ())


def _group(members: list[RankStacks]) -> StackGroup:
    # py-spy's stack shows the native frames too: what the group waits in, when it is C.
    shown = min(members, key=lambda member: (member.method != PY_SPY, member.rank))
    thread = _main_thread(shown)
    return StackGroup(tuple(members), thread.frames if thread else (), _state(shown))


# ---------------------------------------------------------------------------------- where
def _user_and_call(frames: Sequence[Frame]) -> tuple[Frame | None, Frame | None]:
    """The innermost user frame, and what it waits in (None when it is innermost itself)."""
    at = next((i for i, frame in enumerate(frames) if is_user_frame(frame)), len(frames))
    return (frames[at] if at < len(frames) else None), _waited_call(frames[:at])


def _waited_call(inner: Sequence[Frame]) -> Frame | None:
    """What user code waits in, of the frames below it (innermost first): a package's innermost
    Python function (the call itself, under any decorators: all_reduce below torch's loggers),
    else the outermost native function that is not the interpreter's or the C library's (what
    user code called, e.g. mpi4py's allreduce, not the poll loop under it), else the standard
    library's innermost function (threading's wait)."""
    python = [frame for frame in inner if not frame.native]
    packaged = [frame for frame in python if _PACKAGES.search(frame.file)]
    native = [
        frame
        for frame in inner
        if frame.native
        and not _SYSTEM_LIBRARY.search(frame.file)
        and not _ADDRESS.fullmatch(frame.function)
    ]
    if packaged:
        return packaged[0]
    if native:
        return native[-1]
    return python[0] if python else None


def _file_line(frame: Frame) -> str:
    name = frame.file.rsplit("/", 1)[-1]
    return f"{name}:{frame.line}" if frame.line else name


def _no_python_stack(group: StackGroup) -> str:
    return "no Python stack" + (f" (/proc: {group.state})" if group.state else "")


def _waiting_place(group: StackGroup, at_user_code: str = "in") -> str:
    """`in all_reduce (train.py:17)`: what the group waits in, called from where in user
    code; `in wait_forever (train.py:9)` when user code is innermost itself (`at_user_code`
    replaces that "in")."""
    if not group.python:
        return f"with {_no_python_stack(group)}"
    user, call = _user_and_call(group.frames)
    if call is None and user is not None:
        return f"{at_user_code} {user.where()}"
    if call is not None and user is not None:
        return f"in {call.function} ({_file_line(user)})"
    return f"in {(call or group.frames[0]).where()}"


def _culprit_place(group: StackGroup) -> str:
    """`in load_batch_forever (train.py:12)`: the innermost user frame, else what the rank
    waits in."""
    user, call = _user_and_call(group.frames)
    return f"in {(user or call or group.frames[0]).where()}"


# ---------------------------------------------------------------------------------- ranks as text
def _numbers(ranks: Iterable[int], limit: int | None = None) -> str:
    """`0-3, 5, 7`: runs of three or more as ranges; beyond `limit` runs, `and N more`."""
    runs: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    shown = runs[:limit]
    text = ", ".join(
        f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in shown
    )
    more = sum(len(run) for run in runs[len(shown) :])
    return text + (f" and {more} more" if more else "")


def _host_list(hosts: Sequence[str], limit: int | None = None) -> str:
    shown = hosts[:limit]
    more = len(hosts) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more else "")


def _who(pairs: Sequence[tuple[int, str]], brief: bool = True) -> str:
    """`rank 4 on host algo-3`, `ranks 2, 4 on hosts algo-2, algo-3`; `brief` names only the
    first few ranks and hosts of many."""
    hosts = list(dict.fromkeys(host for _, host in pairs))
    ranks = "rank" if len(pairs) == 1 else "ranks"
    on = "host" if len(hosts) == 1 else "hosts"
    numbers = _numbers((rank for rank, _ in pairs), _HEADLINE_RUNS if brief else None)
    return f"{ranks} {numbers} on {on} {_host_list(hosts, _HEADLINE_HOSTS if brief else None)}"


def _pairs(items: Iterable[RankStacks | MissingStacks | LastProgress]) -> list[tuple[int, str]]:
    return [(item.rank, item.host) for item in items]


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


# ---------------------------------------------------------------------------------- the verdict
def _split(groups: list[StackGroup]) -> tuple[StackGroup | None, list[StackGroup]]:
    """The group taken to wait and the culprits; no waiting group when none stands out."""
    largest = [group for group in groups if len(group.members) == len(groups[0].members)]
    if len(largest) > 1:
        # Groups of equal size: ranks waiting for the others wait inside a library (a
        # collective), a culprit is stuck in its own code.
        largest = [group for group in largest if not _innermost_is_user_code(group)]
    if len(largest) != 1:
        return None, groups
    return largest[0], [group for group in groups if group is not largest[0]]


def _innermost_is_user_code(group: StackGroup) -> bool:
    python = [frame for frame in group.frames if not frame.native]
    return bool(python) and is_user_frame(python[0])


def _is_doing(group: StackGroup, place: Callable[[StackGroup], str]) -> str:
    """`rank 4 on host algo-3 is in load_batch_forever (train.py:12)`."""
    several = len(group.members) > 1
    if group.python:
        verb = "are" if several else "is"
        return f"{_who(_pairs(group.members))} {verb} {place(group)}"
    verb = "have" if several else "has"
    return f"{_who(_pairs(group.members))} {verb} {_no_python_stack(group)}"


def _each_doing(groups: list[StackGroup], place: Callable[[StackGroup], str]) -> list[str]:
    """What the first few groups are doing, then how many more ranks are elsewhere."""
    named = [_is_doing(group, place) for group in groups[:_HEADLINE_GROUPS]]
    rest = sum(len(group.members) for group in groups[_HEADLINE_GROUPS:])
    return [*named, f"{_plural(rest, 'more rank')} elsewhere"] if rest else named


def _culprits(waiting: StackGroup, culprits: list[StackGroup]) -> str:
    named = _capital(", ".join(_each_doing(culprits, _culprit_place)))
    others = len(waiting.members)
    wait = "where the other rank waits" if others == 1 else f"where the other {others} ranks wait"
    if waiting.python:
        return f"{named}, not {_waiting_place(waiting, 'at')} {wait}"
    return f"{named}, {wait} with {_no_python_stack(waiting)}"


def _every_rank(group: StackGroup, missing: Sequence[MissingStacks]) -> str:
    which = "Every rank that sent stacks" if missing else "Every rank"
    return f"{which} ({len(group.members)}) waits in the same place, {_waiting_place(group)}"


def _last_progress(progress: Sequence[LastProgress], now: float) -> str:
    if not progress:
        return "no progress was seen from any rank"
    latest = max(each.at for each in progress)
    last = sorted(
        (each for each in progress if latest - each.at <= LAST_PROGRESS_WINDOW),
        key=lambda each: each.rank,
    )
    return (
        f"the last progress came from {_who(_pairs(last))}, {now - latest:.1f} s before the verdict"
    )


def _by_reason(missing: Sequence[MissingStacks]) -> list[tuple[str, list[tuple[int, str]]]]:
    ranks: dict[str, list[tuple[int, str]]] = {}
    for each in sorted(missing, key=lambda each: each.rank):
        ranks.setdefault(each.reason, []).append((each.rank, each.host))
    return list(ranks.items())


def _missing_clause(missing: Sequence[MissingStacks]) -> str:
    parts = [f"{_who(pairs)}: {reason}" for reason, pairs in _by_reason(missing)]
    return "; no stacks from " + "; from ".join(parts) if parts else ""


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def hang_headline(
    stacks: Sequence[RankStacks],
    missing: Sequence[MissingStacks],
    last_progress: Sequence[LastProgress],
    timed_out: str,
    now: float,
) -> str:
    """The failure file's first line after a hang: the culprit first, then where the others
    wait; when every rank waits in the same place, who made progress last and when. `now` is
    the verdict's time.time() on the leader's clock; `timed_out` says how long the job was
    quiet and the setting that allowed it."""
    groups = group_stacks(stacks)
    waiting, culprits = _split(groups) if groups else (None, [])
    if not groups:
        text = f"No stacks arrived from any rank; {_last_progress(last_progress, now)}"
    elif waiting is None:
        text = f"No rank stands out: {'; '.join(_each_doing(groups, _waiting_place))}"
    elif culprits:
        text = _culprits(waiting, culprits)
    else:
        text = f"{_every_rank(waiting, missing)}; {_last_progress(last_progress, now)}"
    return _clip(f"{text}; {timed_out}{_missing_clause(missing)}.", HEADLINE_LIMIT)


# ---------------------------------------------------------------------------------- the report
@dataclass(frozen=True)
class HangReport:
    """Every rank's stacks after a hang (or on demand, Ctrl-\\), and the verdict; the leader
    writes it as /opt/ml/output/data/hang/stacks.json."""

    reason: str  # "hang" or "on demand"
    timeout: float  # ringleader_hang_timeout, seconds
    taken_at: float  # time.time() on the leader's clock, when the last stacks arrived
    headline: str
    stacks: tuple[RankStacks, ...] = ()  # by rank
    missing: tuple[MissingStacks, ...] = ()
    last_progress: tuple[LastProgress, ...] = ()  # each rank's latest

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "timeout": self.timeout,
            "taken_at": self.taken_at,
            "headline": self.headline,
            "stacks": [stacks.to_json() for stacks in self.stacks],
            "missing": [each.to_json() for each in self.missing],
            "last_progress": [each.to_json() for each in self.last_progress],
        }

    @classmethod
    def from_json(cls, data: Any) -> "HangReport":
        """ValueError when `data` is not a hang report."""
        try:
            return cls(
                str(data["reason"]),
                float(data["timeout"]),
                float(data["taken_at"]),
                str(data["headline"]),
                tuple(RankStacks.from_json(each) for each in data["stacks"]),
                tuple(MissingStacks.from_json(each) for each in data["missing"]),
                tuple(LastProgress.from_json(each) for each in data["last_progress"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ValueError(f"not a hang report ({type(error).__name__}: {error})") from None

    def summary_lines(self) -> list[str]:
        """The headline, the ranks without stacks, notes and evidence, then the ranks grouped
        by stack (largest group first, each with one main-thread stack, innermost first, up to
        the user's outermost frame)."""
        # Short lines first: the failure file keeps only its first 1024 bytes.
        lines = [self.headline]
        lines.extend(
            f"No stacks from {_who(pairs, brief=False)}: {reason}"
            for reason, pairs in _by_reason(self.missing)
        )
        lines.extend(_note_lines(self.stacks))
        for stacks in self.stacks:
            lines.extend(_evidence_lines(stacks))
        for group in group_stacks(self.stacks):
            lines.extend(_group_lines(group))
        return lines


def _methods(group: StackGroup) -> str:
    """`py-spy`, or `py-spy (0, 1), faulthandler (2)` when ranks were dumped different ways."""
    ranks: dict[str, list[int]] = {}
    for member in group.members:
        ranks.setdefault(_METHOD_NAMES.get(member.method, member.method), []).append(member.rank)
    if len(ranks) == 1:
        return next(iter(ranks))
    return ", ".join(f"{method} ({_numbers(numbers)})" for method, numbers in ranks.items())


def _group_lines(group: StackGroup) -> list[str]:
    count = _plural(len(group.members), "rank")
    head = f"{count} ({_numbers(group.ranks)} on {_host_list(group.hosts)}), via {_methods(group)}:"
    if not group.python:
        return [head, _INDENT + _no_python_stack(group)]
    # Unsymbolized native frames say nothing to a reader, nor do the interpreter's frames
    # that started the user's script (runpy, mpi4py's launcher); the rank's own file keeps them.
    frames = [frame for frame in group.frames if not _ADDRESS.fullmatch(frame.function)]
    outermost = max((at for at, frame in enumerate(frames) if is_user_frame(frame)), default=None)
    if outermost is not None:
        frames = frames[: outermost + 1]
    return [head, *(_INDENT + frame.where() for frame in frames)]


def _note_lines(stacks: Sequence[RankStacks]) -> list[str]:
    """Each note once, with the ranks it is about."""
    ranks: dict[str, list[tuple[int, str]]] = {}
    for each in stacks:
        for note in dict.fromkeys(_PIDS.sub("", note) for note in each.notes):
            ranks.setdefault(note, []).append((each.rank, each.host))
    return [f"Note on {_who(pairs, brief=False)}: {note}" for note, pairs in ranks.items()]


def _evidence_lines(stacks: RankStacks) -> list[str]:
    if not stacks.evidence:
        return []
    head = f"Evidence from {_who([(stacks.rank, stacks.host)])}:"
    return [head, *(_INDENT + line for line in stacks.evidence)]


# ---------------------------------------------------------------------------------- one rank
def _utc(epoch: float) -> str:
    moment = datetime.fromtimestamp(epoch, timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d} UTC"


def _full_where(frame: Frame) -> str:
    return f"{frame.function} ({frame.file}" + (f":{frame.line})" if frame.line else ")")


def _thread_lines(thread: ThreadStack) -> list[str]:
    name = thread.name if thread.name.startswith("Thread") else f'Thread "{thread.name}"'
    facts = ", ".join(fact for fact in ("main" if thread.main else "", thread.state) if fact)
    head = f"{name} ({facts}):" if facts else f"{name}:"
    return [head, *(_INDENT + _full_where(frame) for frame in thread.frames)]


def rank_text(stacks: RankStacks) -> str:
    """One rank's whole dump: every process and thread with full paths, its notes and the
    evidence from its output (the leader's hang/<host>.rank-<N>.txt)."""
    lines = [
        f"{_capital(_who([(stacks.rank, stacks.host)]))}: stacks taken {_utc(stacks.taken_at)}"
    ]
    lines.extend(f"Note: {note}" for note in stacks.notes)
    for process in stacks.processes:
        state = f"; /proc: {process.state}" if process.state else ""
        method = _METHOD_NAMES.get(process.method, process.method)
        lines += ["", f"Process {process.pid}: {process.command} (via {method}{state})"]
        for thread in process.threads:
            lines.extend(_thread_lines(thread))
        if not process.threads:  # /proc's own text: each thread's state
            lines.extend(_INDENT + line for line in process.text.splitlines())
    if stacks.evidence:
        lines += ["", "Evidence from its output:", *(_INDENT + line for line in stacks.evidence)]
    return "\n".join(lines) + "\n"
