"""The per-rank wrapper, run for real as `python -m ringleader.rank` next to a HostAgent."""

import contextlib
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

import ringleader
from ringleader.core.outcome import suspicion
from ringleader.core.proctimes import start_ticks
from ringleader.output.printer import tag
from ringleader.rank import wrapper as rank_module
from ringleader.rank.capture import Pump, RankOutput
from ringleader.rank.wrapper import RankSupervisor, current_rank, rank_environment
from ringleader.wire.agent import HostAgent, same_process
from ringleader.wire.events import RankEnded, RankStarted
from ringleader.wire.protocol import Channel, decode_output, is_output

SRC = Path(ringleader.__file__).resolve().parents[1]  # the package under test, for the wrapper
PY = sys.executable


class Wrapper:
    """One `python -m ringleader.rank` process with its output collected line by line."""

    def __init__(
        self,
        workdir: Path,
        command,
        *,
        rank=0,
        grace=None,
        abort_grace=None,
        forwarded="",
        extra_env=None,
        relay_ranks=None,
        options=(),
    ):
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(SRC),
            "OMPI_COMM_WORLD_RANK": str(rank),
            **(extra_env or {}),
        }
        argv = [
            PY,
            "-m",
            "ringleader.rank",
            "--agent",
            str(workdir / "agent.sock"),
            "--host-env",
            str(workdir / "host-env.json"),
            "--log-dir",
            str(workdir / "logs"),
        ]
        if grace is not None:
            argv += ["--grace", str(grace)]
        if abort_grace is not None:
            argv += ["--abort-grace", str(abort_grace)]
        if forwarded:
            argv += ["--forwarded", forwarded]
        if relay_ranks is not None:
            argv += ["--relay-ranks", relay_ranks]
        argv += [*options, "--", *command]
        self.process = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        _STARTED.append(self.process)
        self.stdout: queue.Queue = queue.Queue()
        self.stderr: queue.Queue = queue.Queue()
        for stream, sink in (
            (self.process.stdout, self.stdout),
            (self.process.stderr, self.stderr),
        ):
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()

    @staticmethod
    def _pump(stream, sink):
        for line in iter(stream.readline, b""):
            sink.put(line)
        sink.put(None)

    def wait_for_line(self, sink: queue.Queue, contains: bytes, timeout=10.0) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            line = sink.get(timeout=max(deadline - time.monotonic(), 0.01))
            assert line is not None, f"stream ended before a line containing {contains!r}"
            if contains in line:
                return line

    def lines(self, sink: queue.Queue) -> list[bytes]:
        collected = []
        while (line := sink.get(timeout=10.0)) is not None:
            collected.append(line)
        return collected

    def wait(self, timeout=10.0) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise


_STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _kill_leftovers():
    """A failing test must not leave wrappers or their sleeping children behind."""
    yield
    while _STARTED:
        process = _STARTED.pop()
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(process.pid).children(recursive=True):
                child.kill()
        if process.poll() is None:
            process.kill()
            process.wait(timeout=5.0)


