"""Metric extraction cost: CPU used to scan 100,000 lines with 5 metric definitions.

At 100,000 lines/s, the CPU seconds spent per 100,000 lines is the fraction of one core that
extraction adds. Lines are a realistic mix: 1 in 20 carries metrics.

Usage: .venv/bin/python bench/metrics_cpu.py [--lines 100000] [--repeat 5]
"""

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from ringleader.config.metric_definitions import parse_definitions
from ringleader.output.metrics import MetricRecorder

DEFINITIONS = [
    {"Name": "train:loss", "Regex": r"loss=([0-9.]+)"},
    {"Name": "train:accuracy", "Regex": r"acc=([0-9.]+)"},
    {"Name": "train:throughput", "Regex": r"throughput=([0-9.]+) samples/s"},
    {"Name": "validation:loss", "Regex": r"val_loss: ([0-9.]+)"},
    {"Name": "lr", "Regex": r"lr=([0-9.e-]+)"},
]


def make_lines(count: int) -> list[str]:
    rng = random.Random(7)
    lines = []
    for index in range(count):
        if index % 20 == 0:
            lines.append(
                f"step {index} loss={rng.random():.4f} acc={rng.random():.3f} "
                f"throughput={rng.uniform(100, 900):.1f} samples/s lr=1e-3"
            )
        else:
            lines.append(f"batch {index} " + "data " * rng.randint(2, 30))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    definitions = parse_definitions("bench", DEFINITIONS)
    lines = make_lines(args.lines)
    best = float("inf")
    with tempfile.TemporaryDirectory() as workdir:
        for attempt in range(args.repeat):
            recorder = MetricRecorder(definitions, Path(workdir) / f"metrics-{attempt}.jsonl")
            started = time.process_time()
            for line in lines:
                recorder.observe(line, 0, "algo-1")
            recorder.close()
            best = min(best, time.process_time() - started)
    share = best / (args.lines / 100_000)
    print(
        f"{args.lines} lines, {len(definitions)} definitions: {best:.3f} CPU s (best of "
        f"{args.repeat})"
    )
    print(f"added CPU at 100,000 lines/s: {share:.1%} of one core (target under 10%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
