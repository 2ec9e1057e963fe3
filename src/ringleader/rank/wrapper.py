"""Per-rank wrapper, launched by mpirun on every host: `python -m ringleader.rank ... -- CMD`.

It runs the user's command with this host's SageMaker environment, tags every output line
with host and rank, forwards signals, escalates SIGTERM to SIGKILL after a grace period, and
reports the rank's exit status, timing and stderr tail to the host agent so the leader can name
the root cause of a failure.
"""

import argparse
import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ringleader.config import timeouts
from ringleader.config.selection import RankSelection
from ringleader.core import exitcodes, paths
from ringleader.core.exiting import exit_at_once
from ringleader.core.exitnote import EXIT_DIR_VARIABLE, note_path, read_exit_note
from ringleader.core.hostenvfile import read_host_env
from ringleader.core.processes import Escalation, escalate, signal_group
from ringleader.core.proctimes import process_name, process_started_at
from ringleader.core.records import STDERR_TAIL_LINES, RankRecord
from ringleader.core.straggler import SAMPLE_RATE
from ringleader.rank.capture import Pump, RankOutput, say_on_stderr
from ringleader.rank.errorfile import ERROR_FILE_VARIABLE, clear_error_file, read_error_file
from ringleader.rank.progress import ProgressWatch
from ringleader.rank.stacks import py_spy_path, stack_environment, take_stacks
from ringleader.rank.steps import StepFinder
from ringleader.rank.tree import become_subreaper, end_descendants
from ringleader.rank.waits import WaitSampler
from ringleader.wire.messages import (
    Ack,
    DumpStacks,
    RankEnd,
    RankStart,
    Stacks,
    Terminate,
    UnknownMessage,
)
from ringleader.wire.protocol import Channel, ChannelClosed, ProtocolError

_MPI_PREFIXES = ("OMPI_", "PMIX_", "OPAL_", "ORTE_", "PRTE_")
_MPI_DAEMONS = ("orted", "prted")  # Open MPI 4's daemon, and PRRTE's in Open MPI 5
_FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
_REPORT_TIMEOUT = 10.0
# A rank's end waits for its output to reach the leader as long as it moves; a leader that
# takes none of it for this long (gone, or unable to keep up) gets no more of it.
_OUTPUT_STALL_SECONDS = 60.0
_PIPE_DRAIN_SECONDS = 2.0  # after the rank's tree ended, for the rest of its output


def rank_environment(
    host_env: Mapping[str, str], own_env: Mapping[str, str], forwarded: Sequence[str]
) -> dict[str, str]:
    """This host's environment, plus what MPI set up for the rank, plus what the user forwarded.

    The host file gives each rank its own host's SM_CURRENT_HOST and container variables;
    mpirun's variables are needed for MPI_Init; names forwarded with -x win over both.
    """
    env = dict(host_env)
    env.update({key: value for key, value in own_env.items() if key.startswith(_MPI_PREFIXES)})
    env.update({key: own_env[key] for key in forwarded if key in own_env})
    return env


def current_rank(env: Mapping[str, str]) -> int:
    for key in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "RINGLEADER_RANK"):
        if key in env:
            return int(env[key])
    return 0


