"""Take one rank's stacks: every process of its user process tree, at once.

Three ways, best first, per process:
- py-spy (`py-spy dump --json --native`): Python and native frames, with no help from the
  process, but it needs ptrace rights over it (Yama ptrace_scope 1 or a runtime's seccomp
  profile can deny them).
- faulthandler: our sitecustomize (site/sitecustomize.py, put on the user command's PYTHONPATH
  by stack_environment) registered a signal in every Python interpreter of the tree; on that
  signal CPython's C handler writes every thread's stack to `<stack_dir>/<pid>.txt`, even while
  the main thread is blocked in C. No ptrace needed.
- /proc: for a process that is not Python, or when neither way worked: its state and wchan.

RankStacks.notes say why a better way was not used. Nothing here raises because a process
ended meanwhile: the rank may end while its stacks are taken.
"""

import contextlib
import enum
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ringleader.core.proctimes import process_name, start_ticks
from ringleader.core.stacks import (
    FAULTHANDLER,
    PROC,
    PY_SPY,
    ProcessStacks,
    RankStacks,
    ThreadStack,
    parse_faulthandler,
    parse_py_spy_json,
)

PY_SPY_VARIABLE = "RINGLEADER_PY_SPY"  # a py-spy to use instead of ours; empty: do not use one
STACK_DIR_VARIABLE = "RINGLEADER_STACK_DIR"
STACK_SIGNAL_VARIABLE = "RINGLEADER_STACK_SIGNAL"
# A real-time signal, not SIGUSR1/2: the wrapper forwards those to the user's processes
# (schedulers and users send them, for checkpoints), and a training library may handle them.
# Not the lowest real-time ones either: glibc keeps two below SIGRTMIN for its threads, and
# libraries that take one (timers, profilers, MPI and fabric libraries) take SIGRTMIN upwards.
# Its number goes to the user's processes in RINGLEADER_STACK_SIGNAL: no libc disagreement.
STACK_SIGNAL = int(signal.SIGRTMIN) + 6
SITE_DIR = Path(__file__).resolve().parent / "site"  # holds our sitecustomize.py
MAX_PROCESSES = 16  # the user process and its first descendants: helpers beyond are not dumped
HEADER = "ringleader-stacks"  # the first word of a registration file (site/sitecustomize.py)

# py-spy gets this share of the time, faulthandler the rest: a py-spy that hangs (a target in
# uninterruptible sleep) must leave time for the fallback.
_PY_SPY_SHARE = 0.6
_POLL = 0.005
# A dump is complete once its file stopped growing for this long: CPython writes it from the
# signal handler in microseconds, but on a busy host the process can lose the CPU midway.
_DUMP_QUIET = 0.03
NO_ANSWER = "no answer"  # how a py-spy that did not finish in time is reported
_REAP_TIMEOUT = 1.0  # for a py-spy killed at its deadline to exit
_NOT_PYTHON = "Failed to find python version"  # py-spy's message for a process without Python


class PySpy(enum.Enum):
    FIND = "find"  # take_stacks' default: py_spy_path()


@dataclass(frozen=True)
class _Dump:
    method: str
    threads: tuple[ThreadStack, ...]
    text: str


def py_spy_path() -> str | None:
    """$RINGLEADER_PY_SPY if set (empty: none), else the py-spy next to this Python (a venv's
    bin, where `pip install ringleader[stacks]` puts it), else py-spy on PATH."""
    if PY_SPY_VARIABLE in os.environ:
        return os.environ[PY_SPY_VARIABLE] or None
    beside = Path(sys.executable).parent / "py-spy"
    if os.access(beside, os.X_OK):
        return str(beside)
    import shutil  # only when stacks are taken: each rank's wrapper imports this module

    return shutil.which("py-spy")


