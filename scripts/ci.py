#!/usr/bin/env python3
"""`make test`: set up, build every image and run the whole suite, each step as soon as what it
needs is ready, then print how long each step took and every pytest run's closing line.

    python3 scripts/ci.py              everything (what `.ci/run` runs)
    python3 scripts/ci.py --list       the steps, what each needs, its bound
    python3 scripts/ci.py --only unit lint
                                       those steps and what they need

Steps run in parallel wherever one does not need the other: the Horovod compile stages start as
soon as the base image exists, the unit tests (under every Python) while images build, the
container tests once their images are there. A step's whole output goes to
build/ci/logs/STEP.log; the console gets a line when a step starts and ends, a line every
minute naming what is still running, and the log's tail when a step fails. A failed step skips
the steps that need it; the others go on, so one run shows every failure. Exit 0 only when every
step passed. Standard library only: this runs before any virtualenv exists.

Environment:
    CONTAINER_WORKERS=3   pytest-xdist workers for the container tests that may share the machine
    CI_STEP_TIMEOUT_SCALE=1
                          multiplies every step's bound (a slower machine)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "build" / "ci" / "logs"
VENV_BIN = ROOT / ".venv" / "bin"
SDK3_PYTHON = ROOT / "build" / "sdk3-venv" / "bin" / "python"
HEARTBEAT_SECONDS = 60.0
MINUTE = 60.0
FAILED_TAIL_LINES = 25  # repeated at the end for each failed step


@dataclass(frozen=True)
class Step:
    name: str
    command: tuple[str, ...]
    needs: tuple[str, ...] = ()
    timeout: float = 20 * MINUTE
    env: tuple[tuple[str, str], ...] = ()
    about: str = ""
    tests: bool = False  # its log holds pytest runs: their counts and slowest tests are reported
    after: tuple[str, ...] = ()  # steps that must have ended first, whether they passed or not


def pytest_command(*args: str) -> tuple[str, ...]:
    return (str(VENV_BIN / "pytest"), "-p", "no:cacheprovider", *args)


def horovod_steps(framework: str, image: str) -> list[Step]:
    """A Horovod image's wheelhouse, its compile stage (needs only the base image, so it runs
    beside ringleader:latest's build) and the image itself."""
    env = (("FRAMEWORK", framework),)
    script = "scripts/build-horovod.sh"
    return [
        Step(f"wheels-{image}", (script, "wheelhouse"), env=env, about="host pip download"),
        Step(
            f"compile-{image}",
            (script, "compile"),
            needs=("base", f"wheels-{image}"),
            timeout=30 * MINUTE,
            env=env,
            about="Horovod compiled in the image's compile stage",
        ),
        Step(
            image,
            (script, "build"),
            needs=("latest", f"compile-{image}"),
            env=env,
            about=f"ringleader:{image}",
        ),
    ]


def all_steps(container_workers: int) -> list[Step]:
    container_images = ("latest", "horovod", "mxnet", "tf-horovod", "tensorflow", "trixie", "slurm")
    return [
        # apt-get takes a lock: the host's Debian packages in two steps, Docker Engine first (the
        # images wait on it), then what only the tests need.
        Step("docker", ("scripts/setup.sh", "docker"), about="Docker Engine, started"),
        Step(
            "host-tools",
            ("scripts/setup.sh", "browser", "sshkeygen"),
            needs=("docker",),
            about="chromium, ssh-keygen",
        ),
        Step("wheelhouse", ("scripts/setup.sh", "wheelhouse"), about="ringleader's wheels"),
        # After the wheelhouse: both build ringleader from this tree (egg-info, build/).
        Step("venv", ("scripts/setup.sh", "venv"), needs=("wheelhouse",), about=".venv"),
        Step("sdk3-venv", ("scripts/setup.sh", "sdk3"), about="SageMaker SDK v3 venv"),
        Step("base", ("scripts/setup.sh", "base"), needs=("docker",)),
        Step(
            "latest",
            ("scripts/setup.sh", "build"),
            needs=("base", "wheelhouse"),
            about="ringleader:latest",
        ),
        *horovod_steps("pytorch", "horovod"),
        *horovod_steps("mxnet", "mxnet"),
        *horovod_steps("tensorflow", "tf-horovod"),
        Step("tensorflow", ("scripts/build-tensorflow.sh",), needs=("latest",)),
        Step(
            "trixie",
            ("scripts/build-trixie.sh",),
            needs=("docker", "wheelhouse"),
            about="Debian trixie base and ringleader:trixie",
        ),
        Step("slurm", ("scripts/build-slurm.sh",), needs=("horovod",)),
        Step(
            "lint",
            ("scripts/lint.sh",),
            needs=("venv",),
            about="ruff check, ruff format --check, mypy",
        ),
        Step(
            "docs",
            (str(VENV_BIN / "mkdocs"), "build", "--strict", "--site-dir", "build/site"),
            needs=("venv",),
            about="the docs site, mkdocs --strict: every link and anchor",
        ),
        Step(
            "unit",
            pytest_command("-m", "not container", "--durations=15"),
            needs=("venv", "host-tools"),
            about="unit and browser tests, Python of .venv",
            tests=True,
        ),
        Step(
            "other-pythons",
            ("scripts/test-pythons.sh",),
            needs=("unit",),
            timeout=40 * MINUTE,
            about="unit tests under every other CPython 3.10-3.13",
            tests=True,
        ),
        Step(
            "containers",
            pytest_command(
                "-m",
                "container and not alone",
                "-n",
                str(container_workers),
                "--dist",
                "loadgroup",
                "--durations=25",
            ),
            needs=(*container_images, "venv", "sdk3-venv"),
            timeout=45 * MINUTE,
            env=(("RINGLEADER_SDK3_PYTHON", str(SDK3_PYTHON)),),
            about=f"container tests, {container_workers} at a time",
            tests=True,
        ),
        Step(
            "containers-alone",
            pytest_command("-m", "container and alone", "--durations=10"),
            needs=(*container_images, "venv"),
            after=("containers", "other-pythons"),  # the machine to themselves
            timeout=30 * MINUTE,
            about="container tests that need the machine to themselves",
            tests=True,
        ),
    ]