class RankSupervisor:
    def __init__(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        cwd: str | None,
        host: str,
        rank: int,
        grace: float,
        stray_grace: float = 0.5,
        role: str | None = None,
        launch_times: tuple[float | None, float | None] = (None, None),
        attempt: int = 0,
    ) -> None:
        self._command, self._env, self._cwd = list(command), dict(env), cwd
        self.host, self.rank, self._grace, self.role = host, rank, grace, role
        self._launch_times = launch_times  # (MPI daemon, this wrapper) created at
        self._attempt = attempt
        self._stray_grace = stray_grace  # for processes the rank left behind when it ended
        self._child: subprocess.Popen[bytes] | None = None
        self._output: RankOutput | None = None
        self._terminated = threading.Event()
        # Reentrant: the SIGTERM handler may run on the main thread while run() holds it.
        self._lock = threading.RLock()
        self._escalation: Escalation | None = None  # the stop's signals still to come
        self._stopped_whole_job = False  # a stop of the job (terminate), not an abort
        self._sigterm_sent = False

    def terminate(self, grace: float | None = None) -> None:
        """The whole job stops: SIGTERM the rank now and SIGKILL it `grace` seconds later.

        It outranks an abort underway. The abort may be the stop's own echo: a rank on another
        host ended on the stop's SIGTERM, its mpi4py called MPI_Abort, and mpirun's daemon
        signalled this wrapper before the stop reached this host (ci25: rank 5 was killed
        0.5 s after it, never saying it got SIGTERM). The rank keeps the stop's grace."""
        with self._lock:
            if self._stopped_whole_job:
                return
            self._stopped_whole_job = True
            self._stop(0.0, self._grace if grace is None else grace)

    def abort(self, grace: float) -> None:
        """mpirun aborts the job because another rank failed: give the rank half of `grace` to
        end by itself (it may be the failing rank, still exiting with its own code), then
        SIGTERM, then SIGKILL at `grace`. Only the first stop of a rank counts."""
        with self._lock:
            if not self._terminated.is_set():
                self._stop(grace / 2, grace)

    def _stop(self, term_after: float, kill_after: float) -> None:
        """SIGTERM after `term_after` s (at once when 0), SIGKILL after `kill_after` s, in
        place of what an earlier stop had still to send; the rank gets one SIGTERM at most."""
        with self._lock:
            if self._escalation is not None:
                self._escalation.cancel()
            self._terminated.set()
            self._escalation = escalate(self._signal, term_after, kill_after)

    def _signal(self, signum: int) -> None:
        with self._lock:
            if signum == signal.SIGTERM and self._sigterm_sent:
                return
            if self.forward(signum) and signum == signal.SIGTERM:
                self._sigterm_sent = True

    def forward(self, signum: int) -> bool:
        """Send `signum` to the rank's whole process group; whether there was one to send to."""
        child = self._child
        if child is None or child.returncode is not None:
            return False
        signal_group(child.pid, signum)
        return True

    def run(
        self,
        output: RankOutput,
        on_started: Callable[[int], None],
        on_ended: Callable[[], None] = lambda: None,
    ) -> RankRecord:
        """Run the command to its end; `on_started` gets the child's PID once it runs,
        `on_ended` is called once it has ended, before what it left running is stopped (so that
        ringleader's own helpers of the rank are not among them)."""
        started = time.time()
        self._output = output
        error_file = self._env.get(ERROR_FILE_VARIABLE)
        if error_file:
            clear_error_file(Path(error_file))
        with self._lock:
            if self._terminated.is_set():
                return self._record(
                    started, exitcodes.SIGTERM_EXIT, None, ("stopped before start",)
                )
            try:
                # Own process group: signals reach the user's whole process tree, not us twice.
                self._child = subprocess.Popen(
                    self._command,
                    env=self._env,
                    cwd=self._cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                )
            except OSError as error:
                message = f"cannot start {self._command[0]!r}: {error}"
                output.put("stderr", [message])
                output.close(timeout=_REPORT_TIMEOUT)
                return self._record(started, 127, None, (message,))
            if self._terminated.is_set():
                # terminate() ran while the child was being spawned, when it had none to signal
                self._signal(signal.SIGTERM)
        assert self._child.stdout is not None and self._child.stderr is not None
        on_started(self._child.pid)
        pumps = [
            Pump(self._child.stdout.fileno(), "stdout", self._output, 0),
            Pump(self._child.stderr.fileno(), "stderr", self._output, STDERR_TAIL_LINES),
        ]
        for pump in pumps:
            pump.start()
        returncode = self._child.wait()
        ended = time.time()  # its end, before cleanup and draining its output take their time
        on_ended()
        cut_short = self._exit_cut_short(returncode)
        # Helpers the rank left behind (own session, daemons) would hold its pipes open.
        leftovers = end_descendants(self._stray_grace)
        for pump in pumps:
            pump.finish(_PIPE_DRAIN_SECONDS, _OUTPUT_STALL_SECONDS)
        if leftovers:
            note = "[ringleader] the rank had ended; stopped what it left running: "
            output.put("stdout", [note + ", ".join(leftovers)])
        tail = tuple(pumps[1].tail)
        if cut_short is not None:
            said = f"[ringleader] stopped while exiting with code {cut_short}: reported with it"
            output.put("stderr", [said])
            tail = (*tail, said)
        output.close(timeout=_OUTPUT_STALL_SECONDS)
        if cut_short is not None:
            code, signum = cut_short, None
        elif returncode < 0:
            code, signum = exitcodes.signal_exit_code(-returncode), -returncode
        else:
            code, signum = returncode, None
        recorded = read_error_file(Path(error_file)) if error_file and code != 0 else ()
        return self._record(started, code, signum, tail, recorded, ended)

    def _exit_cut_short(self, returncode: int) -> int | None:
        """The non-zero code the rank was exiting with when our stop's signal ended it."""
        directory = self._env.get(EXIT_DIR_VARIABLE)
        if returncode >= 0 or not self._terminated.is_set() or not directory:
            return None
        assert self._child is not None
        return read_exit_note(note_path(Path(directory), self._child.pid)) or None

    def _record(
        self,
        started: float,
        code: int,
        signum: int | None,
        tail: tuple[str, ...],
        error: tuple[str, ...] = (),
        ended: float | None = None,
    ) -> RankRecord:
        return RankRecord(
            rank=self.rank,
            host=self.host,
            exit_code=code,
            signal=signum,
            started_at=started,
            ended_at=time.time() if ended is None else ended,
            terminated=self._terminated.is_set(),
            stderr_tail=tail,
            error=error,
            role=self.role,
            first_output_at=self._output.first_output_at if self._output is not None else None,
            daemon_started_at=self._launch_times[0],
            wrapper_started_at=self._launch_times[1],
            attempt=self._attempt,
        )