def stack_environment(env: Mapping[str, str], stack_dir: Path) -> dict[str, str]:
    """The user command's environment, with every Python it starts registering its stack dump.

    Our sitecustomize comes first on PYTHONPATH (the user's entries follow); it chains to the
    interpreter's own sitecustomize. `python -I`/`-E`/`-S` skip it: those get py-spy or /proc."""
    site = str(SITE_DIR)
    user_path = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    result = dict(env)
    result["PYTHONPATH"] = os.pathsep.join([site, *(e for e in user_path if e != site)])
    result[STACK_DIR_VARIABLE] = str(stack_dir)
    result[STACK_SIGNAL_VARIABLE] = str(STACK_SIGNAL)
    return result


def take_stacks(
    rank: int,
    host: str,
    pid: int,
    stack_dir: Path,
    timeout: float,
    py_spy: str | PySpy | None = PySpy.FIND,
) -> RankStacks:
    """The stacks of process `pid` and its descendants (up to MAX_PROCESSES), in `timeout` s.

    `py_spy`: the py-spy to run; None: none (faulthandler, else /proc)."""
    taken_at, start = time.time(), time.monotonic()
    pids, more = process_tree(pid)
    if not pids:
        return RankStacks(rank, host, taken_at, notes=(f"pid {pid}: ended before its stacks",))
    # Before anything pauses or signals them: the state they hang in, and names that outlive them.
    states = {each: proc_state(each) for each in pids}
    commands = {each: _command(each) for each in pids}
    path = py_spy_path() if py_spy is PySpy.FIND else py_spy
    dumps: dict[int, _Dump] = {}
    refused: dict[int, str] = {}  # why py-spy gave no stack, by PID
    python_only: list[str] = []
    if path is not None:
        py_spy_deadline = start + timeout * _PY_SPY_SHARE
        dumps, refused, python_only = _py_spy_dumps(path, pids, commands, py_spy_deadline)
    waiting = [each for each in pids if each not in dumps]
    dumps.update(_faulthandler_dumps(waiting, stack_dir, start + timeout))
    processes, ended = _processes(pids, dumps, states, commands)
    methods = {process.pid: process.method for process in processes}
    notes = _refusal_notes(refused, methods) + python_only
    if path is None:
        notes.insert(0, f"{_py_spy_absence(py_spy)}: {_fallbacks(methods, pids)}")
    if more:
        notes.append(f"more than {MAX_PROCESSES} processes: only the first {len(pids)} dumped")
    return RankStacks(rank, host, taken_at, tuple(processes), tuple(notes + ended))


def _processes(
    pids: list[int],
    dumps: Mapping[int, _Dump],
    states: Mapping[int, str],
    commands: Mapping[int, str],
) -> tuple[list[ProcessStacks], list[str]]:
    """Each process's stacks (from /proc where no dump came), and notes on those that ended."""
    processes, ended = [], []
    for pid in pids:
        dump = dumps.get(pid) or _proc_dump(pid, commands[pid], states[pid])
        if dump is None:
            ended.append(f"pid {pid} ({commands[pid]}): ended while its stacks were taken")
        else:
            processes.append(
                ProcessStacks(
                    pid, commands[pid], dump.method, dump.threads, state=states[pid], text=dump.text
                )
            )
    return processes, ended


# ----------------------------------------------------------------------------- the process tree
def process_tree(pid: int, limit: int = MAX_PROCESSES) -> tuple[list[int], bool]:
    """`pid` and its descendants, breadth first, at most `limit`; and whether there were more."""
    found: list[int] = []
    queue = [pid]
    while queue and len(found) < limit:
        each = queue.pop(0)
        if not Path(f"/proc/{each}").exists():
            continue
        found.append(each)
        queue.extend(child for child in _children(each) if child not in found)
    return found, any(Path(f"/proc/{each}").exists() for each in queue)


def _children(pid: int) -> list[int]:
    """Children of every thread of `pid` (a thread's children are listed under that thread)."""
    children: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            children.extend(int(child) for child in (task / "children").read_text().split())
    except FileNotFoundError:
        return _children_by_scan(pid)
    except (OSError, ValueError):
        pass  # ended meanwhile: what was found so far
    return children


