"""Taking a rank's stacks (ringleader.rank.stacks) from real processes on this host: py-spy,
faulthandler through our sitecustomize, /proc; and that sitecustomize's chaining."""

import ast
import contextlib
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from ringleader.core.proctimes import start_ticks
from ringleader.core.stacks import FAULTHANDLER, PROC, PY_SPY, ProcessStacks
from ringleader.rank.stacks import (
    HEADER,
    MAX_PROCESSES,
    PY_SPY_VARIABLE,
    SITE_DIR,
    STACK_DIR_VARIABLE,
    STACK_SIGNAL,
    STACK_SIGNAL_VARIABLE,
    py_spy_path,
    stack_environment,
    take_stacks,
)

# Blocked in C after its readiness line, like a rank waiting in a collective.
STUCK = textwrap.dedent(
    """
    import threading

    def load_batch_forever():
        print("ready", flush=True)
        threading.Event().wait()

    load_batch_forever()
    """
)
TIMEOUT = 3.0  # take_stacks' bound; each take here needs well under 0.5 s
READY_TIMEOUT = 10.0  # a child's start on a busy host

Spawn = Callable[..., "subprocess.Popen[bytes]"]


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Starts a child in a session of its own, waits for its readiness line and for it to block;
    ends them all."""
    started: list[subprocess.Popen[bytes]] = []

    def start(
        argv: Sequence[str], env: Mapping[str, str] | None = None, ready: bool = True
    ) -> "subprocess.Popen[bytes]":
        process = subprocess.Popen(
            list(argv),
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        started.append(process)
        if ready:
            wait_for_line(process, b"ready")
            wait_until_asleep(process.pid)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)
        assert process.stdout is not None
        process.stdout.close()


def wait_for_line(process: "subprocess.Popen[bytes]", line: bytes) -> bytes:
    """The child's output up to and including `line`, read within READY_TIMEOUT."""
    assert process.stdout is not None
    descriptor, seen = process.stdout.fileno(), b""
    deadline = time.monotonic() + READY_TIMEOUT
    while line + b"\n" not in seen:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([descriptor], [], [], remaining)[0]:
            raise AssertionError(f"no {line!r} line from the child; it wrote {seen!r}")
        chunk = os.read(descriptor, 4096)
        if not chunk:
            raise AssertionError(f"the child ended before {line!r}; it wrote {seen!r}")
        seen += chunk
    return seen


def functions(process: ProcessStacks) -> list[str]:
    main = process.main_thread
    assert main is not None, process
    return [frame.function for frame in main.frames]


def fake_py_spy(directory: Path, script: str) -> str:
    path = directory / "fake-py-spy"
    path.write_text("#!/bin/sh\n" + textwrap.dedent(script))
    path.chmod(0o755)
    return str(path)


# ---------------------------------------------------------------------------------------- py-spy
def test_py_spy_finds_the_stuck_function_in_the_main_thread(spawn: Spawn, tmp_path) -> None:
    found = py_spy_path()
    assert found, "py-spy is in the dev extra: pip install -e '.[dev]'"
    child = spawn([sys.executable, "-c", STUCK])
    stacks = take_stacks(4, "algo-3", child.pid, tmp_path, TIMEOUT, found)
    assert (stacks.rank, stacks.host, stacks.method, stacks.notes) == (4, "algo-3", PY_SPY, ())
    (process,) = stacks.processes
    assert process.pid == child.pid
    assert "load_batch_forever" in functions(process)
    assert process.state.startswith("S (sleeping)")
    assert f'Thread {child.pid} (idle): "MainThread"' in process.text
    assert "    load_batch_forever (<string>:6)" in process.text


def test_without_native_frames_when_native_unwinding_fails(spawn: Spawn, tmp_path) -> None:
    real = py_spy_path()
    assert real, "py-spy is in the dev extra: pip install -e '.[dev]'"
    no_native = fake_py_spy(
        tmp_path,
        f"""\
        for argument in "$@"; do
            [ "$argument" = --native ] && echo "Error: unwinding failed" >&2 && exit 1
        done
        exec {shlex.quote(real)} "$@"
        """,
    )
    child = spawn([sys.executable, "-c", STUCK])
    stacks = take_stacks(0, "algo-1", child.pid, tmp_path, TIMEOUT, no_native)
    (process,) = stacks.processes
    assert process.method == PY_SPY
    assert stacks.notes == (
        f"py-spy --native failed for pid {child.pid} (unwinding failed): Python frames only",
    )
    innermost = functions(process)[0]  # threading's "wait" ("Condition.wait" from 3.11 on)
    assert innermost.endswith("wait"), innermost
    assert "load_batch_forever" in functions(process)
    assert process.main_thread and not any(frame.native for frame in process.main_thread.frames)