def launch_times(own_env: Mapping[str, str]) -> tuple[float | None, float | None]:
    """When the MPI daemon that started this wrapper (its parent on a host mpirun reaches over
    ssh; mpirun's own host has none) and the wrapper itself were created, for the launcher's
    timeline; None where it cannot be known."""
    parent = os.getppid()
    under_daemon = "OMPI_COMM_WORLD_RANK" in own_env and process_name(parent) in _MPI_DAEMONS
    return (process_started_at(parent) if under_daemon else None), process_started_at()


def _connect_agent(path: str) -> Channel | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return Channel(sock)


def _listen_to_agent(
    channel: Channel,
    supervisor: RankSupervisor,
    acked: threading.Event,
    dump: Callable[[str], None],
) -> None:
    try:
        while True:
            try:
                message = channel.receive_message(timeout=None)
            except UnknownMessage:
                continue  # a newer agent's: nothing this wrapper acts on
            match message:
                case Terminate():
                    supervisor.terminate(message.grace)
                case Ack():
                    acked.set()
                case DumpStacks():
                    # py-spy takes a while: the next Terminate must not wait for it
                    threading.Thread(target=dump, args=(message.reason,), daemon=True).start()
    except (ChannelClosed, ProtocolError, OSError):
        acked.set()  # the agent is gone (or garbled): nobody will acknowledge


