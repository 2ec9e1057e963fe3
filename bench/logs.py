"""Log streaming benchmark: ringleader's line-framed output vs raw `mpirun --tag-output`.

6 ranks on 3 fake hosts each print --lines lines of mixed length (1 in --long-every is 4-9 KB).
Both runs use the same image, hosts and sink (the leader container's stdout through
`docker logs`). Printed side by side: lines received whole, fragments of torn lines, lines
lost (never received whole), and throughput from the first job line to the last one received,
counted in what was delivered.

Usage: .venv/bin/python bench/logs.py [--lines 200000] [--long-every 100]
"""

import argparse
import io
import re
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import docker
from startup import bare_env

from ringleader.tools.local.plan import LocalJobSpec
from ringleader.tools.local.run import LocalJob

PROBES = Path(__file__).resolve().parent / "probe"
RANKS = 6
# ringleader's tag, or mpirun's --tag-output tag, then the job's own line
LINE = re.compile(rb"(?:\[algo-\d rank (\d+)\] |\[1,(\d+)\]<stdout>:)R(\d+) L(\d+) x* END(\d+)$")


class TimedSink(io.TextIOBase):
    """Keeps everything written and when the first and last job lines arrived."""

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.first: float | None = None
        self.last = 0.0
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self.chunks.append(text)
            if " END" in text:
                now = time.monotonic()
                self.first = self.first or now
                self.last = now
        return len(text)


@dataclass(frozen=True)
class Result:
    whole: int
    torn: int
    lost: int
    seconds: float
    megabytes: float


def measure(raw: bool, lines: int, long_every: int, workdir: Path) -> Result:
    args = ("--lines", str(lines), "--long-every", str(long_every))
    spec = LocalJobSpec(
        hosts=3,
        processes_per_host=2,
        source_dir=PROBES,
        entry_point="print_lines.py",
        hyperparameters={} if raw else {"lines": str(lines), "long-every": str(long_every)},
        output_dir=workdir,
        command=("print_lines.py", *args) if raw else ("train",),
        entrypoint=("/bin/sh", "/opt/ml/code/bare_mpirun.sh") if raw else None,
        env=bare_env("--tag-output", 2) if raw else {},
    )
    sink = TimedSink()
    LocalJob(spec, sink, docker.from_env()).run()
    text = "".join(sink.chunks).encode()
    seen: dict[int, set[int]] = {rank: set() for rank in range(RANKS)}
    whole = torn = 0
    for line in text.split(b"\n"):
        if b" END" not in line and b"] R" not in line and b">:R" not in line:
            continue
        match = LINE.match(line.split(b" | ", 1)[-1])
        rank = int(match.group(1) or match.group(2)) if match else -1
        if match and int(match.group(3)) == rank and match.group(4) == match.group(5):
            seen[rank].add(int(match.group(4)))
            whole += 1
        else:
            torn += 1  # a fragment of a line cut apart, or lines run into each other
    lost = RANKS * lines - sum(len(indexes) for indexes in seen.values())
    seconds = sink.last - (sink.first or sink.last)
    return Result(whole, torn, lost, seconds, len(text) / 1e6)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--long-every", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rl-logs-") as workdir:
        results = {}
        for name, raw in (("ringleader", False), ("mpirun --tag-output", True)):
            print(f"... {name}: {RANKS} ranks x {args.lines} lines", file=sys.stderr, flush=True)
            results[name] = measure(raw, args.lines, args.long_every, Path(workdir))
    print(
        f"{'runner':<20} {'whole':>9} {'torn':>7} {'lost':>7} {'seconds':>8} {'MB':>7} "
        f"{'lines/s':>9}"
    )
    for name, result in results.items():
        rate = result.whole / result.seconds if result.seconds else 0.0
        print(
            f"{name:<20} {result.whole:>9} {result.torn:>7} {result.lost:>7} "
            f"{result.seconds:>8.1f} {result.megabytes:>7.1f} {rate:>9.0f}"
        )
    ours, raw = results["ringleader"], results["mpirun --tag-output"]
    if ours.seconds and raw.seconds:
        # Delivered, not offered: raw mpirun drops and tears lines, which must not count.
        lines_ratio = (ours.whole / ours.seconds) / (raw.whole / raw.seconds)
        bytes_ratio = (ours.megabytes / ours.seconds) / (raw.megabytes / raw.seconds)
        print(
            f"throughput ringleader / raw mpirun: {lines_ratio:.0%} in whole lines delivered "
            f"per second, {bytes_ratio:.0%} in MB per second"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