def test_a_python_under_a_shell_still_gets_its_stack(spawn: Spawn, tmp_path) -> None:
    # `; exit` keeps bash from exec'ing python in its place: bash stays the user process.
    shell = spawn(["bash", "-c", f"{sys.executable} -c '{STUCK}'; exit"])
    stacks = take_stacks(0, "algo-1", shell.pid, tmp_path, TIMEOUT)
    bash, python = stacks.processes
    assert (bash.pid, bash.method, bash.threads) == (shell.pid, PROC, ())
    assert bash.state.startswith("S (sleeping)")
    assert bash.command.startswith("bash -c ")
    assert python.method == PY_SPY
    assert "load_batch_forever" in functions(python)
    assert stacks.notes == ()  # bash is no Python: /proc is all there is, nothing to explain


def test_a_program_without_python_gets_its_state_from_proc(spawn: Spawn, tmp_path) -> None:
    child = spawn(["sleep", "100"], ready=False)
    wait_until_asleep(child.pid, "sleep")
    stacks = take_stacks(1, "algo-1", child.pid, tmp_path, TIMEOUT)
    (process,) = stacks.processes
    assert (process.method, process.command, process.threads) == (PROC, "sleep 100", ())
    assert process.state.startswith("S (sleeping)")
    assert f"Process {child.pid}: sleep 100\nState: S (sleeping)" in process.text
    assert stacks.notes == ()


def test_a_large_tree_is_cut_at_the_cap_and_says_so(spawn: Spawn, tmp_path) -> None:
    shell = spawn(["bash", "-c", "for i in $(seq 20); do sleep 100 & done; echo ready; wait"])
    stacks = take_stacks(0, "algo-1", shell.pid, tmp_path, TIMEOUT, None)
    assert len(stacks.processes) == MAX_PROCESSES
    assert stacks.processes[0].pid == shell.pid
    assert stacks.notes[-1] == f"more than {MAX_PROCESSES} processes: only the first 16 dumped"


def wait_until_asleep(pid: int, name: str = "") -> None:
    """Until `pid` (running `name`, when given) sleeps: how a child that printed its readiness
    line, or `sleep`, which prints none, is known to be blocked where the test wants it."""
    deadline = time.monotonic() + READY_TIMEOUT
    while not (
        Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "S"
        and (not name or Path(f"/proc/{pid}/comm").read_text().strip() == name)
    ):
        assert time.monotonic() < deadline, f"pid {pid} never slept in {name or 'it'}"
        time.sleep(0.001)