def _remove_rank_dir(rank_dir: Path) -> None:
    """Best-effort, with os alone: shutil (with bz2 and lzma) costs every rank's end 3-5 ms
    of CPU to import, and 0.5 MiB for its whole run if imported at the start."""
    for folder, _dirs, files in os.walk(rank_dir, topdown=False):
        for name in files:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def _help_formatter(prog: str) -> argparse.HelpFormatter:
    # With no width given, argparse imports shutil (with bz2 and lzma: 0.5 MiB in every rank's
    # wrapper) for the terminal's; a rank has none, and this is its fallback (80, less 2).
    return argparse.HelpFormatter(prog, width=78)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ringleader.rank", formatter_class=_help_formatter
    )
    parser.add_argument("--agent", default=str(paths.AGENT_SOCKET))
    parser.add_argument("--host-env", default=str(paths.HOST_ENV_FILE))
    parser.add_argument("--forwarded", default="", help="comma-separated -x variable names")
    parser.add_argument(
        "--grace",
        type=float,
        default=timeouts.DEFAULTS.sigterm_grace,
        help="SIGTERM to SIGKILL when the job is stopped (host agent)",
    )
    parser.add_argument(
        "--abort-grace",
        type=float,
        default=timeouts.DEFAULTS.abort_grace,
        help="SIGTERM to SIGKILL when mpirun aborts after another rank failed",
    )
    parser.add_argument("--cwd", default=None)
    parser.add_argument(
        "--log-dir", default=str(paths.LOG_DIR), help="per-rank logs go to DIR/<host>/rank-N.log"
    )
    parser.add_argument(
        "--relay-ranks",
        default="all",
        help='ranks whose output goes to the host agent ("all" or "0,3"); the log keeps all',
    )
    parser.add_argument(
        "--progress-interval",
        type=float,
        default=None,
        help="report the rank's progress (output, heartbeats) to the host agent this often "
        "(seconds; the hang watch); none: not reported",
    )
    parser.add_argument(
        "--step-regex",
        default=None,
        help="the rank's step in its output lines: the regex's first group "
        "(ringleader_step_regex, ringleader_step_metric)",
    )
    parser.add_argument(
        "--wait-period",
        type=float,
        default=None,
        metavar="SECONDS",
        help="sample the rank's stacks in periods this long and report how many wait in a "
        "collective (the straggler watch); none: not sampled",
    )
    parser.add_argument(
        "--wait-rate",
        type=int,
        default=SAMPLE_RATE,
        metavar="SAMPLES",
        help="stack samples a second in each --wait-period (ringleader_straggler_sample_rate)",
    )
    parser.add_argument(
        "--stack-timeout",
        type=float,
        default=timeouts.DEFAULTS.stack_dump,
        help="the bound on taking the rank's stacks when asked",
    )
    parser.add_argument(
        "--horovod-stall-check",
        default=None,
        metavar="SECONDS",
        help="HOROVOD_STALL_CHECK_TIME_SECONDS unless the rank's environment sets it",
    )
    parser.add_argument(
        "--attempt",
        type=int,
        default=0,
        help="which start of the job's ranks this is (RINGLEADER_ATTEMPT; 0, then one more "
        "per restart in place)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given after --")

    own_env = dict(os.environ)
    host_env = read_host_env(args.host_env)
    forwarded = [name for name in args.forwarded.split(",") if name]
    env = rank_environment(host_env if host_env is not None else own_env, own_env, forwarded)
    host = env.get("SM_CURRENT_HOST") or socket.gethostname()
    rank = current_rank(own_env)
    rank_dir = paths.RANKS_DIR / str(rank)
    watch = ProgressWatch(rank_dir / "progress")
    env = stack_environment(env, rank_dir / "stacks")
    env[paths.PROGRESS_FILE_VARIABLE] = str(watch.heartbeat)
    env[paths.ATTEMPT_VARIABLE] = str(args.attempt)
    env[EXIT_DIR_VARIABLE] = str(rank_dir / "exits")
    if args.horovod_stall_check is not None:
        env.setdefault("HOROVOD_STALL_CHECK_TIME_SECONDS", args.horovod_stall_check)
    become_subreaper()
    supervisor = RankSupervisor(
        command,
        env,
        args.cwd,
        host,
        rank,
        args.grace,
        args.abort_grace,
        own_env.get("RINGLEADER_ROLE") or None,
        launch_times(own_env),
        args.attempt,
    )

    def on_signal(signum: int, _frame: object) -> None:
        if signum == signal.SIGTERM:
            # Only mpirun's daemon signals us: it aborts the job because another rank failed.
            # A stop of the whole job comes through the host agent with the full grace period.
            supervisor.abort(args.abort_grace)
        else:
            supervisor.forward(signum)

    for signum in (signal.SIGTERM, *_FORWARDED_SIGNALS):
        signal.signal(signum, on_signal)

    channel = _connect_agent(args.agent)
    acked = threading.Event()
    relayed = rank in RankSelection.parse("--relay-ranks", args.relay_ranks)
    steps = None if args.step_regex is None else StepFinder(args.step_regex)
    log_path = Path(args.log_dir) / host / f"rank-{rank}.log"
    output = RankOutput(host, rank, log_path, relayed, steps)
    pid: list[int] = []  # the user process's, once it runs
    sampler = _wait_sampler(host, rank, args.wait_period, args.wait_rate, rank_dir / "waits")

    def dump(reason: str) -> None:
        if channel is None or not pid:
            return
        stacks = take_stacks(rank, host, pid[0], rank_dir / "stacks", args.stack_timeout)
        stacks = dataclasses.replace(stacks, evidence=tuple(output.evidence))
        with contextlib.suppress(ChannelClosed):
            channel.send(Stacks(reason, stacks))

    if channel is not None:
        threading.Thread(
            target=_listen_to_agent, args=(channel, supervisor, acked, dump), daemon=True
        ).start()

    def announce(started: int) -> None:
        # The host agent keeps the PID: after a stop it waits for the user's process even if
        # mpirun's daemon has killed this wrapper meanwhile.
        pid.append(started)
        if channel is not None:
            with contextlib.suppress(ChannelClosed):
                note = str(note_path(rank_dir / "exits", started))
                channel.send(RankStart(rank, host, started, args.attempt, note))
            if args.progress_interval is not None:
                if sampler is not None:
                    sampler.start(started)
                watch.report_to(channel, host, rank, output, args.progress_interval, sampler)

    output.start(channel)
    # the sampler's py-spy is ended with the rank, not found by the sweep of what it left
    record = supervisor.run(output, announce, sampler.stop if sampler else lambda: None)
    watch.stop()
    if channel is not None:
        with contextlib.suppress(ChannelClosed):
            channel.send(RankEnd(record))
            acked.wait(_REPORT_TIMEOUT)
    # Its heartbeat, faulthandler files and exit note; after the report: a wrapper killed
    # before it leaves the exit note to the agent.
    _remove_rank_dir(rank_dir)
    return record.exit_code


def _wait_sampler(
    host: str, rank: int, period: float | None, rate: int, directory: Path
) -> WaitSampler | None:
    """The straggler watch's sampler of the rank's stacks, when asked for and py-spy is here;
    one line on stderr if it has to stop."""

    def say(problem: str) -> None:
        say_on_stderr(host, rank, f"the straggler watch stopped sampling: {problem}")

    if period is None:
        return None
    path = py_spy_path()
    return None if path is None else WaitSampler(rank, path, period, rate, directory, say)


if __name__ == "__main__":
    exit_at_once(main())
