"""How much of its time a rank waits for the others (the straggler watch, core/straggler.py):
its wrapper records the main thread of the rank's process with py-spy (`py-spy record`, native
frames, `rate` samples a second at random intervals py-spy draws so as not to beat with the
job's steps) in periods of `period` seconds, and counts the samples that stand in a collective
or a wait for a peer. Of a period longer than RECORD_SECONDS only its first RECORD_SECONDS are
recorded: each sample pauses the rank (every thread, native frames). With whole periods, a
TensorFlow job's collectives were aborted on lost coordination heartbeats 14 s into a period
(ci32), which had not happened with the first 10 s; the cause is not proven.

One py-spy per period, not one per sample: a py-spy's first native sample of a PyTorch rank
reads libtorch's symbols with the rank paused (about 0.3 s); its later samples pause it for
milliseconds. Every rank's periods start at the same multiples of `period` on the wall clock
(NTP keeps hosts within milliseconds): in a synchronous job a pause of one rank holds back all,
and pauses at the same moment cost the job one pause, not one per rank.

What counts as waiting is a frame of the communication libraries: Open MPI's collectives and
progress loop (`PMPI_*`, `ompi_coll*`, `mca_coll*`, `opal_progress`, `ompi_request*`), gloo
and c10d (`gloo::`, `c10d::`, `ProcessGroup*`, a `Work::wait`), Horovod (`horovod*`,
`WaitAndClear`, its Python `synchronize`), torch.distributed's Python code, NCCL, TensorFlow's
collectives and rendezvous. Three periods in a row that py-spy cannot record (no ptrace rights,
the process ended) stop the sampling, said why to `on_problem`.
"""

import contextlib
import math
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from ringleader.core.stacks import Frame
from ringleader.core.straggler import WaitCount
from ringleader.rank.stacks import start_py_spy

WAITING = re.compile(
    r"^P?MPI_|ompi_coll|mca_coll|opal_progress|ompi_request|ompi_sync|"
    r"gloo::|c10d::|ProcessGroup|Work::wait|"
    r"horovod|WaitAndClear|wait_and_clear|^synchronize$|"
    r"nccl|Collective(?:Reduce|Gather|Bcast)|Rendezvous|RecvTensor"
)
_TORCH_DISTRIBUTED = re.compile(r"/torch/distributed/")
_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")
RECORD_SECONDS = 10
FINISH_TIMEOUT = 5.0  # for a py-spy asked to stop to write its samples and exit
FAILURES_TO_STOP = 3


def waits(frames: Iterable[Frame]) -> bool:
    """The thread stands in a collective, or waits for a peer (also any Python frame of
    torch.distributed: its collectives and barriers)."""
    return any(
        WAITING.search(frame.function) or _TORCH_DISTRIBUTED.search(frame.file) for frame in frames
    )


def tally(raw: str, pid: int) -> tuple[int, int]:
    """The samples of process `pid`'s main thread (its thread id is the PID) in py-spy's raw
    output (`--threads`: `thread (TID): NAME;frame;frame COUNT`, outermost first), and how many
    of them wait."""
    samples = waiting = 0
    main = f"thread ({pid})"
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        thread, *frames = stack.split(";")
        if not count.isdigit() or not (thread == main or thread.startswith(main + ":")):
            continue
        samples += int(count)
        if waits(_frame(frame) for frame in frames):
            waiting += int(count)
    return samples, waiting


def _frame(text: str) -> Frame:
    found = _FRAME.match(text)
    return Frame(found["function"], found["file"]) if found else Frame(text, "")


def next_start(now: float, period: float) -> float:
    """The first multiple of `period` (wall clock) after `now`: where every rank's period starts."""
    return (math.floor(now / period) + 1) * period