# ----------------------------------------------------------------------------------- faulthandler
def test_without_py_spy_faulthandler_finds_the_stuck_function(
    spawn: Spawn, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv(PY_SPY_VARIABLE, "")
    child = spawn([sys.executable, "-c", STUCK], stack_environment(os.environ, tmp_path))
    stacks = take_stacks(2, "algo-2", child.pid, tmp_path, TIMEOUT)
    (process,) = stacks.processes
    assert process.method == FAULTHANDLER
    assert functions(process) == ["wait", "wait", "load_batch_forever", "<module>"]
    assert 'File "<string>", line 6 in load_batch_forever' in process.text
    assert process.state.startswith("S (sleeping)")
    assert stacks.notes == (f"py-spy: not used ({PY_SPY_VARIABLE} is empty): used faulthandler",)


def test_py_spy_denied_falls_back_to_faulthandler_and_says_why(spawn: Spawn, tmp_path) -> None:
    denied = fake_py_spy(
        tmp_path,
        """\
        echo "Permission Denied: Try running again with elevated permissions by going 'sudo'" >&2
        exit 1
        """,
    )
    child = spawn([sys.executable, "-c", STUCK], stack_environment(os.environ, tmp_path))
    stacks = take_stacks(0, "algo-1", child.pid, tmp_path, TIMEOUT, denied)
    assert stacks.method == FAULTHANDLER
    assert "load_batch_forever" in functions(stacks.processes[0])
    assert stacks.notes == (
        f"py-spy not usable for pid {child.pid} (Permission denied: ptrace not allowed): "
        "used faulthandler",
    )


def test_a_forked_child_registers_itself(spawn: Spawn, tmp_path) -> None:
    script = textwrap.dedent(
        """
        import os, threading

        def load_batch_forever():
            print("ready", flush=True)
            threading.Event().wait()

        if os.fork() == 0:
            load_batch_forever()
        os.wait()
        """
    )
    parent = spawn([sys.executable, "-c", script], stack_environment(os.environ, tmp_path))
    stacks = take_stacks(0, "algo-1", parent.pid, tmp_path, TIMEOUT, None)
    waiting, worker = stacks.processes
    assert [waiting.method, worker.method] == [FAULTHANDLER, FAULTHANDLER]
    assert "load_batch_forever" in functions(worker)
    assert "load_batch_forever" not in functions(waiting)
    assert stacks.notes == ("py-spy: not used (disabled by the caller): used faulthandler",)


def test_a_registration_from_an_earlier_process_with_that_pid_is_not_signalled(
    spawn: Spawn, tmp_path
) -> None:
    child = spawn([sys.executable, "-c", STUCK], stack_environment(os.environ, tmp_path))
    registration = tmp_path / f"{child.pid}.txt"
    header = registration.read_text().splitlines()[0]
    assert header.startswith(f"ringleader-stacks pid={child.pid} start={start_ticks(child.pid)} ")
    registration.write_text(header.replace("start=", "start=1") + "\n")
    stacks = take_stacks(0, "algo-1", child.pid, tmp_path, TIMEOUT, None)
    assert stacks.method == PROC
    assert registration.read_text().count("\n") == 1  # nothing was dumped


def test_a_process_that_does_not_handle_the_signal_is_never_sent_it(spawn: Spawn, tmp_path) -> None:
    # Same PID and start time as the file says, but no handler (a Python that exec'd `sleep`):
    # the signal would kill it.
    child = spawn(["sleep", "100"], ready=False)
    wait_until_asleep(child.pid, "sleep")
    header = (
        f"ringleader-stacks pid={child.pid} start={start_ticks(child.pid)} signal={STACK_SIGNAL}"
    )
    (tmp_path / f"{child.pid}.txt").write_text(header + " python=3.11.7\n")
    stacks = take_stacks(0, "algo-1", child.pid, tmp_path, TIMEOUT, None)
    assert stacks.method == PROC
    assert child.poll() is None


# ------------------------------------------------------------------------------ processes that end
def test_a_process_that_ends_during_py_spy_is_no_error(spawn: Spawn, tmp_path) -> None:
    ending = fake_py_spy(
        tmp_path,
        """\
        kill -9 "$3"
        i=0
        while [ -e "/proc/$3" ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
        echo "Error: Failed to get process executable name. Check that the process is running." >&2
        exit 1
        """,
    )
    child = spawn([sys.executable, "-c", STUCK])
    threading.Thread(target=child.wait, daemon=True).start()  # reaped at once: gone, no zombie
    stacks = take_stacks(0, "algo-1", child.pid, tmp_path, TIMEOUT, ending)
    assert stacks.processes == ()
    command = shlex.join([sys.executable, "-c", STUCK])
    assert stacks.notes == (f"pid {child.pid} ({command}): ended while its stacks were taken",)


def test_a_process_that_ends_on_the_dump_signal_is_no_error(spawn: Spawn, tmp_path) -> None:
    script = textwrap.dedent(
        """
        import os, signal
        signal.signal(int(os.environ["RINGLEADER_STACK_SIGNAL"]), lambda *_: os._exit(3))
        print("ready", flush=True)
        while True:
            signal.pause()
        """
    )
    child = spawn([sys.executable, "-c", script], stack_environment(os.environ, tmp_path))
    started = time.monotonic()
    stacks = take_stacks(0, "algo-1", child.pid, tmp_path, TIMEOUT, None)
    assert time.monotonic() - started < TIMEOUT / 2  # no wait for a dump that cannot come
    assert child.wait(timeout=5) == 3
    if stacks.processes:  # a zombie until reaped: what /proc says of it
        assert [process.method for process in stacks.processes] == [PROC]
    else:
        assert "ended while its stacks were taken" in stacks.notes[-1]


def test_a_process_gone_before_is_no_error(tmp_path) -> None:
    never = 2**22 + 1  # above the largest pid_max Linux allows
    stacks = take_stacks(0, "algo-1", never, tmp_path, TIMEOUT)
    assert (stacks.processes, stacks.notes) == ((), (f"pid {never}: ended before its stacks",))


# -------------------------------------------------------------------------------- the environment
def test_stack_environment_puts_our_site_first_and_keeps_the_users_path(tmp_path) -> None:
    env = stack_environment({"PYTHONPATH": f"/user/lib:{SITE_DIR}", "HOME": "/root"}, tmp_path)
    assert env == {
        "PYTHONPATH": f"{SITE_DIR}:/user/lib",
        "HOME": "/root",
        STACK_DIR_VARIABLE: str(tmp_path),
        STACK_SIGNAL_VARIABLE: str(STACK_SIGNAL),
    }
    assert stack_environment({}, tmp_path)["PYTHONPATH"] == str(SITE_DIR)
    assert (SITE_DIR / "sitecustomize.py").is_file()
    assert signal.SIGRTMIN < STACK_SIGNAL <= signal.SIGRTMAX


def test_py_spy_path_follows_the_environment(monkeypatch) -> None:
    monkeypatch.setenv(PY_SPY_VARIABLE, "/opt/tools/py-spy")
    assert py_spy_path() == "/opt/tools/py-spy"
    monkeypatch.setenv(PY_SPY_VARIABLE, "")
    assert py_spy_path() is None
    monkeypatch.delenv(PY_SPY_VARIABLE)
    beside = Path(sys.executable).parent / "py-spy"
    assert py_spy_path() == (str(beside) if beside.exists() else shutil.which("py-spy"))


# ------------------------------------------------------------------------------ the sitecustomize
def test_the_images_own_sitecustomize_still_runs_once(tmp_path) -> None:
    image = tmp_path / "image-site"
    image.mkdir()
    (image / "sitecustomize.py").write_text(
        "import sys\nMARK = 'image'\nprint('image sitecustomize ran as', __name__, flush=True)\n"
    )
    stack_dir = tmp_path / "stacks"
    env = stack_environment({**os.environ, "PYTHONPATH": str(image)}, stack_dir)
    program = (
        "import os, sitecustomize\n"
        "print(sitecustomize.MARK, sitecustomize.__file__)\n"
        f"print(os.path.exists('{stack_dir}/%d.txt' % os.getpid()))\n"
    )
    result = run_python(program, env)
    assert result.stdout.splitlines() == [
        "image sitecustomize ran as sitecustomize",
        f"image {image / 'sitecustomize.py'}",
        "True",
    ]
    assert result.stderr == ""


def test_a_failing_image_sitecustomize_is_reported_as_without_us(tmp_path) -> None:
    (tmp_path / "sitecustomize.py").write_text("raise RuntimeError('broken image')\n")
    program = "import os; print(os.path.exists('%s/%d.txt' % (os.environ['D'], os.getpid())))"
    plain = run_python(program, {**os.environ, "PYTHONPATH": str(tmp_path), "D": "/nonexistent"})
    env = stack_environment({**os.environ, "PYTHONPATH": str(tmp_path)}, tmp_path / "stacks")
    ours = run_python(program, {**env, "D": str(tmp_path / "stacks")})
    assert "Error in sitecustomize" in plain.stderr
    assert ours.stderr == plain.stderr  # site.py's own report, as without us
    assert (plain.stdout, ours.stdout) == ("False\n", "True\n")  # registered all the same


def test_without_the_variables_nothing_is_registered(tmp_path) -> None:
    env = {**stack_environment(os.environ, tmp_path), STACK_SIGNAL_VARIABLE: ""}
    result = run_python("import sitecustomize; print(sitecustomize.__name__)", env)
    assert (result.stdout, result.stderr) == ("sitecustomize\n", "")
    assert list(tmp_path.iterdir()) == []


def test_the_sitecustomize_loads_no_module_but_faulthandler(tmp_path) -> None:
    """Every module it loads is paid for by every Python of every rank, at its start and at its
    exit, when all ranks end at once; the image's own sitecustomize still runs after it."""
    image = tmp_path / "image-site"
    image.mkdir()
    (image / "sitecustomize.py").write_text("MARK = 'image'\n")
    program = "import sys, sitecustomize; print(sitecustomize.MARK, *sorted(sys.modules))"
    plain = run_python(program, {**os.environ, "PYTHONPATH": str(image)})
    env = stack_environment({**os.environ, "PYTHONPATH": str(image)}, tmp_path / "stacks")
    ours = run_python(program, env)
    assert ours.stdout.split()[0] == plain.stdout.split()[0] == "image"
    assert set(ours.stdout.split()) - set(plain.stdout.split()) == {"faulthandler"}


def test_the_sitecustomize_is_python_3_6_syntax() -> None:
    source = (SITE_DIR / "sitecustomize.py").read_text()
    ast.parse(source, feature_version=(3, 6))
    imported = set()
    tree = ast.parse(source)
    tree.body = [  # without what only the type checker reads
        block
        for block in tree.body
        if not (isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING")
    ]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    # nothing of ringleader; _thread is loaded before site runs (the import system uses it)
    assert imported == {"_thread", "faulthandler", "importlib", "io", "os", "sys"}
    assert f'HEADER = "{HEADER}"' in source  # the word both sides read


def run_python(program: str, env: Mapping[str, str]) -> "subprocess.CompletedProcess[str]":
    return subprocess.run(
        [sys.executable, "-c", program],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
