"""What a rank's stacks look like once taken: plain data, and how it travels as JSON.

The rank wrapper takes them (ringleader.rank.stacks: py-spy, else faulthandler, else /proc),
the hosts ship them to the leader, and the hang verdict (ringleader.core.hang) reads them.
Frames are innermost first, as py-spy and faulthandler print them.
"""

import json
import re
from dataclasses import dataclass
from typing import Any

PY_SPY = "py-spy"
FAULTHANDLER = "faulthandler"
PROC = "proc"  # not a Python process, or neither way worked: what /proc says (state, wchan)


@dataclass(frozen=True)
class Frame:
    function: str
    file: str  # as the tool gave it: a path, or a library's name for native frames
    line: int | None = None
    native: bool = False

    def where(self) -> str:
        """`function (file:line)` with the file's base name, as py-spy prints a frame."""
        name = self.file.rsplit("/", 1)[-1]
        return f"{self.function} ({name}:{self.line})" if self.line else f"{self.function} ({name})"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"function": self.function, "file": self.file, "line": self.line}
        if self.native:
            data["native"] = True
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Frame":
        line = data.get("line")
        return cls(
            str(data["function"]),
            str(data["file"]),
            int(line) if line is not None else None,
            bool(data.get("native", False)),
        )


@dataclass(frozen=True)
class ThreadStack:
    name: str  # "MainThread", or the thread's id as the tool printed it
    frames: tuple[Frame, ...]  # innermost first
    main: bool = False  # the process's main thread
    state: str = ""  # py-spy's "idle"/"active", where known

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "main": self.main,
            "state": self.state,
            "frames": [frame.to_json() for frame in self.frames],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ThreadStack":
        return cls(
            str(data["name"]),
            tuple(Frame.from_json(frame) for frame in data["frames"]),
            bool(data.get("main", False)),
            str(data.get("state", "")),
        )


@dataclass(frozen=True)
class ProcessStacks:
    """One process of a rank (its user process first, then what that started)."""

    pid: int
    command: str
    method: str  # PY_SPY, FAULTHANDLER or PROC
    threads: tuple[ThreadStack, ...] = ()
    state: str = ""  # /proc: "S (sleeping) in futex_wait_queue", for every method where known
    text: str = ""  # the dump as the tool printed it

    @property
    def main_thread(self) -> ThreadStack | None:
        return next((thread for thread in self.threads if thread.main), None) or (
            self.threads[-1] if self.threads else None
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "command": self.command,
            "method": self.method,
            "state": self.state,
            "threads": [thread.to_json() for thread in self.threads],
            "text": self.text,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ProcessStacks":
        return cls(
            int(data["pid"]),
            str(data["command"]),
            str(data["method"]),
            tuple(ThreadStack.from_json(thread) for thread in data.get("threads", ())),
            str(data.get("state", "")),
            str(data.get("text", "")),
        )


@dataclass(frozen=True)
class RankStacks:
    """Every stack of one rank, taken at once by its wrapper."""

    rank: int
    host: str
    taken_at: float  # time.time() on the rank's host
    processes: tuple[ProcessStacks, ...] = ()  # the user process first
    # Why a better method was not used ("py-spy: not installed", "py-spy: Operation not
    # permitted"), and anything else the reader should know.
    notes: tuple[str, ...] = ()
    # Evidence from the rank's own output: Horovod's stall inspector, a flight-recorder dump.
    evidence: tuple[str, ...] = ()

    @property
    def method(self) -> str:
        """How the user process's stack was taken ("" when nothing could be)."""
        return self.processes[0].method if self.processes else ""

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "host": self.host,
            "taken_at": self.taken_at,
            "processes": [process.to_json() for process in self.processes],
            "notes": list(self.notes),
            "evidence": list(self.evidence),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RankStacks":
        return cls(
            int(data["rank"]),
            str(data["host"]),
            float(data["taken_at"]),
            tuple(ProcessStacks.from_json(process) for process in data.get("processes", ())),
            tuple(str(note) for note in data.get("notes", ())),
            tuple(str(line) for line in data.get("evidence", ())),
        )


def parse_py_spy_json(text: str) -> dict[int, tuple[ThreadStack, ...]]:
    """`py-spy dump --json` output: each process's threads (its main thread marked), by PID.

    Native frames (`--native`) have a library for a module and no line. ValueError when the
    text is not py-spy's JSON."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not py-spy's JSON output: {error}") from None
    if not isinstance(data, list):
        raise ValueError("not py-spy's JSON output: expected a list of threads")
    threads: dict[int, list[ThreadStack]] = {}
    for item in data:
        frames = tuple(
            Frame(
                str(frame["name"]),
                str(frame.get("module") or frame["filename"]),
                int(frame["line"]) or None,
                # py-spy gives a native frame it could not name no module: an address, "?"
                native=bool(frame.get("module")) or frame["filename"] == "?",
            )
            for frame in item["frames"]
        )
        pid = int(item["pid"])
        main = item.get("os_thread_id") == pid or item.get("thread_name") == "MainThread"
        name = item.get("thread_name") or f"Thread {item.get('os_thread_id') or item['thread_id']}"
        state = "active" if item.get("active") else "idle"
        threads.setdefault(pid, []).append(ThreadStack(str(name), frames, main, state))
    return {pid: tuple(stacks) for pid, stacks in threads.items()}


_FAULTHANDLER_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)")
_FAULTHANDLER_FRAME = re.compile(r'^\s+File "(.*)", line (\d+|\?+) in (.*)$')


def parse_faulthandler(text: str) -> tuple[ThreadStack, ...]:
    """One `faulthandler.dump_traceback(all_threads=True)`: its threads, newest first as
    CPython lists them, so the last one is the main thread (the oldest)."""
    threads: list[tuple[str, list[Frame]]] = []
    for line in text.splitlines():
        if match := _FAULTHANDLER_THREAD.match(line):
            threads.append((f"Thread {match[2]}", []))
        elif (match := _FAULTHANDLER_FRAME.match(line)) and threads:
            number = int(match[2]) if match[2].isdigit() else None
            threads[-1][1].append(Frame(match[3], match[1], number))
        elif line.startswith("Stack (most recent call first):"):  # one thread, no id
            threads.append(("Thread", []))
    last = len(threads) - 1
    return tuple(
        ThreadStack(name, tuple(frames), main=index == last)
        for index, (name, frames) in enumerate(threads)
    )
