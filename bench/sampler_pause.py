"""How long the straggler watch's py-spy pauses a training process, per sample and per period.

The wait sampler (src/ringleader/rank/waits.py) records a rank's threads with `py-spy record
--native --idle --threads` for a period's first 10 s. Each sample stops every thread of the
rank while py-spy unwinds them; a new py-spy's first native sample also reads the rank's
libraries' symbols with the rank stopped. This measures both, in the frameworks' own images:

  target   a training loop in a thread (TensorFlow: a Keras model's train_on_batch, in
           ringleader:tensorflow; PyTorch: a small model's forward and backward, in
           ringleader:horovod), and a ticker thread that sleeps 1 ms at a time and notes every
           gap over GAP_MS: a stop of the process shows as one gap
  rounds   for each round, in alternating order, a 10 s window with no py-spy and one with
           py-spy at each --rates; per window: the training steps done, the gaps, the samples

Per setting, the medians over rounds: the training steps of a window against no py-spy, the
longest gap (py-spy's first sample: the symbols), the time stopped in the window (the gaps' sum
beyond the ticker's own 1 ms, less what the window with no py-spy had), and per later sample
(the time stopped without the longest gap).

Usage: .venv/bin/python bench/sampler_pause.py [--frameworks tensorflow,torch] [--rounds 3]
       [--rates 1,3,5,10]
"""

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
IMAGES = {"tensorflow": "ringleader:tensorflow", "torch": "ringleader:horovod"}
WINDOW = 10.0  # seconds: the sampler's recording of a period (RECORD_SECONDS)
TICK = 0.001
GAP_MS = 5.0
Window = dict[str, Any]  # one window's steps, gaps, samples and seconds, as JSON carries them


# ----------------------------------------------------------------------- inside the container
def _train_forever(framework: str, steps: list[float]) -> None:
    """Steps of a small model until the process ends; each step's end time in `steps`."""
    if framework == "tensorflow":
        import numpy as np
        import tensorflow as tf

        model = tf.keras.Sequential(
            [tf.keras.Input((256,)), tf.keras.layers.Dense(512), tf.keras.layers.Dense(10)]
        )
        model.compile(optimizer="sgd", loss="mse")
        x, y = np.random.rand(64, 256), np.random.rand(64, 10)
        while True:
            model.train_on_batch(x, y)
            steps.append(time.monotonic())
    import torch

    layers = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.Linear(512, 10))
    optimizer = torch.optim.SGD(layers.parameters(), lr=0.01)
    x, y = torch.rand(64, 256), torch.rand(64, 10)
    while True:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(layers(x), y).backward()
        optimizer.step()
        steps.append(time.monotonic())


def _tick(gaps: list[tuple[float, float]]) -> None:
    while True:
        before = time.monotonic()
        time.sleep(TICK)
        took = time.monotonic() - before
        if took * 1000 > GAP_MS:
            gaps.append((before, took))


def target(framework: str) -> None:
    """The process py-spy records: on each line of stdin `from to`, the steps and gaps within."""
    steps: list[float] = []
    gaps: list[tuple[float, float]] = []
    threading.Thread(target=_train_forever, args=(framework, steps), daemon=True).start()
    threading.Thread(target=_tick, args=(gaps,), daemon=True).start()
    while len(steps) < 20:
        time.sleep(0.1)  # the model's first steps (graph building) are behind us
    print("ready", flush=True)
    for line in sys.stdin:
        begin, end = (float(word) for word in line.split())
        within = [took for at, took in gaps if begin <= at < end]
        done = sum(1 for at in steps if begin <= at < end)
        print(json.dumps({"steps": done, "gaps": within}), flush=True)