def _children_by_scan(pid: int) -> list[int]:
    """Kernels without /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN): scan every process."""
    import psutil  # only here: the common path needs no psutil import

    try:
        return [child.pid for child in psutil.Process(pid).children()]
    except psutil.Error:
        return []


def proc_state(pid: int) -> str:
    """'S (sleeping) in futex_wait_queue': /proc's state of `pid` and where in the kernel it
    waits; "" when it is gone."""
    state = _status_field(pid, "State")
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text().strip()
    except OSError:
        wchan = ""
    return f"{state} in {wchan}" if state and wchan not in ("", "0") else state


def _alive(pid: int) -> bool:
    """Whether `pid` still runs: not gone, and not a zombie waiting for its parent."""
    state = _status_field(pid, "State")
    return bool(state) and not state.startswith(("Z", "X"))


def _status_field(pid: int, name: str) -> str:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key == name:
                return value.strip()
    except OSError:
        pass
    return ""


def _command(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        argv = []
    argv = argv[:-1] if argv and argv[-1] == "" else argv
    return shlex.join(argv) if argv else f"[{process_name(pid) or pid}]"


# ----------------------------------------------------------------------------------------- py-spy
def start_py_spy(argv: list[str], stdout: int) -> "subprocess.Popen[str]":
    """py-spy with no stdin and its stderr kept (why it failed, in its words)."""
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )


def _py_spy_dumps(
    path: str, pids: list[int], commands: Mapping[int, str], deadline: float
) -> tuple[dict[int, _Dump], dict[int, str], list[str]]:
    """py-spy on every process at once (one py-spy each: `--subprocesses` gives up on the whole
    tree at its first process without Python); each failure with --native retried without it.

    The stacks, why py-spy gave none (by PID), and notes on stacks without native frames."""
    dumps: dict[int, _Dump] = {}
    refused = _run_py_spy(path, pids, commands, deadline, native=True, dumps=dumps)
    retry = {pid: reason for pid, reason in refused.items() if _worth_retrying(reason)}
    if not retry:
        return dumps, refused, []
    refused.update(_run_py_spy(path, list(retry), commands, deadline, native=False, dumps=dumps))
    python_only: dict[str, list[int]] = {}
    for pid in dumps.keys() & retry.keys():
        del refused[pid]
        python_only.setdefault(retry[pid], []).append(pid)
    notes = [
        f"py-spy --native failed for {_pids(sorted(each))} ({reason}): Python frames only"
        for reason, each in python_only.items()
    ]
    return dumps, refused, notes


def _worth_retrying(reason: str) -> bool:
    """Without --native py-spy may still read a process that native unwinding failed on, not
    one it may not read at all, one without Python, one that is gone or a py-spy that hangs."""
    return not any(
        word in reason for word in ("Permission", _NOT_PYTHON, "ended", NO_ANSWER, "cannot run")
    )


def _run_py_spy(
    path: str,
    pids: list[int],
    commands: Mapping[int, str],
    deadline: float,
    native: bool,
    dumps: dict[int, _Dump],
) -> dict[int, str]:
    """Runs one py-spy per process, concurrently; puts the stacks in `dumps`, returns failures."""
    running: dict[int, subprocess.Popen[str]] = {}
    refused: dict[int, str] = {}
    for pid in pids:
        argv = [path, "dump", "--pid", str(pid), "--json", *(["--native"] if native else [])]
        try:
            running[pid] = start_py_spy(argv, subprocess.PIPE)
        except OSError as error:
            refused[pid] = f"cannot run {path}: {error.strerror or error}"
    for pid, process in running.items():
        outcome = _py_spy_outcome(pid, process, commands[pid], deadline, path)
        if isinstance(outcome, _Dump):
            dumps[pid] = outcome
        else:
            refused[pid] = outcome
    return refused


