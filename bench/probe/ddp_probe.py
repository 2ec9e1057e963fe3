"""Benchmark probe for DDP: prints when the rank's user code starts and ends (wall clock) around
examples/ddp_train.py, which it runs unchanged (copied next to this file by bench/ddp.py)."""

import os
import runpy
import sys
import time
from pathlib import Path

rank = os.environ.get("RANK", "?")
print(f"BENCH start {rank} {time.time():.6f}", flush=True)
script = Path(__file__).with_name("ddp_train.py")
leave = os._exit  # ddp_train.py ends with os._exit: say when, first


def _exit_after_the_end_mark(code: int) -> None:
    print(f"BENCH end {rank} {time.time():.6f}", flush=True)
    leave(code)


os._exit = _exit_after_the_end_mark
sys.argv = [str(script), *sys.argv[1:]]
try:
    runpy.run_path(str(script), run_name="__main__")
finally:
    print(f"BENCH end {rank} {time.time():.6f}", flush=True)