class _Recording:
    """One py-spy recording a period of the rank into `output`."""

    def __init__(self, argv: list[str], output: Path) -> None:
        self.output = output
        self.process = start_py_spy(argv, subprocess.DEVNULL)

    def finish(self) -> tuple[str, str | None]:
        """Asks py-spy to write what it has (SIGINT) and waits for it: its output, and why
        there is none when there is none."""
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGINT)
        try:
            _, err = self.process.communicate(timeout=FINISH_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.abandon()
            return "", f"py-spy did not stop within {FINISH_TIMEOUT:g} s"
        try:
            raw = self.output.read_text(errors="replace")
        except OSError:
            raw = ""
        finally:
            with contextlib.suppress(OSError):
                self.output.unlink()
        if self.process.returncode == 0:
            return raw, None
        return raw, _reason(err) or f"py-spy's exit status {self.process.returncode}"

    def abandon(self) -> None:
        """Ends py-spy without its samples (the kernel detaches a dying tracer: the rank runs
        on)."""
        self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.communicate(timeout=FINISH_TIMEOUT)
        with contextlib.suppress(OSError):
            self.output.unlink()


def _reason(err: str) -> str:
    lines = [line.strip() for line in err.splitlines() if line.strip()]
    said = next((line for line in lines if line.startswith("Error:")), lines[0] if lines else "")
    return said.removeprefix("Error:").strip()


class WaitSampler:
    """Records a rank's main thread period after period until stopped; `count` so far (the
    periods recorded to their end)."""

    def __init__(
        self,
        rank: int,
        py_spy: str,
        period: float,
        rate: int,
        directory: Path,
        on_problem: Callable[[str], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._rank = rank
        self._py_spy = py_spy
        self._period = period
        self._rate = rate
        self._directory = directory
        self._on_problem = on_problem
        self._clock = clock
        self._stopped = threading.Event()
        self._counted = threading.Condition()
        self._samples = 0
        self._waiting = 0
        self._thread: threading.Thread | None = None
        self._live: list[_Recording] = []  # py-spy processes not yet ended

    def start(self, pid: int) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(pid,), name="wait-sampler", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Ends the recordings under way without their samples, and waits for that (bounded)."""
        self._stopped.set()
        with self._counted:
            live = list(self._live)
        for recording in live:  # what the sampler's thread waits for ends now
            with contextlib.suppress(ProcessLookupError):
                recording.process.kill()
        if self._thread is not None:
            self._thread.join(2 * FINISH_TIMEOUT)

    def count(self) -> WaitCount:
        with self._counted:
            return WaitCount(self._rank, self._samples, self._waiting)

    def wait_for_samples(self, samples: int, timeout: float) -> bool:
        """Whether `samples` samples are counted within `timeout` s."""
        with self._counted:
            return self._counted.wait_for(lambda: self._samples >= samples, timeout)

    def _run(self, pid: int) -> None:
        with contextlib.suppress(OSError):  # else py-spy says why it cannot write there
            self._directory.mkdir(parents=True, exist_ok=True)
        start = next_start(self._clock(), self._period)
        if self._stopped.wait(start - self._clock()):
            return
        failed = 0  # periods in a row py-spy could not record
        recording = self._record(pid, 0)
        number = 0
        while True:
            number += 1
            if self._stopped.wait(max(0.0, start + number * self._period - self._clock())):
                self._abandon(recording)
                return
            # the next period's py-spy starts on time, before the last one has stopped
            following = self._record(pid, number)
            raw, problem = self._finish(recording)
            if self._stopped.is_set():  # stop() ended the recordings: nothing more to count
                self._abandon(following)
                return
            self._add(*tally(raw, pid))
            failed = failed + 1 if problem else 0
            if problem and failed >= FAILURES_TO_STOP:
                self._abandon(following)
                self._on_problem(problem)
                return
            recording = following

    def _record(self, pid: int, number: int) -> "_Recording | str":
        """py-spy recording period `number` (two files in turn: periods overlap as one ends),
        or why it could not start."""
        output = self._directory / f"waits-{number % 2}.txt"
        argv = [
            self._py_spy,
            "record",
            "--pid",
            str(pid),
            "--native",
            "--idle",
            "--threads",
            "--full-filenames",
            "--nolineno",
            "--rate",
            str(self._rate),
            *(["--duration", str(RECORD_SECONDS)] if self._period > RECORD_SECONDS else []),
            "--format",
            "raw",
            "--output",
            str(output),
        ]
        try:
            recording = _Recording(argv, output)
        except OSError as error:
            return f"cannot run {self._py_spy}: {error.strerror or error}"
        with self._counted:
            self._live.append(recording)
        return recording

    def _finish(self, recording: "_Recording | str") -> tuple[str, str | None]:
        """Its samples and why there are none (`recording` is that reason when py-spy did not
        start)."""
        if isinstance(recording, str):
            return "", recording
        found = recording.finish()
        with self._counted:
            self._live.remove(recording)
        return found

    def _abandon(self, recording: "_Recording | str") -> None:
        if isinstance(recording, _Recording):
            recording.abandon()
            with self._counted:
                self._live.remove(recording)

    def _add(self, samples: int, waiting: int) -> None:
        with self._counted:
            self._samples += samples
            self._waiting += waiting
            self._counted.notify_all()