def _py_spy_outcome(
    pid: int, process: "subprocess.Popen[str]", command: str, deadline: float, path: str
) -> _Dump | str:
    """The stacks py-spy printed for `pid`, or why there are none."""
    try:
        out, err = process.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        process.kill()  # the kernel detaches a dying tracer: the target runs on
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.communicate(timeout=_REAP_TIMEOUT)
        return f"{NO_ANSWER} in {_PY_SPY_SHARE:.0%} of the time given ({path})"
    if process.returncode == 0:
        try:
            threads = parse_py_spy_json(out).get(pid, ())
        except (ValueError, KeyError, TypeError) as error:
            return f"unreadable output: {error}"
        if threads:
            return _Dump(PY_SPY, threads, _py_spy_text(pid, command, out, threads))
        return "no Python thread found"
    if not _alive(pid):
        return "ended"
    return _first_line(err) or f"exit status {process.returncode}"


def _first_line(text: str) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    line = line.removeprefix("Error: ")
    # py-spy's own advice ("Try running again with elevated permissions by going 'sudo ...'")
    # does not apply to a container: what it means here is that ptrace is not allowed.
    if line.startswith("Permission Denied"):
        return "Permission denied: ptrace not allowed"
    return line


def _py_spy_text(pid: int, command: str, out: str, threads: tuple[ThreadStack, ...]) -> str:
    """py-spy's own text rendering (`py-spy dump` without --json), from its JSON output."""
    ids = [
        item.get("os_thread_id") or hex(int(item.get("thread_id", 0)))
        for item in json.loads(out)
        if item.get("pid") == pid
    ]
    lines = [f"Process {pid}: {command}", ""]
    for thread_id, thread in zip(ids, threads, strict=False):
        named = "" if thread.name.startswith("Thread ") else f': "{thread.name}"'
        lines.append(f"Thread {thread_id} ({thread.state}){named}")
        lines.extend(f"    {frame.where()}" for frame in thread.frames)
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------- faulthandler
def _faulthandler_dumps(pids: list[int], stack_dir: Path, deadline: float) -> dict[int, _Dump]:
    """Signals every registered process of `pids` at once, then reads what each one wrote."""
    offsets: dict[int, tuple[Path, int]] = {}
    for pid in pids:
        registration = _registration(stack_dir, pid)
        if registration is None:
            continue
        path, signum = registration
        try:
            offset = path.stat().st_size
            os.kill(pid, signum)
        except OSError:  # gone (ProcessLookupError), or its file with it
            continue
        offsets[pid] = (path, offset)
    sizes = _wait_for_dumps(offsets, deadline)
    dumps: dict[int, _Dump] = {}
    for pid, (path, offset) in offsets.items():
        text = _read_from(path, offset, sizes.get(pid, offset))
        threads = parse_faulthandler(text)
        if threads:
            dumps[pid] = _Dump(FAULTHANDLER, threads, text)
    return dumps


def _registration(stack_dir: Path, pid: int) -> tuple[Path, int] | None:
    """The file and signal `pid` registered with faulthandler, if this very process did.

    A PID can be reused and a registered Python can exec another program: the signal, which
    kills a process that does not handle it, is sent only when the file's start time is the
    process's and the process handles the signal now."""
    path = stack_dir / f"{pid}.txt"
    try:
        with path.open("rb") as file:
            words = file.readline(512).decode(errors="replace").split()
    except OSError:
        return None
    fields = dict(word.partition("=")[::2] for word in words[1:])
    if words[:1] != [HEADER] or fields.get("pid") != str(pid):
        return None
    try:
        signum = int(fields.get("signal", ""))
    except ValueError:
        return None
    if fields.get("start") != str(start_ticks(pid)) or not _handles(pid, signum):
        return None
    return path, signum


def _handles(pid: int, signum: int) -> bool:
    """Whether `pid` has a handler for `signum` (/proc's SigCgt mask)."""
    try:
        return bool(int(_status_field(pid, "SigCgt"), 16) >> (signum - 1) & 1)
    except ValueError:
        return False