def _py_spy(pid: int, rate: int, output: Path) -> int:
    """One sampler period: py-spy as the wait sampler runs it; the samples it took."""
    argv = ["py-spy", "record", "--pid", str(pid), "--native", "--idle", "--threads"]
    argv += ["--full-filenames", "--nolineno", "--rate", str(rate), "--duration", "10"]
    argv += ["--format", "raw", "--output", str(output)]
    subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=True, timeout=60)
    main = f"thread ({pid})"
    return sum(
        int(line.rpartition(" ")[2])
        for line in output.read_text().splitlines()
        if line.startswith(main)
    )


def inside(framework: str, rates: list[int], rounds: int) -> None:
    process = subprocess.Popen(
        [sys.executable, __file__, "--target", framework],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    settings: list[int] = [0, *rates]
    results: dict[int, list[Window]] = {rate: [] for rate in settings}
    for number in range(rounds):
        order = settings if number % 2 == 0 else settings[::-1]
        for rate in order:
            begin = time.monotonic()
            samples = 0
            if rate:
                samples = _py_spy(process.pid, rate, Path("/tmp/samples.txt"))
            else:
                time.sleep(WINDOW)  # the window with no py-spy: nothing to wait for
            end = time.monotonic()
            process.stdin.write(f"{begin} {end}\n")
            process.stdin.flush()
            window = json.loads(process.stdout.readline())
            window.update(samples=samples, seconds=end - begin)
            results[rate].append(window)
    process.kill()
    print(json.dumps(results))


# ------------------------------------------------------------------------------- on the host
def _stopped(window: Window) -> float:
    """Seconds the ticker saw the process stopped: its gaps beyond its own sleep."""
    return sum(took - TICK for took in window["gaps"])


def _speed(window: Window) -> float:
    return float(window["steps"]) / float(window["seconds"])


def report(framework: str, results: dict[str, list[Window]]) -> None:
    idle = results["0"]
    steps_idle = statistics.median(_speed(w) for w in idle)
    stopped_idle = statistics.median(_stopped(w) for w in idle)
    print(f"\n{framework}: {len(idle)} rounds; no py-spy: {steps_idle:.1f} steps/s, "
          f"ticker gaps {stopped_idle * 1000:.0f} ms a window")  # fmt: skip
    print("| samples/s | samples | steps/s | vs none | first gap | stopped | per later sample |")
    print("|---|---|---|---|---|---|---|")
    for rate, windows in results.items():
        if rate == "0":
            continue
        rates = [_speed(w) for w in windows]
        first = statistics.median(max(w["gaps"], default=0.0) for w in windows)
        stopped = statistics.median(_stopped(w) for w in windows) - stopped_idle
        samples = statistics.median(int(w["samples"]) for w in windows)
        speed = statistics.median(rates)
        print(
            f"| {rate} | {samples:.0f} | {speed:.1f} | {speed / steps_idle - 1:+.1%} | "
            f"{float(first) * 1000:.0f} ms | {stopped * 1000:.0f} ms | "
            f"{(stopped - float(first)) * 1000 / max(samples - 1, 1):.1f} ms |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default="tensorflow,torch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rates", default="1,3,5,10")
    parser.add_argument("--target", help=argparse.SUPPRESS)
    parser.add_argument("--inside", help=argparse.SUPPRESS)
    args = parser.parse_args()
    rates = [int(rate) for rate in args.rates.split(",")]
    if args.target:
        target(args.target)
        return 0
    if args.inside:
        inside(args.inside, rates, args.rounds)
        return 0
    for framework in args.frameworks.split(","):
        argv = ["docker", "run", "--rm", "--cap-add", "SYS_PTRACE", "--cpus", "2"]
        argv += ["-v", f"{Path(__file__).resolve()}:/bench/sampler_pause.py:ro"]
        argv += ["--entrypoint", "python", IMAGES[framework], "/bench/sampler_pause.py"]
        argv += ["--inside", framework, "--rounds", str(args.rounds), "--rates", args.rates]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(done.stderr[-2000:], file=sys.stderr)
            return 1
        report(framework, json.loads(done.stdout.strip().splitlines()[-1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