@dataclass
class Outcome:
    status: str = "waiting"  # waiting, running, passed, failed, skipped
    started: float = 0.0
    ended: float = 0.0
    why: str = ""

    @property
    def seconds(self) -> float:
        return (self.ended or time.monotonic()) - self.started if self.started else 0.0


@dataclass
class Runner:
    steps: dict[str, Step]
    scale: float = 1.0
    began: float = field(default_factory=time.monotonic)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    changed: threading.Condition = field(default_factory=threading.Condition)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def say(self, text: str) -> None:
        elapsed = int(time.monotonic() - self.began)
        print(f"[ci {elapsed // 60:3d}:{elapsed % 60:02d}] {text}", flush=True)

    def run(self) -> bool:
        self.outcomes = {name: Outcome() for name in self.steps}
        LOGS.mkdir(parents=True, exist_ok=True)
        with self.changed:
            while True:
                self._start_ready()
                running = [n for n, o in self.outcomes.items() if o.status == "running"]
                if not running and not self._waiting():
                    break
                # A step's end notifies; the timeout only paces the heartbeat line.
                if not self.changed.wait(timeout=HEARTBEAT_SECONDS):
                    self.say("running: " + ", ".join(self._running_text()))
        return all(o.status == "passed" for o in self.outcomes.values())

    def _waiting(self) -> list[str]:
        return [n for n, o in self.outcomes.items() if o.status == "waiting"]

    def _running_text(self) -> list[str]:
        return [
            f"{name} ({int(outcome.seconds)} s)"
            for name, outcome in self.outcomes.items()
            if outcome.status == "running"
        ]

    def _start_ready(self) -> None:
        for name in self._waiting():
            step = self.steps[name]
            earlier = [self.outcomes[n].status for n in step.after if n in self.outcomes]
            if "waiting" in earlier or "running" in earlier:
                continue
            states = {self.outcomes[need].status for need in step.needs}
            if states & {"failed", "skipped"}:
                broken = [n for n in step.needs if self.outcomes[n].status in ("failed", "skipped")]
                outcome = self.outcomes[name]
                outcome.status, outcome.why = "skipped", f"needs {', '.join(broken)}"
                self.say(f"skip  {name}: it needs {', '.join(broken)}")
            elif states <= {"passed"}:
                self._start(step)

    def _start(self, step: Step) -> None:
        outcome = self.outcomes[step.name]
        outcome.status, outcome.started = "running", time.monotonic()
        log_path = LOGS / f"{step.name}.log"
        env = {**os.environ, **dict(step.env)}
        about = f" ({step.about})" if step.about else ""
        self.say(f"start {step.name}{about}: {' '.join(step.command)}")
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                step.command,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its whole tree can be ended on a timeout
            )
        self.processes[step.name] = process
        threading.Thread(target=self._watch, args=(step, process), daemon=True).start()

    def _watch(self, step: Step, process: subprocess.Popen[bytes]) -> None:
        bound = step.timeout * self.scale
        why = ""
        try:
            code = process.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            why = f"timed out after {bound:.0f} s (its bound; CI_STEP_TIMEOUT_SCALE scales it)"
            kill_group(process)
            code = process.wait()
        with self.changed:
            outcome = self.outcomes[step.name]
            outcome.ended = time.monotonic()
            if code == 0 and not why:
                outcome.status = "passed"
                self.say(f"done  {step.name} in {outcome.seconds:.0f} s")
            else:
                outcome.status = "failed"
                outcome.why = why or f"exit {code}"
                self.say(f"FAILED {step.name}: {outcome.why}, after {outcome.seconds:.0f} s")
                print(tail(LOGS / f"{step.name}.log", 60), flush=True)
            self.changed.notify_all()

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                kill_group(process)


def kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.killpg(process.pid, signal.SIGKILL)


def log_lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines() if path.exists() else []


def tail(path: Path, lines: int) -> str:
    text = log_lines(path)
    shown = "\n".join(f"    | {line}" for line in text[-lines:])
    return f"    last {min(lines, len(text))} lines of {path.relative_to(ROOT)}:\n{shown}"


CLOSING_LINE = re.compile(r"\b\d+ (passed|failed|errors?)\b.* in [0-9.]+s\b|no tests ran")
COUNT = re.compile(r"(\d+) (passed|failed|errors?)\b")


def closing_lines(lines: list[str]) -> list[str]:
    """Every line of a log with which a pytest run counted what ran ("== 12 passed in 3.2s ==")."""
    return [line.strip("= ") for line in lines if CLOSING_LINE.search(line)]


def section(lines: list[str], header: str) -> list[str]:
    """The section of a pytest log whose "====" header line contains `header`."""
    found: list[str] = []
    for line in lines:
        if line.startswith("=") and header in line:
            found = [line]
        elif found and line.startswith("="):
            break
        elif found and line.strip():
            found.append(line)
    return found


def report(runner: Runner) -> None:
    """Each pytest run's slowest tests and closing line, then the step table, then what failed:
    the end of the output is what a CI page shows, so the failures come last."""
    counts = {"passed": 0, "failed": 0}
    for name, step in runner.steps.items():
        if not step.tests or runner.outcomes[name].status == "skipped":
            continue
        log = LOGS / f"{name}.log"
        lines = log_lines(log)
        print()
        for header in ("slowest", "with no 'Slow:'"):
            for line in section(lines, header):
                print(line)
        for line in closing_lines(lines) or [f"no closing line (see {log.relative_to(ROOT)})"]:
            print(f"{name}: {line}")
            for number, word in COUNT.findall(line):
                counts["passed" if word == "passed" else "failed"] += int(number)
    print()
    print(f"{'step':<22} {'result':<8} {'seconds':>8}  started  notes")
    for name, outcome in runner.outcomes.items():
        start = int(outcome.started - runner.began) if outcome.started else 0
        start_text = f"{start // 60:3d}:{start % 60:02d}" if outcome.started else "      -"
        print(f"{name:<22} {outcome.status:<8} {outcome.seconds:8.0f}  {start_text}  {outcome.why}")
    total = time.monotonic() - runner.began
    print(f"{'wall time':<22} {'':<8} {total:8.0f}")
    failed = [name for name, outcome in runner.outcomes.items() if outcome.status == "failed"]
    for name in failed:
        print()
        print(f"FAILED {name} ({runner.outcomes[name].why}):")
        lines = log_lines(LOGS / f"{name}.log")
        failed_tests = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]
        for line in failed_tests[:FAILED_TAIL_LINES]:
            print(f"    {line[:300]}")
        print(tail(LOGS / f"{name}.log", FAILED_TAIL_LINES // (2 if failed_tests else 1)))
    print()
    tests = (
        f"{counts['passed']} tests passed, {counts['failed']} failed; "
        if any(step.tests for step in runner.steps.values())
        else ""
    )
    skipped = sum(outcome.status == "skipped" for outcome in runner.outcomes.values())
    steps = f"steps failed: {', '.join(failed)}" if failed else "every step passed"
    print(f"ci: {tests}{steps}" + (f" ({skipped} skipped after them)" if skipped else ""))


def select(steps: list[Step], only: Sequence[str]) -> dict[str, Step]:
    by_name = {step.name: step for step in steps}
    unknown = [name for name in only if name not in by_name]
    if unknown:
        raise SystemExit(f"ci.py: unknown step(s) {', '.join(unknown)}; see --list")
    if not only:
        return by_name
    chosen: set[str] = set()
    todo = list(only)
    while todo:
        name = todo.pop()
        if name not in chosen:
            chosen.add(name)
            todo.extend(by_name[name].needs)
    return {step.name: step for step in steps if step.name in chosen}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", default=[], metavar="STEP")
    parser.add_argument("--list", action="store_true", help="list the steps and exit")
    args = parser.parse_args(argv)
    workers = int(os.environ.get("CONTAINER_WORKERS", "3"))
    scale = float(os.environ.get("CI_STEP_TIMEOUT_SCALE", "1"))
    steps = select(all_steps(workers), args.only)
    if args.list:
        for step in steps.values():
            needs = ", ".join(step.needs) or "-"
            after = f" after {', '.join(step.after)}" if step.after else ""
            bound = f"bound {step.timeout / MINUTE:.0f} min"
            print(f"{step.name:<20} needs {needs:<40} {bound}{after}")
        return 0
    runner = Runner(steps, scale)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        passed = runner.run()
    except (KeyboardInterrupt, SystemExit):
        runner.stop_all()
        raise
    report(runner)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