def _wait_for_dumps(offsets: Mapping[int, tuple[Path, int]], deadline: float) -> dict[int, int]:
    """Each file's size once its dump arrived and stopped growing, or at the deadline.

    The one poll here: a dump has no end marker, only a size that stops changing."""
    sizes = {pid: offset for pid, (_, offset) in offsets.items()}
    changed = dict.fromkeys(offsets, time.monotonic())
    waiting = set(offsets)
    while waiting and time.monotonic() < deadline:
        time.sleep(min(_POLL, max(0.0, deadline - time.monotonic())))
        now = time.monotonic()
        for pid in list(waiting):
            path, offset = offsets[pid]
            size = _size(path)
            if size != sizes[pid]:
                sizes[pid], changed[pid] = size, now
            elif size > offset and now - changed[pid] >= _DUMP_QUIET:
                waiting.discard(pid)
            elif size == offset and not _alive(pid):
                waiting.discard(pid)  # ended before it wrote
    return sizes


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_from(path: Path, offset: int, end: int) -> str:
    try:
        with path.open("rb") as file:
            file.seek(offset)
            return file.read(max(0, end - offset)).decode(errors="replace")
    except OSError:
        return ""


# ------------------------------------------------------------------------------------------ /proc
def _proc_dump(pid: int, command: str, state: str) -> _Dump | None:
    """What /proc says of `pid` (each thread's state); None when it is gone."""
    if not Path(f"/proc/{pid}").exists():
        return None
    lines = [f"Process {pid}: {command}", f"State: {state or 'unknown'}"]
    try:
        tids = sorted(int(task.name) for task in Path(f"/proc/{pid}/task").iterdir())
    except (OSError, ValueError):
        tids = []
    if len(tids) > 1:
        lines.extend(f"Thread {tid}: {proc_state(tid) or 'ended'}" for tid in tids[:64])
    return _Dump(PROC, (), "\n".join(lines) + "\n")


# ------------------------------------------------------------------------------------------ notes
def _py_spy_absence(py_spy: str | PySpy | None) -> str:
    if py_spy is None:
        return "py-spy: not used (disabled by the caller)"
    if os.environ.get(PY_SPY_VARIABLE) == "":
        return f"py-spy: not used ({PY_SPY_VARIABLE} is empty)"
    beside = Path(sys.executable).parent / "py-spy"
    return f"py-spy: not installed (looked for {beside} and on PATH)"


def _refusal_notes(refused: Mapping[int, str], methods: Mapping[int, str]) -> list[str]:
    """One note per reason py-spy gave: what it said, for which processes, what was used."""
    by_reason: dict[str, list[int]] = {}
    for pid, reason in refused.items():
        # A process without Python has nothing better than /proc: no note needed.
        if pid in methods and not (_NOT_PYTHON in reason and methods[pid] == PROC):
            by_reason.setdefault(reason, []).append(pid)
    return [
        f"py-spy not usable for {_pids(pids)} ({reason}): {_fallbacks(methods, pids)}"
        for reason, pids in by_reason.items()
    ]


def _fallbacks(methods: Mapping[int, str], pids: Iterable[int]) -> str:
    """'used faulthandler', or 'used faulthandler for pid 12, /proc for pids 11, 13'."""
    by_method: dict[str, list[int]] = {}
    for pid in pids:
        if pid in methods:
            by_method.setdefault(methods[pid], []).append(pid)
    names = {PY_SPY: "py-spy", FAULTHANDLER: "faulthandler", PROC: "/proc"}  # best first
    by_method = {method: by_method[method] for method in names if method in by_method}
    if not by_method:
        return "every process ended meanwhile"
    if len(by_method) == 1:
        return f"used {names[next(iter(by_method))]}"
    return "used " + ", ".join(f"{names[m]} for {_pids(p)}" for m, p in by_method.items())


def _pids(pids: list[int]) -> str:
    return f"pid {pids[0]}" if len(pids) == 1 else "pids " + ", ".join(map(str, pids))
