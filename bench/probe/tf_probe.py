"""Benchmark probe for TensorFlow: prints when the task's user code starts and ends (wall clock)
around an example script ($TF_PROBE_SCRIPT, copied next to this file by bench/tensorflow.py),
which it runs unchanged with this probe's arguments."""

import json
import os
import runpy
import sys
import time
from pathlib import Path

task = json.loads(os.environ["TF_CONFIG"])["task"]
role = f"{task['type']}:{task['index']}"
print(f"BENCH start {role} {time.time():.6f}", flush=True)
script = Path(__file__).with_name(os.environ["TF_PROBE_SCRIPT"])
sys.argv = [str(script), *sys.argv[1:]]
try:
    runpy.run_path(str(script), run_name="__main__")
finally:
    print(f"BENCH end {role} {time.time():.6f}", flush=True)