@pytest.fixture
def workdir():
    # Unix socket paths must stay short (108 bytes): no pytest tmp_path here.
    path = Path(tempfile.mkdtemp(prefix="rl-rank-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class RunningAgent:
    """A host agent whose output handler tags lines the way the leader prints them."""

    events: queue.Queue
    stdout: queue.Queue
    stderr: queue.Queue
    agent: HostAgent | None = None

    def on_output(self, frame: bytes) -> None:
        assert is_output(frame)
        message = decode_output(frame)
        sink = self.stderr if message["stream"] == "stderr" else self.stdout
        for line in message["lines"]:
            sink.put(tag(message["host"], message["rank"]).encode() + line.encode() + b"\n")

    def terminate_all(self, grace: float) -> None:
        assert self.agent is not None
        self.agent.terminate_all(grace)

    def lines(self, sink: queue.Queue) -> list[bytes]:
        collected = []
        while True:
            try:
                collected.append(sink.get_nowait())
            except queue.Empty:
                return collected


@pytest.fixture
def agent(workdir):
    running = RunningAgent(queue.Queue(), queue.Queue(), queue.Queue())
    running.agent = HostAgent(workdir / "agent.sock", running.events, running.on_output)
    yield running
    running.agent.close()


def write_host_env(workdir: Path, env: dict[str, str]) -> None:
    (workdir / "host-env.json").write_text(json.dumps({"env": env}))


def ended_record(events: queue.Queue):
    while True:
        event = events.get(timeout=10.0)
        if isinstance(event, RankEnded):
            return event.record


def python_command(code: str) -> list[str]:
    return [PY, "-c", code]


def test_output_is_tagged_with_host_and_rank(workdir, agent):
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-2", "PATH": "/usr/bin:/bin"})
    code = (
        "import sys; print('loss=0.5'); print('second'); "
        "sys.stdout.write('no newline'); sys.stdout.flush(); print('to err', file=sys.stderr)"
    )
    wrapper = Wrapper(workdir, python_command(code), rank=3)
    assert wrapper.wait() == 0
    assert agent.lines(agent.stdout) == [
        b"[algo-2 rank 3] loss=0.5\n",
        b"[algo-2 rank 3] second\n",
        b"[algo-2 rank 3] no newline\n",
    ]
    assert agent.lines(agent.stderr) == [b"[algo-2 rank 3] to err\n"]
    log = (workdir / "logs" / "algo-2" / "rank-3.log").read_text()
    # Both streams in one file, each in order; a line without a newline ends with its stream.
    assert sorted(log.splitlines()) == ["loss=0.5", "no newline", "second", "to err"]
    assert log.index("loss=0.5") < log.index("second") < log.index("no newline")
    assert agent.events.get(timeout=5.0) == RankStarted(3, "algo-2")
    record = ended_record(agent.events)
    assert (record.rank, record.host, record.exit_code, record.signal) == (3, "algo-2", 0, None)
    assert record.terminated is False
    assert record.stderr_tail == ("to err",)
    assert record.started_at <= record.ended_at


def test_a_rank_not_relayed_keeps_its_output_in_its_log_only(workdir, agent):
    """Ranks neither shown nor metered send the agent no output (the leader of a large job
    would spend its CPU on them), but their start, end and stderr tail, and the log keeps all."""
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-2", "PATH": "/usr/bin:/bin"})
    code = "import sys; print('one'); print('two', file=sys.stderr); sys.exit(4)"
    wrapper = Wrapper(workdir, python_command(code), rank=3, relay_ranks="0,2")
    assert wrapper.wait() == 4
    assert agent.lines(agent.stdout) == [] and agent.lines(agent.stderr) == []
    assert sorted((workdir / "logs" / "algo-2" / "rank-3.log").read_text().split()) == [
        "one",
        "two",
    ]
    assert agent.events.get(timeout=5.0) == RankStarted(3, "algo-2")
    record = ended_record(agent.events)
    assert (record.exit_code, record.stderr_tail) == (4, ("two",))
    assert record.first_output_at is not None
    relayed = Wrapper(workdir, python_command("print('shown')"), rank=2, relay_ranks="0,2")
    assert relayed.wait() == 0
    assert agent.lines(agent.stdout) == [b"[algo-2 rank 2] shown\n"]


def test_failing_child_exit_code_and_stderr_tail(workdir, agent):
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-3"})
    code = "import sys\nfor i in range(30): print(f'err {i}', file=sys.stderr)\nsys.exit(3)\n"
    wrapper = Wrapper(workdir, python_command(code), rank=4)
    assert wrapper.wait() == 3
    record = ended_record(agent.events)
    assert (record.rank, record.host, record.exit_code, record.signal) == (4, "algo-3", 3, None)
    assert record.failed
    assert record.terminated is False
    assert record.stderr_tail == tuple(f"err {i}" for i in range(10, 30))  # the last 20


def test_the_ranks_own_files_go_with_it_and_its_code_stays(workdir, agent):
    """The wrapper ends without the interpreter's shutdown: its rank's folder (heartbeat,
    faulthandler dumps, nested) is removed first, and the code is the rank's."""
    code = (
        "import os, pathlib, sys\n"
        "dump = pathlib.Path(os.environ['RINGLEADER_STACK_DIR'])\n"
        "(dump / 'nested').mkdir(parents=True, exist_ok=True)\n"
        "(dump / 'nested' / '1.txt').write_text('a stack')\n"
        "(dump / '2.txt').write_text('a stack')\n"
        "sys.exit(5)\n"
    )
    run_dir = workdir / "run"
    wrapper = Wrapper(
        workdir, python_command(code), rank=2, extra_env={"RINGLEADER_RUN_DIR": str(run_dir)}
    )
    assert wrapper.wait() == 5
    assert ended_record(agent.events).exit_code == 5
    assert (run_dir / "ranks").is_dir()  # the wrapper made it, and emptied it
    assert not (run_dir / "ranks" / "2").exists()


def test_child_killed_by_sigkill(workdir, agent):
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-1"})
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    wrapper = Wrapper(workdir, python_command(code))
    assert wrapper.wait() == 137
    record = ended_record(agent.events)
    assert (record.exit_code, record.signal, record.terminated) == (137, 9, False)


def test_terminate_all_sigterms_the_child(workdir, agent):
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-2"})
    code = "import time; print('ready', flush=True); time.sleep(30)"
    wrapper = Wrapper(workdir, python_command(code), rank=1, grace=20)
    wrapper.wait_for_line(agent.stdout, b"ready")
    started = time.monotonic()
    agent.terminate_all(20)
    assert wrapper.wait() == 143
    assert time.monotonic() - started < 5.0  # SIGTERM, not the 20 s SIGKILL
    record = ended_record(agent.events)
    assert (record.exit_code, record.signal, record.terminated) == (143, 15, True)


def test_terminate_all_also_stops_ranks_that_start_later(workdir, agent):
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-2"})
    agent.terminate_all(3)
    started = time.monotonic()
    wrapper = Wrapper(workdir, python_command("import time; time.sleep(30)"), grace=3)
    assert wrapper.wait() == 143  # stopped before its child started, or SIGTERMed: never KILLed
    assert time.monotonic() - started < 2.5
    record = ended_record(agent.events)
    assert record.terminated is True
    assert record.exit_code == 143


def test_sigterm_to_the_wrapper_is_forwarded(workdir, agent):
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-2"})
    code = (
        "import os, signal, sys, time\n"
        # os.write: print() in a handler can hit "reentrant call" if 'ready' is still flushing
        "signal.signal(signal.SIGTERM, lambda *a: (os.write(1, b'got TERM\\n'), sys.exit(7)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    # mpirun's abort: the rank gets the abort grace to end by itself, then SIGTERM.
    wrapper = Wrapper(workdir, python_command(code), grace=20, abort_grace=0.3)
    wrapper.wait_for_line(agent.stdout, b"ready")
    wrapper.process.send_signal(signal.SIGTERM)
    assert wrapper.wait() == 7
    assert wrapper.wait_for_line(agent.stdout, b"got TERM") == b"[algo-2 rank 0] got TERM\n"
    record = ended_record(agent.events)
    assert (record.exit_code, record.terminated) == (7, True)


def test_child_ignoring_sigterm_is_killed_after_grace(workdir, agent):
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-2"})
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    wrapper = Wrapper(workdir, python_command(code), grace=20, abort_grace=20)
    wrapper.wait_for_line(agent.stdout, b"ready")
    started = time.monotonic()
    agent.terminate_all(0.5)  # a stop of the job: the grace in the message beats --grace
    assert wrapper.wait() == 137
    elapsed = time.monotonic() - started
    assert 0.4 <= elapsed < 5.0
    record = ended_record(agent.events)
    assert (record.exit_code, record.signal, record.terminated) == (137, 9, True)


def test_sigterm_from_mpirun_uses_the_abort_grace(workdir, agent):
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-2"})
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    wrapper = Wrapper(workdir, python_command(code), grace=20, abort_grace=0.3)
    wrapper.wait_for_line(agent.stdout, b"ready")
    started = time.monotonic()
    wrapper.process.send_signal(signal.SIGTERM)  # what orted does when another rank failed
    assert wrapper.wait() == 137
    elapsed = time.monotonic() - started
    assert 0.28 <= elapsed < 5.0  # half the grace to end by itself, then SIGTERM, SIGKILL
    record = ended_record(agent.events)
    assert (record.exit_code, record.signal, record.terminated) == (137, 9, True)


def test_a_stop_of_the_job_during_an_abort_gives_the_rank_the_full_grace(workdir, agent):
    """A rank on another host ended on the stop's SIGTERM and its mpi4py aborted the job: mpirun
    signals this wrapper (the abort) before the stop reaches it. The stop outranks the abort:
    no SIGKILL at the abort grace, no second SIGTERM; the rank ends its handler's work."""
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-3"})
    code = (
        "import os, signal, sys, time\n"
        "def on_term(*_):\n"
        "    os.write(1, b'got TERM\\n')\n"
        "    time.sleep(2.5)\n"  # a checkpoint on SIGTERM: longer than the abort grace
        "    os.write(1, b'checkpoint written\\n')\n"
        "    sys.exit(7)\n"
        "signal.signal(signal.SIGTERM, on_term)\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    wrapper = Wrapper(workdir, python_command(code), rank=5, grace=20, abort_grace=2.0)
    wrapper.wait_for_line(agent.stdout, b"ready")
    wrapper.process.send_signal(signal.SIGTERM)  # the abort: SIGTERM after 1 s, SIGKILL at 2 s
    wrapper.wait_for_line(agent.stdout, b"got TERM")
    agent.terminate_all(20)  # the stop arrives during the abort
    assert wrapper.wait() == 7
    assert wrapper.wait_for_line(agent.stdout, b"checkpoint written")
    record = ended_record(agent.events)
    assert (record.exit_code, record.signal, record.terminated) == (7, None, True)
    assert not any(b"got TERM" in line for line in agent.lines(agent.stdout))  # one SIGTERM


def test_a_rank_ending_by_itself_within_the_abort_grace_keeps_its_own_code(workdir, agent):
    # A rank calling MPI_Abort is still exiting when mpirun's stop reaches its wrapper: it must
    # not be SIGTERMed into 143 in the meantime, or the root cause would lose its exit code.
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-2"})
    code = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (os.write(1, b'got TERM\\n'), sys.exit(9)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(0.3)\n"
        "sys.exit(5)\n"
    )
    wrapper = Wrapper(workdir, python_command(code), grace=20, abort_grace=10)
    wrapper.wait_for_line(agent.stdout, b"ready")
    wrapper.process.send_signal(signal.SIGTERM)
    assert wrapper.wait() == 5
    record = ended_record(agent.events)
    assert (record.exit_code, record.signal, record.terminated) == (5, None, True)
    assert not any(b"got TERM" in line for line in agent.lines(agent.stdout))


SLOW_SHUTDOWN_AT_EXIT = (  # Horovod's shutdown at interpreter exit, on a busy machine
    "import atexit, sys, time\n"
    "atexit.register(lambda: (print('shutting down', flush=True), time.sleep(30)))\n"
    "print('ready', flush=True)\n"
)


@pytest.mark.parametrize(
    ("ending", "code"),
    [("sys.exit(7)", 7), ("raise ValueError('on purpose')", 1)],
    ids=["sys.exit", "exception"],
)
def test_a_rank_stopped_while_exiting_is_reported_with_the_code_it_chose(
    workdir, agent, ending: str, code: int
):
    """mpirun's abort (another rank failed) reaches a rank whose exit is still running: it is
    reported with the code it was exiting with, not as killed by the stop's signal."""
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-2"})
    script = SLOW_SHUTDOWN_AT_EXIT + "time.sleep(0.2)\n" + ending + "\n"
    wrapper = Wrapper(workdir, python_command(script), grace=20, abort_grace=0.4)
    wrapper.wait_for_line(agent.stdout, b"shutting down")
    wrapper.process.send_signal(signal.SIGTERM)  # orted's abort
    assert wrapper.wait() == code
    record = ended_record(agent.events)
    assert (record.exit_code, record.signal, record.terminated) == (code, None, True)
    assert record.stderr_tail[-1] == (
        f"[ringleader] stopped while exiting with code {code}: reported with it"
    )
    assert suspicion(record) == 1  # ended by itself while being stopped: a likely cause


def test_a_rank_stopped_before_it_began_to_exit_is_reported_as_killed(workdir, agent):
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-2"})
    script = SLOW_SHUTDOWN_AT_EXIT + "time.sleep(30)\n"
    wrapper = Wrapper(workdir, python_command(script), grace=20, abort_grace=0.4)
    wrapper.wait_for_line(agent.stdout, b"ready")
    wrapper.process.send_signal(signal.SIGTERM)
    assert wrapper.wait() == 143
    record = ended_record(agent.events)
    assert (record.exit_code, record.signal, record.terminated) == (143, 15, True)


def child_pid(wrapper: Wrapper, agent: RunningAgent) -> int:
    line = wrapper.wait_for_line(agent.stdout, b"pid=")
    return int(line.rsplit(b"pid=", 1)[1])


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


PID_THEN_SLEEP = "import os, time; print(f'pid={os.getpid()}', flush=True); time.sleep(30)"
PID_IGNORE_TERM_SLEEP = (
    "import os, signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print(f'pid={os.getpid()}', flush=True)\n"
    "time.sleep(30)\n"
)


def test_reap_kills_a_user_process_whose_wrapper_was_killed(workdir, agent):
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-2"})
    wrapper = Wrapper(workdir, python_command(PID_THEN_SLEEP), grace=20, abort_grace=20)
    pid = child_pid(wrapper, agent)
    assert agent.events.get(timeout=5.0) == RankStarted(0, "algo-2")
    wrapper.process.kill()  # orted SIGKILLs the wrapper; the user's process lives on
    wrapper.wait()
    assert not gone(pid)
    started = time.monotonic()
    agent.agent.reap(abort_grace=0.3)  # no stop: the abort grace applies
    elapsed = time.monotonic() - started
    assert 0.25 <= elapsed < 5.0
    deadline = time.monotonic() + 5.0
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gone(pid)


def test_a_wrapper_killed_before_it_reported_leaves_the_agents_record(workdir, agent):
    """Open MPI 5's daemon SIGKILLs a rank's group 0.2 s after its SIGTERM: the rank still has
    a record, marked as the agent's, and it is never the root cause."""
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-2"})
    wrapper = Wrapper(workdir, python_command(PID_THEN_SLEEP), rank=3, grace=20)
    child_pid(wrapper, agent)
    assert agent.events.get(timeout=5.0) == RankStarted(3, "algo-2")
    wrapper.process.kill()
    wrapper.wait()
    record = ended_record(agent.events)
    assert (record.rank, record.host, record.exit_code, record.signal) == (3, "algo-2", 137, 9)
    assert record.unreported and record.terminated and record.ended_at >= record.started_at
    assert record.describe() == (
        "Rank 3 on host algo-2 ended without a report: its wrapper was killed (SIGKILL) first"
    )
    assert suspicion(record) == 3
    agent.agent.reap(abort_grace=0.1)


def test_a_wrapper_killed_while_its_rank_exits_leaves_the_rank_s_own_code(workdir, agent):
    """mpirun's daemon kills a wrapper a second after its stop; on a busy machine that comes
    while the failing rank's own exit (Horovod's shutdown) still runs. The agent reads the exit
    note: the rank is reported with the code it chose, a likely cause (seen in CI: rank 0's
    sys.exit(5) under Horovod, every host exited 70 with no rank named), and with the stderr
    lines the agent had relayed for it (ci17: the failure file lacked the rank's own message)."""
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-2"})
    failing = "print('rank 0 failing on purpose with code 5', file=sys.stderr, flush=True)\n"
    script = SLOW_SHUTDOWN_AT_EXIT + failing + "time.sleep(0.2)\nsys.exit(5)\n"
    wrapper = Wrapper(workdir, python_command(script), rank=0, grace=20)
    wrapper.wait_for_line(agent.stderr, b"failing on purpose")
    wrapper.wait_for_line(agent.stdout, b"shutting down")
    assert agent.events.get(timeout=5.0) == RankStarted(0, "algo-2")
    wrapper.process.kill()
    wrapper.wait()
    record = ended_record(agent.events)
    assert (record.rank, record.exit_code, record.signal) == (0, 5, None)
    assert record.terminated and not record.unreported
    # the lines of stderr the agent relayed for the rank, then why the agent reports it
    assert record.stderr_tail == (
        "rank 0 failing on purpose with code 5",
        "[ringleader] its wrapper was killed while it was exiting with code 5: reported with it",
    )
    assert suspicion(record) == 1
    agent.agent.reap(abort_grace=0.1)


def test_reap_after_a_stop_counts_the_stop_grace_from_the_stop(workdir, agent):
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-2"})
    wrapper = Wrapper(workdir, python_command(PID_IGNORE_TERM_SLEEP), grace=20, abort_grace=20)
    pid = child_pid(wrapper, agent)
    assert agent.events.get(timeout=5.0) == RankStarted(0, "algo-2")
    stopped = time.monotonic()
    agent.terminate_all(0.5)  # the child ignores SIGTERM
    wrapper.process.kill()  # and its wrapper is gone before it could SIGKILL it
    wrapper.wait()
    assert not gone(pid)
    agent.agent.reap(abort_grace=20)  # after a stop, the stop's grace applies, from the stop
    elapsed = time.monotonic() - stopped
    assert 0.4 <= elapsed < 5.0
    deadline = time.monotonic() + 5.0
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gone(pid)


def test_reap_returns_at_once_when_every_user_process_ended(workdir, agent):
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-2"})
    wrapper = Wrapper(workdir, python_command("pass"), grace=20, abort_grace=20)
    assert wrapper.wait() == 0
    ended_record(agent.events)
    started = time.monotonic()
    agent.agent.reap(abort_grace=20)
    assert time.monotonic() - started < 1.0


# A helper in a session of its own keeps the rank's stdout open; without the cleanup the wrapper
# would wait for it (60 s here) and the rank's end would never be reported.
LEAVES_A_SLEEP_BEHIND = (
    "import subprocess\n"
    "helper = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
    "print(f'stray={helper.pid}', flush=True)\n"
)
# A daemon that double-forks: the grandchild is orphaned and would be re-parented to PID 1
# but for the wrapper being a subreaper. Its PID comes back through a pipe before we exit.
LEAVES_A_DAEMON_BEHIND = (
    "import os, time\n"
    "read_end, write_end = os.pipe()\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        os.write(write_end, str(os.getpid()).encode())\n"
    "        os.close(write_end)\n"
    "        time.sleep(60)\n"
    "    os._exit(0)\n"
    "os.close(write_end)\n"
    "print(f'stray={os.read(read_end, 100).decode()}', flush=True)\n"
)


def stray_pid(wrapper: Wrapper, agent: RunningAgent) -> int:
    line = wrapper.wait_for_line(agent.stdout, b"stray=")
    return int(line.rsplit(b"stray=", 1)[1])


@pytest.mark.parametrize("code", [LEAVES_A_SLEEP_BEHIND, LEAVES_A_DAEMON_BEHIND])
def test_processes_the_rank_left_behind_are_ended_with_it(workdir, agent, code):
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-2"})
    wrapper = Wrapper(workdir, python_command(code), rank=1, grace=20, abort_grace=20)
    pid = stray_pid(wrapper, agent)
    assert wrapper.wait(timeout=10.0) == 0  # not after the helper's 60 s
    assert gone(pid), "the process the rank left behind is still running"
    # The rank's output, then its record, arrive in order: the note is in by now.
    record = ended_record(agent.events)
    assert (record.rank, record.exit_code, record.terminated) == (1, 0, False)
    notes = [line for line in agent.lines(agent.stdout) if b"[ringleader]" in line]
    assert len(notes) == 1
    assert notes[0].startswith(
        b"[algo-2 rank 1] [ringleader] the rank had ended; stopped what it left running: "
    )
    assert f" {pid} (".encode() in notes[0]
    if code is LEAVES_A_SLEEP_BEHIND:
        assert f"{pid} (sleep)".encode() in notes[0]


def test_the_straggler_watchs_py_spy_ends_with_the_rank_and_is_no_leftover(workdir, agent):
    """py-spy records the rank period after period; it is ringleader's, not something the
    rank left running, and ends before that sweep."""
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-2"})
    options = ["--progress-interval", "0.5", "--wait-period", "1"]
    code = "import time; time.sleep(3.5); print('done', flush=True)"
    wrapper = Wrapper(workdir, python_command(code), rank=1, options=options)
    assert wrapper.wait(timeout=30.0) == 0
    record = ended_record(agent.events)
    assert (record.rank, record.exit_code) == (1, 0)
    assert agent.lines(agent.stdout) == [b"[algo-2 rank 1] done\n"]


def test_child_environment_precedence(workdir, agent):
    write_host_env(
        workdir,
        {"SM_CURRENT_HOST": "algo-2", "SHARED": "host", "FWD": "host", "ONLY_HOST": "h"},
    )
    code = (
        "import json, os; print(json.dumps({k: os.environ.get(k) for k in "
        "['SM_CURRENT_HOST', 'SHARED', 'FWD', 'ONLY_HOST', 'ONLY_OWN', 'OMPI_COMM_WORLD_RANK', "
        "'PMIX_RANK']}))"
    )
    wrapper = Wrapper(
        workdir,
        python_command(code),
        rank=5,
        forwarded="FWD",
        extra_env={"SHARED": "own", "FWD": "own", "ONLY_OWN": "o", "PMIX_RANK": "5"},
    )
    assert wrapper.wait() == 0
    line = wrapper.wait_for_line(agent.stdout, b"{")
    assert line.startswith(b"[algo-2 rank 5] ")
    seen = json.loads(line.split(b"] ", 1)[1])
    assert seen == {
        "SM_CURRENT_HOST": "algo-2",
        "SHARED": "host",  # the host file wins over the wrapper's own environment
        "FWD": "own",  # ... except for names forwarded with -x
        "ONLY_HOST": "h",
        "ONLY_OWN": None,
        "OMPI_COMM_WORLD_RANK": "5",
        "PMIX_RANK": "5",
    }


def test_without_agent_or_host_file_the_wrapper_still_runs(workdir):
    wrapper = Wrapper(
        workdir, python_command("import sys; sys.exit(5)"), extra_env={"SM_CURRENT_HOST": "solo"}
    )
    assert wrapper.wait() == 5


def test_missing_command_reports_127(workdir, agent):
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-1"})
    wrapper = Wrapper(workdir, [str(workdir / "no-such-program")], rank=2)
    assert wrapper.wait() == 127
    record = ended_record(agent.events)
    assert record.exit_code == 127
    assert "no-such-program" in record.stderr_tail[0]
    assert wrapper.wait_for_line(agent.stderr, b"cannot start").startswith(b"[algo-1 rank 2] ")


def test_rank_environment_precedence():
    host_env = {"SM_CURRENT_HOST": "algo-2", "A": "host", "FWD": "host", "OMPI_X": "host"}
    own_env = {
        "SM_CURRENT_HOST": "algo-1",
        "A": "own",
        "FWD": "own",
        "OMPI_X": "own",
        "OMPI_COMM_WORLD_RANK": "3",
        "PMIX_RANK": "3",
        "OPAL_PREFIX": "/usr",
        "SECRET": "not copied",
    }
    env = rank_environment(host_env, own_env, ["FWD", "NOT_SET"])
    assert env == {
        "SM_CURRENT_HOST": "algo-2",
        "A": "host",
        "FWD": "own",
        "OMPI_X": "own",
        "OMPI_COMM_WORLD_RANK": "3",
        "PMIX_RANK": "3",
        "OPAL_PREFIX": "/usr",
    }
    assert host_env["OMPI_X"] == "host"  # inputs are not modified


def test_current_rank_and_line_tag():
    assert current_rank({"OMPI_COMM_WORLD_RANK": "4", "PMIX_RANK": "9"}) == 4
    assert current_rank({"PMIX_RANK": "9"}) == 9
    assert current_rank({"RINGLEADER_RANK": "2"}) == 2
    assert current_rank({}) == 0
    assert tag("algo-1-ab12c", 11) == "[algo-1-ab12c rank 11] "


def test_terminate_while_the_child_is_being_started(monkeypatch):
    """A SIGTERM that arrives while the child is being spawned must still reach it.

    terminate() (mpirun's SIGTERM via the signal handler) between run()'s "already
    terminated?" check and the assignment of the child finds no child to signal; the child
    must then be sent SIGTERM as soon as it exists, not left running until the SIGKILL.
    """
    command = [PY, "-c", "import time; time.sleep(30)"]
    supervisor = RankSupervisor(command, dict(os.environ), None, "algo-1", 0, grace=2.0)
    real_popen = subprocess.Popen

    def popen_with_sigterm_arriving(*args, **kwargs):
        supervisor.terminate()  # as if the signal handler ran right now
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(rank_module.subprocess, "Popen", popen_with_sigterm_arriving)
    announced: list[int] = []
    started = time.monotonic()
    output = RankOutput("algo-1", 0, None)
    output.start(None)
    record = supervisor.run(output, announced.append)
    elapsed = time.monotonic() - started
    assert len(announced) == 1
    assert record.terminated is True
    assert (record.exit_code, record.signal) == (143, 15)
    assert elapsed < 1.5


def test_a_rank_that_closes_its_stdout_early_still_reports_its_end(workdir, agent):
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-2", "PATH": "/usr/bin:/bin"})
    code = (
        "import os, sys, time\n"
        "print('before close', flush=True)\n"
        "os.close(1)\n"
        "print('still working', file=sys.stderr, flush=True)\n"
        "time.sleep(0.2)\n"
        "sys.exit(4)\n"
    )
    wrapper = Wrapper(workdir, python_command(code), rank=2)
    assert wrapper.wait() == 4
    record = ended_record(agent.events)
    assert (record.exit_code, record.signal, record.stderr_tail) == (4, None, ("still working",))
    assert agent.lines(agent.stdout) == [b"[algo-2 rank 2] before close\n"]


def test_50_mb_without_a_newline_arrives_whole_in_bounded_pieces(workdir, agent):
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-2", "PATH": "/usr/bin:/bin"})
    size = 50 * 1024 * 1024
    code = (
        "import sys\n"
        f"block = b'\\x01x' * ({size} // 2 // 64)\n"  # control bytes: JSON escapes grow them
        "for _ in range(64): sys.stdout.buffer.write(block)\n"
        "sys.stdout.buffer.flush()\n"
    )
    wrapper = Wrapper(workdir, python_command(code), rank=1)
    assert wrapper.wait(timeout=120) == 0
    record = ended_record(agent.events)
    assert record.exit_code == 0
    pieces = agent.lines(agent.stdout)
    prefix = b"[algo-2 rank 1] "
    assert all(piece.startswith(prefix) and piece.endswith(b"\n") for piece in pieces)
    payload = b"".join(piece[len(prefix) : -1] for piece in pieces)
    assert len(payload) == size
    assert payload == b"\x01x" * (size // 2)
    assert max(len(piece) for piece in pieces) <= 256 * 1024 + len(prefix) + 1


def output_to(sock: socket.socket, log: Path, count: int) -> tuple[RankOutput, list[str]]:
    """A rank's output shipping over `sock` (a small send buffer), `count` lines put."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    output = RankOutput("algo-1", 0, log)
    output.start(Channel(sock))
    lines = [f"line {n:05d} {'x' * 60}" for n in range(count)]
    for start in range(0, len(lines), 100):
        output.put("stdout", lines[start : start + 100])
    return output, lines


def test_the_log_keeps_every_line_when_the_way_to_the_leader_is_stuck(tmp_path, capfd):
    """A leader that cannot keep up stops reading; when the rank ends, the wrapper gives up
    shipping after its timeout, but every line is in the rank's log (measured: 32 hosts x 2
    ranks at 2,000 lines/s each lost 250,000 lines from 15 rank logs before this)."""
    ours, stuck = socket.socketpair()  # nobody ever reads `stuck`
    log = tmp_path / "rank-0.log"
    output, lines = output_to(ours, log, 30_000)
    begun = time.monotonic()
    output.close(timeout=0.5)
    assert time.monotonic() - begun < 5.0, "close() is bounded by its timeout"
    assert log.read_text().splitlines() == lines
    note = capfd.readouterr().err
    assert "[algo-1 rank 0] [ringleader] the leader took none of this rank's output" in note
    assert f"the rank's log {log} has every line" in note
    stuck.close()  # the sender's pending send fails now
    output._sender.join(5)
    assert not output._sender.is_alive(), "the sender ends with its connection"
    assert "line " not in capfd.readouterr().out, "nothing shipped or printed after the note"
    ours.close()


def test_a_slow_leader_still_gets_every_line_when_the_rank_ends(tmp_path):
    """Giving up is for a stuck way to the leader, not a slow one: while shipping makes
    progress, close() keeps going past its timeout."""
    ours, theirs = socket.socketpair()
    received = bytearray()

    def read_slowly() -> None:
        while chunk := theirs.recv(8192):
            received.extend(chunk)
            time.sleep(0.01)  # about 800 KB/s: a 64 KB batch ships well within the timeout,
            # all of them together take longer

    reader = threading.Thread(target=read_slowly, daemon=True)
    reader.start()
    output, _ = output_to(ours, tmp_path / "rank-0.log", 15_000)
    begun = time.monotonic()
    output.close(timeout=0.5)
    assert time.monotonic() - begun > 0.5, "the drain took longer than the timeout"
    ours.close()
    reader.join(10)
    text = bytes(received).decode()
    assert set(re.findall(r"line (\d{5}) ", text)) == {f"{n:05d}" for n in range(15_000)}
    theirs.close()


class SlowHandOn:
    """A rank's output whose put() takes `seconds` (the leader is behind), shipping still
    moving (or, with `stalled`, not for a long time)."""

    def __init__(self, seconds: float, stalled: bool = False) -> None:
        self.seconds, self.stalled, self.lines = seconds, stalled, []

    def put(self, stream: str, lines: list[str]) -> None:
        time.sleep(self.seconds)
        self.lines.extend(lines)

    def stalled_for(self) -> float:
        return 100.0 if self.stalled else 0.0


@pytest.mark.parametrize(
    ("hand_on", "pipe_open", "finished", "waited_at_least"),
    [
        (SlowHandOn(1.0), False, True, 1.0),  # a slow leader: waited for, every line handed on
        (SlowHandOn(30.0, stalled=True), False, False, 0.0),  # shipping stuck: given up
        (SlowHandOn(0.0), True, False, 0.2),  # a stray process holds the pipe: given up
    ],
)
def test_a_pump_is_waited_for_while_its_lines_move(hand_on, pipe_open, finished, waited_at_least):
    read_end, write_end = os.pipe()
    os.write(write_end, b"last words\n")
    if not pipe_open:
        os.close(write_end)
    pump = Pump(read_end, "stdout", hand_on, 0)
    pump.start()
    begun = time.monotonic()
    pump.finish(read_idle=0.2, hand_on_stall=10.0)
    waited = time.monotonic() - begun
    assert (not pump.is_alive()) is finished
    assert waited >= waited_at_least - 0.05 and waited < 5.0
    if finished:
        assert hand_on.lines == ["last words"]
    if pipe_open:
        os.close(write_end)


def test_a_full_disk_stops_the_rank_log_but_never_the_rank(capfd, tmp_path):
    """/dev/full answers every write with ENOSPC, as the volume under output/data/logs does
    when a checkpoint fills it: the log stops with one warning, the lines still flow."""
    output = RankOutput("algo-1", 0, Path("/dev/full"))
    output.start(None)
    output.put("stdout", ["step 1", "step 2"])
    output.put("stdout", ["step 3"])
    output.close(timeout=5)
    out, err = capfd.readouterr()
    assert out.splitlines() == [
        "[algo-1 rank 0] step 1",
        "[algo-1 rank 0] step 2",
        "[algo-1 rank 0] step 3",
    ]
    warnings = [line for line in err.splitlines() if "log /dev/full stopped" in line]
    assert warnings == [
        "[algo-1 rank 0] [ringleader] the rank's log /dev/full stopped after 0 line(s): "
        "No space left on device; its output still goes to the leader"
    ], err


def test_a_ranks_end_is_when_it_was_reaped_not_after_the_cleanup(workdir, agent):
    """A helper that ignores SIGTERM keeps the wrapper busy for its whole stray grace after the
    rank exited; the record's end is the rank's own, so a bystander on another host is not
    taken for the first to fail because this cleanup took longer."""
    write_host_env(workdir, {"SM_CURRENT_HOST": "algo-2"})
    # The helper says when it ignores SIGTERM: under load its start can outlast the rank's.
    code = (
        "import subprocess, sys\n"
        "helper = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)'], "
        "stdout=subprocess.PIPE, start_new_session=True)\n"
        "helper.stdout.readline()\n"
        "print(f'stray={helper.pid}', flush=True)\n"
    )
    wrapper = Wrapper(workdir, python_command(code), rank=1, grace=20, abort_grace=2)
    stray_pid(wrapper, agent)
    assert wrapper.wait(timeout=20.0) == 0
    reported = time.time()
    record = ended_record(agent.events)
    assert reported - record.ended_at >= 2.0, "the end was taken after the 2 s cleanup"


def test_a_pid_the_kernel_gave_to_another_process_is_never_the_ranks():
    """Issue 23: the agent waits for and kills only the process a rank announced; after that
    process ended its PID may name a stranger, whose start time differs."""
    stranger = subprocess.Popen([PY, "-c", "import time; time.sleep(30)"])
    try:
        started = start_ticks(stranger.pid)
        assert started is not None
        assert same_process(stranger.pid, started)
        assert not same_process(stranger.pid, started - 1)  # the rank's, started earlier
        assert not same_process(stranger.pid, None)
    finally:
        stranger.kill()
        stranger.wait()
    assert not same_process(stranger.pid, started)  # gone
