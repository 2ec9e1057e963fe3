"""How much of its time a rank waits for the others (the straggler watch, core/straggler.py):
its wrapper samples the main thread of the rank's process with py-spy (native frames) every
`interval` seconds and counts the samples that stand in a collective or a wait for a peer.

What counts as waiting is a frame of the communication libraries: Open MPI's collectives and
progress loop (`PMPI_*`, `ompi_coll*`, `mca_coll*`, `opal_progress`, `ompi_request*`), gloo
and c10d (`gloo::`, `c10d::`, `ProcessGroup*`, a `Work::wait`), Horovod (`horovod*`,
`WaitAndClear`, its Python `synchronize`), torch.distributed's Python code, NCCL, TensorFlow's
collectives and rendezvous. A
sample py-spy cannot take three times in a row (no ptrace rights, the process ended) stops the
sampling, said why; one that does not come in time (a busy host) is only skipped.
"""

import re
import threading
from collections.abc import Callable

from ringleader.core.stacks import ThreadStack
from ringleader.core.straggler import WaitCount
from ringleader.rank.stacks import NO_ANSWER, main_thread

WAITING = re.compile(
    r"^P?MPI_|ompi_coll|mca_coll|opal_progress|ompi_request|ompi_sync|"
    r"gloo::|c10d::|ProcessGroup|Work::wait|"
    r"horovod|WaitAndClear|wait_and_clear|^synchronize$|"
    r"nccl|Collective(?:Reduce|Gather|Bcast)|Rendezvous|RecvTensor"
)
_TORCH_DISTRIBUTED = re.compile(r"/torch/distributed/")
SAMPLE_TIMEOUT = 2.0  # one sample's bound: py-spy that hangs gives none
FAILURES_TO_STOP = 3


def waits(stack: ThreadStack) -> bool:
    """The thread stands in a collective, or waits for a peer (also any Python frame of
    torch.distributed: its collectives and barriers)."""
    return any(
        WAITING.search(frame.function) or _TORCH_DISTRIBUTED.search(frame.file)
        for frame in stack.frames
    )


class WaitSampler:
    """Samples a rank's main thread every `interval` s until stopped; `count` so far."""

    def __init__(
        self,
        rank: int,
        py_spy: str,
        interval: float,
        sample: Callable[[str, int, float], ThreadStack | str] = main_thread,
    ) -> None:
        self._rank = rank
        self._py_spy = py_spy
        self._interval = interval
        self._sample = sample
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._samples = 0
        self._waiting = 0
        self.problem: str | None = None  # why sampling stopped, when it did

    def start(self, pid: int) -> None:
        threading.Thread(target=self._run, args=(pid,), name="wait-sampler", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()

    def count(self) -> WaitCount:
        with self._lock:
            return WaitCount(self._rank, self._samples, self._waiting)

    def _run(self, pid: int) -> None:
        failed = 0  # samples in a row py-spy could not take
        while not self._stopped.wait(self._interval):
            taken = self._sample(self._py_spy, pid, SAMPLE_TIMEOUT)
            if isinstance(taken, str) and taken.startswith(NO_ANSWER):
                continue  # a busy host: this sample is lost, not the next ones
            if isinstance(taken, str):
                failed += 1
                # one failure may be another tracer at the same moment (the hang watch's
                # stacks): only FAILURES_TO_STOP in a row stop the sampling
                if failed >= FAILURES_TO_STOP and not self._stopped.is_set():
                    self.problem = taken
                    return
                continue
            failed = 0
            with self._lock:
                self._samples += 1
                self._waiting += waits(taken)
