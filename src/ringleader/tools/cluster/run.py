"""`ringleader cluster run`: preflight, an agent on every host over ssh, the leader's output
relayed, every host's results fetched into one directory, the job's exit code returned.

With spares (`--spares K`), a spare replaces a host that fails its preflight, and after a host
is lost the job starts again (a new run, with its own job id) on the hosts left and spares in
place of the lost ones, its attempts continuing the last run's (ringleader_earlier_attempts).
"""

import base64
import concurrent.futures
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from ringleader.config.hyperparameters import as_count
from ringleader.config.job import MPI
from ringleader.config.timeouts import DEFAULTS
from ringleader.config.topology import elect_leader
from ringleader.core import exitcodes, paths
from ringleader.core.attempts import AttemptRecord, first_line
from ringleader.core.errors import ConfigError
from ringleader.core.jobfile import JobFileError, JobSummary, read_job_file
from ringleader.core.restart_policy import (
    DEFAULT,
    DEFAULT_POLICY,
    HEALTH,
    STRAGGLER,
    RestartPolicy,
    parse_restart_on,
)
from ringleader.output.console import LinePrinter
from ringleader.tools.cluster import install_remote, preflight, wheels
from ringleader.tools.cluster.agent import STACKS, STOP, AgentJob
from ringleader.tools.cluster.hostfile import ClusterHost
from ringleader.tools.cluster.jobroot import default_root
from ringleader.tools.cluster.preflight import Needs, Probe
from ringleader.tools.cluster.ssh import SshOptions, bootstrap_venv
from ringleader.tools.cluster.stream import ProgressNote, copy_while_flowing
from ringleader.tools.hostjob import command_hyperparameters
from ringleader.wire.auth import new_secret

SSH_FAILED = 255  # ssh's own exit code: the connection, not the command
FETCH_STALL_SECONDS = 60.0  # a results fetch is given up after this long without data


@dataclass(frozen=True)
class ClusterJob:
    hosts: tuple[ClusterHost, ...]
    command: tuple[str, ...]
    cwd: str
    processes_per_host: int
    distribution: str = MPI
    settings: Mapping[str, str] = field(default_factory=dict)  # ringleader_* without the prefix
    job_id: str = ""
    output_dir: Path | None = None
    remote_dir: str = field(default_factory=default_root)  # per user, 0700: see jobroot
    ssh: SshOptions = field(default_factory=SshOptions)
    preflight_timeout: float = 30.0
    bootstrap: bool = False
    min_free_bytes: int = 1 << 30
    mpi_options: str = ""  # sagemaker_mpi_custom_mpi_options
    env: Mapping[str, str] = field(default_factory=dict)  # --env, for every rank; never printed
    # --spares: hosts that stand by, in hostfile order; one takes the place of a host that
    # fails its preflight or (with restarts) is lost during the job
    spares: tuple[ClusterHost, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(host.name for host in self.hosts)

    @property
    def job_dir(self) -> str:
        return f"{self.remote_dir.rstrip('/')}/{self.job_id}"

    @property
    def results_dir(self) -> Path:
        return self.output_dir or Path("ringleader-output") / self.job_id

    @property
    def needs(self) -> Needs:
        return Needs(
            processes_per_host=self.processes_per_host,
            min_free_bytes=self.min_free_bytes,
            mpirun=self.distribution == MPI,
            cwd=self.cwd,
            job_root=self.remote_dir,
        )


def new_job_id() -> str:
    return f"cluster-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def cluster_hyperparameters(job: ClusterJob) -> dict[str, str]:
    """hyperparameters.json for every host, values JSON-encoded as SageMaker writes them."""
    return command_hyperparameters(
        job.command,
        job.cwd,
        job.distribution,
        job.processes_per_host,
        job.mpi_options,
        job.settings,
    )


def stop_grace(settings: Mapping[str, str]) -> float:
    """After a stop, how long each host waits before it kills what is left: the ranks' own
    SIGTERM grace, capped so nothing of the job outlives a stop by more than ~15 s."""
    try:
        grace = float(settings.get("sigterm_grace", DEFAULTS.sigterm_grace))
    except ValueError:
        grace = DEFAULTS.sigterm_grace
    return min(max(grace, 1.0), 12.0)


def job_exit_code(leader: int, others: Sequence[int]) -> int:
    """The job's exit code from each host's agent's, of which ssh's own 255 (the connection
    failed) says nothing (see exitcodes.job_exit_code)."""

    def known(code: int) -> int | None:
        return None if code == SSH_FAILED else code

    return exitcodes.job_exit_code(
        known(leader), [known(code) for code in others], lost=exitcodes.HOST_LOST
    )


def headline(job: ClusterJob) -> str:
    spares = ""
    if job.spares:
        count = len(job.spares)
        names = " ".join(host.name for host in job.spares)
        spares = f", {count} spare{'s' if count > 1 else ''} ({names})"
    return (
        f"==> job {job.job_id}: {len(job.hosts)} hosts x {job.processes_per_host} "
        f"({job.distribution}){spares}: {' '.join(job.command)}"
    )


# ------------------------------------------------------------------------------------ spares
# (pure) which hosts run the job when some failed their preflight or were lost, what the next
# run of the job is told about the earlier ones, and what the console says about it.

EARLIER_RUN_DIR = "run-{}"  # results of an earlier run: <results_dir>/run-<n>/<host>/


def split_spares(
    hosts: tuple[ClusterHost, ...], spares: int, source: str
) -> tuple[tuple[ClusterHost, ...], tuple[ClusterHost, ...]]:
    """The job's hosts and its spares (the last `spares` hosts, in hostfile order); `source`
    is what listed the hosts, for the error ("the hostfile")."""
    if spares < 0:
        raise ConfigError("--spares", f"expected a whole number of at least 0, got {spares}")
    if spares >= len(hosts):
        raise ConfigError(
            "--spares",
            f"{spares} {'spare leaves' if spares == 1 else 'spares leave'} no host to run "
            f"the job on ({source} has {len(hosts)})",
        )
    return hosts[: len(hosts) - spares], hosts[len(hosts) - spares :]


@dataclass(frozen=True)
class Swap:
    """Hosts taken out of the job and the spares that take their places."""

    hosts: tuple[ClusterHost, ...]  # the job's hosts after it: a spare in its host's place
    spares: tuple[ClusterHost, ...]  # the spares still left
    replaced: tuple[tuple[ClusterHost, ClusterHost], ...] = ()  # (host, spare), in order
    unreplaced: tuple[ClusterHost, ...] = ()  # hosts out, with no spare left for them


def swap_in_spares(
    hosts: Sequence[ClusterHost], spares: Sequence[ClusterHost], out: Collection[str]
) -> Swap:
    """Each host named in `out`, in the job's order, replaced by the first spare left."""
    left = list(spares)
    kept: list[ClusterHost] = []
    replaced: list[tuple[ClusterHost, ClusterHost]] = []
    unreplaced: list[ClusterHost] = []
    for host in hosts:
        if host.name not in out:
            kept.append(host)
        elif left:
            spare = left.pop(0)
            kept.append(spare)
            replaced.append((host, spare))
        else:
            kept.append(host)
            unreplaced.append(host)
    return Swap(tuple(kept), tuple(left), tuple(replaced), tuple(unreplaced))


def after_preflight(job: ClusterJob, failed: Collection[str]) -> Swap:
    """The job's hosts once spares that passed their preflight replace hosts that failed it."""
    fit = [spare for spare in job.spares if spare.name not in failed]
    return swap_in_spares(job.hosts, fit, failed)


def replaced_at_preflight(host: ClusterHost, problems: Sequence[str], spare: ClusterHost) -> str:
    return (
        f"==> {host.name} failed its preflight ({'; '.join(problems)}): "
        f"replaced by spare {spare.name}"
    )


def restart_policy(settings: Mapping[str, str]) -> RestartPolicy:
    """ringleader_restart_on (the default when not set; an unreadable value is the hosts' to
    refuse)."""
    try:
        return parse_restart_on("ringleader_restart_on", settings.get("restart_on", DEFAULT))
    except ConfigError:
        return DEFAULT_POLICY


def max_restarts(settings: Mapping[str, str]) -> int:
    """ringleader_max_restarts (0 when not set; an unreadable value is the hosts' to refuse)."""
    try:
        return as_count("ringleader_max_restarts", settings.get("max_restarts", 0))
    except ConfigError:
        return 0


def lost_in_run(
    summary: JobSummary | None, earlier: int, names: Sequence[str], codes: Mapping[str, int]
) -> tuple[str, ...]:
    """The hosts a run that ended with HOST_LOST lost, in the job's order: those its last
    attempt names (the leader's job.json), those whose agent's connection failed (ssh's 255),
    and the leader when its job.json could not be read. `earlier`: attempts before the run."""
    gone = {name for name in names if codes.get(name) == SSH_FAILED}
    if summary is None:
        gone.add(elect_leader(names))
    else:
        mine = [each for each in summary.attempts if each.attempt >= earlier]
        if mine:
            gone.update(mine[-1].lost)
    return tuple(name for name in names if name in gone)


def run_attempts(
    summary: JobSummary | None,
    earlier: Sequence[AttemptRecord],
    names: Sequence[str],
    started: float,
    ended: float,
    lost: Sequence[str],
) -> tuple[AttemptRecord, ...]:
    """Every attempt of the job up to the end of a run that lost hosts: the leader's job.json
    has them; when it could not be read, or the run ended before its first attempt (a host
    lost as it started), the run counts as one attempt of its own."""
    if summary is not None:
        attempts = summary.attempts
        numbered = [each.attempt for each in attempts] == list(range(len(attempts)))
        if numbered and len(attempts) > len(earlier):
            return attempts
    if summary is not None and summary.failure is not None:
        cause = first_line(summary.failure) or ""
    else:
        cause = f"Host(s) {', '.join(lost) or '?'} lost; the leader's job.json was not fetched."
    record = AttemptRecord(
        attempt=len(earlier),
        started_at=started,
        ended_at=ended,
        exit_code=exitcodes.HOST_LOST,
        cause=cause,
        hosts=tuple(names),
        progressed=summary is None,  # unknown then; else no attempt of it ever started
        lost=tuple(lost),
    )
    return (*earlier, record)


def replacement_note(swap: Swap) -> str:
    return "; ".join(f"{host.name} replaced by spare {spare.name}" for host, spare in swap.replaced)


def amend_last(attempts: Sequence[AttemptRecord], swap: Swap) -> tuple[AttemptRecord, ...]:
    """The attempts with the last one's cause naming the spares that replace its lost hosts."""
    last = attempts[-1]
    note = replacement_note(swap)
    cause = f"{last.cause} ({note})" if last.cause else f"({note})"
    lost = (*last.lost, *(host.name for host, _ in swap.replaced if host.name not in last.lost))
    return (*attempts[:-1], replace(last, cause=cause, lost=lost))


def restart_refusal(attempts: Sequence[AttemptRecord], most: int) -> str | None:
    """Why a run that lost hosts is not started again on spares; None: it is. The budget
    counts every attempt of the job, whichever run made it."""
    if most <= 0:
        return "no restart without --max-restarts (ringleader_max_restarts is 0)"
    if attempts and attempts[-1].attempt >= most:
        return f"no restart left (--max-restarts {most})"
    return None


def next_run(
    job: ClusterJob, job_id: str, swap: Swap, attempts: Sequence[AttemptRecord]
) -> ClusterJob:
    """The job again on `swap`'s hosts: its own job id (nothing of the last run's state on the
    hosts mixes in), the same results directory, the attempts so far as its earlier ones."""
    settings = dict(job.settings)
    settings["earlier_attempts"] = json.dumps([each.to_json() for each in attempts])
    return replace(
        job,
        hosts=swap.hosts,
        spares=swap.spares,
        job_id=job_id,
        settings=settings,
        output_dir=job.results_dir,
    )


def restart_line(lost: Sequence[str], swap: Swap, attempt: int, most: int) -> str:
    names = " ".join(host.name for host in swap.hosts)
    spares = ", ".join(f"spare {spare.name} replaces {host.name}" for host, spare in swap.replaced)
    return (
        f"==> {', '.join(lost)} lost: restarting the job on {names} ({spares}), "
        f"attempt {attempt} (restart {attempt} of {most})"
    )


def no_restart_line(lost: Sequence[str], swap: Swap | None, why: str | None) -> str:
    """Why a run that lost hosts ends the job (exit code 75)."""
    code = exitcodes.HOST_LOST
    if not lost:
        return (
            f"==> a host was lost, but neither the leader's job.json nor a connection says "
            f"which: no spare replaces it; the job ends with exit code {code}"
        )
    if why is None and swap is not None and swap.unreplaced:
        missing = ", ".join(host.name for host in swap.unreplaced)
        why = f"no spare left for {missing}"
    return f"==> {', '.join(lost)} lost: {why}; the job ends with exit code {code}"


@dataclass(frozen=True)
class RunEnded:
    """What one run of the job ended with: the facts `after_run` decides from."""

    exit_code: int  # the job's, from every host's code (job_exit_code)
    codes: Mapping[str, int]  # each host's
    summary: JobSummary | None  # the leader's job.json, when it was fetched
    started: float
    ended: float
    interrupted: bool = False  # Ctrl-C or SIGTERM reached the runner


@dataclass(frozen=True)
class EndJob:
    """The job ends with `exit_code`; the results stay in the results directory."""

    exit_code: int
    lines: tuple[str, ...]


@dataclass(frozen=True)
class RunAgain:
    """The job starts again on spares: the last run's results move to run-<n>/."""

    exit_code: int  # the last run's
    job: ClusterJob
    earlier: tuple[AttemptRecord, ...]
    lines: tuple[str, ...]


def after_run(
    job: ClusterJob, earlier: tuple[AttemptRecord, ...], next_id: str, ended: RunEnded
) -> EndJob | RunAgain:
    """After a run: the job ends, or, when hosts were lost, a spare is left for each of them,
    restarts are left and nobody stopped the runner, it starts again on spares (a new run,
    `next_id`, its attempts continuing these)."""
    code = ended.exit_code
    said = f"==> job {job.job_id} ended: exit code {code}"
    if code in REPLACED and job.spares and not ended.interrupted:
        return _replace_named(job, earlier, next_id, ended, said)
    if code != exitcodes.HOST_LOST or not job.spares:
        return EndJob(code, (said,))
    lost = lost_in_run(ended.summary, len(earlier), job.names, ended.codes)
    attempts = run_attempts(ended.summary, earlier, job.names, ended.started, ended.ended, lost)
    swap = swap_in_spares(job.hosts, job.spares, lost)
    most = max_restarts(job.settings)
    why = "stopped (Ctrl-C or SIGTERM)" if ended.interrupted else restart_refusal(attempts, most)
    if not lost or why is not None or swap.unreplaced:
        return EndJob(code, (said, no_restart_line(lost, swap, why)))
    amended = amend_last(attempts, swap)
    again = restart_line(lost, swap, len(amended), most)
    return RunAgain(code, next_run(job, next_id, swap, amended), amended, (said, again))


@dataclass(frozen=True)
class Replaced:
    """A run's end whose hosts the leader's job.json names, for a spare to replace."""

    cause: str  # the restart policy's cause, which must allow it
    what: str  # "failed its health check"
    hosts: Callable[[JobSummary], tuple[str, ...]]


REPLACED = {
    exitcodes.HEALTH_CHECK_FAILED: Replaced(
        HEALTH, "failed its health check", lambda summary: summary.unhealthy
    ),
    exitcodes.STRAGGLER: Replaced(
        STRAGGLER,
        "was a straggler",
        lambda summary: tuple(dict.fromkeys(e.host for e in summary.stragglers[-1:])),
    ),
}


def _replace_named(
    job: ClusterJob, earlier: tuple[AttemptRecord, ...], next_id: str, ended: RunEnded, said: str
) -> EndJob | RunAgain:
    """Hosts the leader's job.json names (that failed their health checks, or the straggler
    the job was stopped for): a spare in each one's place, the job again as a new run; no
    restart is spent (each replacement takes a spare). With a spare missing, job.json not
    fetched, or the cause not among ringleader_restart_on's, the job ends with the run's
    code."""
    code = ended.exit_code
    replaced = REPLACED[code]
    named = replaced.hosts(ended.summary) if ended.summary is not None else ()
    swap = swap_in_spares(job.hosts, job.spares, named)
    ends = f"the job ends with exit code {code}"
    refused = restart_policy(job.settings).refuses(replaced.cause, code)
    if refused is not None:
        line = f"==> no spare replaces a host that {replaced.what}: {refused}; {ends}"
        return EndJob(code, (said, line))
    if not named:
        why = "the leader's job.json, which names it, was not fetched: no spare replaces it"
        return EndJob(code, (said, f"==> a host {replaced.what}, but {why}; {ends}"))
    if swap.unreplaced:
        missing = ", ".join(host.name for host in swap.unreplaced)
        line = f"==> {', '.join(named)} {replaced.what}: no spare left for {missing}"
        return EndJob(code, (said, f"{line}; {ends}"))
    attempts = ended.summary.attempts if ended.summary is not None else ()
    attempts = attempts or earlier
    names = " ".join(host.name for host in swap.hosts)
    line = (
        f"==> {', '.join(named)} {replaced.what}: starting the job again on {names} "
        f"({replacement_note(swap)})"
    )
    return RunAgain(code, next_run(job, next_id, swap, attempts), tuple(attempts), (said, line))


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class ClusterRun:
    """`local_host`: the host this runs on (a detached job's runner on the leader), whose agent
    is started directly instead of over ssh."""

    def __init__(
        self, job: ClusterJob, stream: IO[str] = sys.stdout, local_host: str | None = None
    ) -> None:
        self.job = job
        self.console = LinePrinter(stream)
        self.local_host = local_host
        self._agents: dict[str, subprocess.Popen[bytes]] = {}
        self._interrupts = 0

    def run(self) -> int:
        self.console.line(headline(self.job))
        if self.job.spares and max_restarts(self.job.settings) == 0:
            self.console.line(
                "==> note: spares replace hosts that fail their preflight; a host lost during "
                "the job ends it (exit code 75) unless --max-restarts is at least 1"
            )
        code = self.preflight()
        if code is not None:
            return code
        return self.launch()

    def launch(self) -> int:
        """The job on every host (preflight passed), its results fetched; its exit code. After
        a host loss, with spares and restarts left, the job again on spares (a new run)."""
        previous = {number: signal.signal(number, self._on_interrupt) for number in STOP_SIGNALS}
        previous[signal.SIGQUIT] = signal.signal(signal.SIGQUIT, self._on_quit)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # a detached runner's
        try:
            return self._runs()
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    def _runs(self) -> int:
        """Run the job, then again on spares while after_run says so."""
        first_id, run_number = self.job.job_id, 0
        earlier: tuple[AttemptRecord, ...] = ()
        while True:
            job = self.job
            started = time.time()
            codes = self._run_agents()
            leader = elect_leader(job.names)
            exit_code = job_exit_code(codes[leader], [codes[name] for name in job.names])
            fetched = self._fetch_all()
            # job.json names the lost, sick or straggling hosts a spare may replace
            named = exit_code == exitcodes.HOST_LOST or exit_code in REPLACED
            summary = self._job_summary(leader) if named else None
            ended = RunEnded(
                exit_code, codes, summary, started, time.time(), bool(self._interrupts)
            )
            decision = after_run(job, earlier, f"{first_id}-r{run_number + 1}", ended)
            if isinstance(decision, EndJob):
                self._print_results(fetched, codes, job.results_dir)
                for line in decision.lines:
                    self.console.line(line)
                return decision.exit_code
            kept = job.results_dir / EARLIER_RUN_DIR.format(run_number)
            self._keep_results(job.hosts, kept)
            self._print_results(fetched, codes, kept)
            for line in decision.lines:
                self.console.line(line)
            earlier, run_number = decision.earlier, run_number + 1
            self.job, self._agents = decision.job, {}
            self.console.line(headline(self.job))

    def _job_summary(self, leader: str) -> JobSummary | None:
        """The leader's job.json as fetched, if it was."""
        path = self.job.results_dir / leader / "output" / "data" / "job.json"
        try:
            return read_job_file(path)
        except (OSError, JobFileError):
            return None

    def _keep_results(self, hosts: Sequence[ClusterHost], into: Path) -> None:
        """A run's fetched results out of the way of the next run's: into <results>/run-<n>/."""
        into.mkdir(parents=True, exist_ok=True)
        for host in hosts:
            source, target = self.job.results_dir / host.name, into / host.name
            if source.exists():
                if target.exists():  # an older job's, with the same --output
                    shutil.rmtree(target)
                source.rename(target)

    # ------------------------------------------------------------------------------ preflight
    def preflight(self) -> int | None:
        """None when every host can run the job; else the exit code (nothing was launched)."""
        job, needs = self.job, self.job.needs
        names = list(wheels.requirement_closure("ringleader"))  # what any host may need
        started = time.monotonic()
        everyone = (*job.hosts, *job.spares)
        results = preflight.probe_hosts(everyone, job.ssh, needs, names, job.preflight_timeout)
        if job.bootstrap:
            results = self._bootstrap(results, names)
        self.console.line(f"==> preflight ({time.monotonic() - started:.1f} s):")
        for row in preflight.table(results, needs):
            self.console.line(f"    {row}")
        if job.spares:
            self.console.line(f"    spares: {' '.join(host.name for host in job.spares)}")
        found = {result.host.name: preflight.problems(result, needs) for result in results}
        failed = {name for name, problems in found.items() if problems}
        swap = after_preflight(job, failed)
        for host, spare in swap.replaced:
            self.console.line(replaced_at_preflight(host, found[host.name], spare))
        if not swap.unreplaced:
            for unfit in job.spares:
                if unfit.name in failed:
                    problems = "; ".join(found[unfit.name])
                    self.console.line(
                        f"==> spare {unfit.name} failed its preflight ({problems}): not used"
                    )
            self.job = replace(job, hosts=swap.hosts, spares=swap.spares)
            return None
        # what stops the job: its hosts that failed with no spare left, and the spares that failed
        spares = {host.name for host in job.spares}
        stopping = {host.name for host in swap.unreplaced} | (spares & failed)
        for result in results:
            if result.host.name not in stopping:
                continue
            role = " (a spare)" if result.host.name in spares else ""
            for problem in found[result.host.name]:
                self.console.line(
                    f"error: {result.host.address} ({result.host.origin}){role}: {problem}"
                )
        self.console.line("==> nothing was launched")
        unreplaced = {host.name for host in swap.unreplaced}
        unreachable = any(
            result.facts is None for result in results if result.host.name in unreplaced
        )
        return exitcodes.HOST_UNREACHABLE if unreachable else exitcodes.CONFIG_ERROR

    def _bootstrap(self, results: list[Probe], names: Sequence[str]) -> list[Probe]:
        job, needs = self.job, self.job.needs

        def wants(result: Probe) -> bool:
            facts = result.facts
            return (
                facts is not None
                and facts.ringleader != needs.ringleader
                and preflight.python_problem(facts.python_version, facts.python) is None
            )

        targets = [result for result in results if wants(result)]
        if not targets:
            return results
        venv = f"~/{bootstrap_venv(job.ssh.remote_python)}"
        installed_here = {name: wheels.installed_wheel_tag(name) for name in names}
        packed: dict[str, tuple[str, bytes]] = {}
        for result in targets:
            assert result.facts is not None
            facts = result.facts
            host = wheels.HostPython(
                preflight.minor_version(facts.python_version), facts.implementation, facts.machine
            )
            plan = wheels.plan_bootstrap(
                wheels.requirement_closure("ringleader", host.version),
                facts.versions,
                installed_here,
                host,
            )
            for name in plan.shipped:
                if name not in packed:
                    packed[name] = wheels.pack(name)
            self.console.line(
                f"==> bootstrap {result.host.address}: installing "
                f"{', '.join(packed[name][0] for name in plan.shipped)} into {venv} "
                f"(Python {facts.python_version}){plan.index_note(host)}"
            )
            items = [
                f"wheel\t{packed[name][0]}\t{base64.b64encode(packed[name][1]).decode()}"
                for name in plan.shipped
            ]
            items += [f"index\t{requirement}" for requirement in plan.from_index]
            payload = "".join(f"{item}\n" for item in items).encode()
            argv = job.ssh.python(
                result.host.address, ["-c", inspect.getsource(install_remote), venv]
            )
            try:
                done = subprocess.run(
                    argv, input=payload, capture_output=True, timeout=600, check=False
                )
                said = done.stdout if done.returncode == 0 else done.stderr
                lines = said.decode(errors="replace").strip().splitlines()
                outcome = lines[-1] if lines else f"exit code {done.returncode}"
            except subprocess.TimeoutExpired:
                outcome = "no answer within 600 s"
            self.console.line(f"    {result.host.address}: {outcome}")
        again = preflight.probe_hosts(
            [result.host for result in targets], job.ssh, needs, names, job.preflight_timeout
        )
        redone = {result.host.address: result for result in again}
        return [redone.get(result.host.address, result) for result in results]

    # --------------------------------------------------------------------------------- agents
    def _run_agents(self) -> dict[str, int]:
        job = self.job
        hyperparameters = cluster_hyperparameters(job)
        grace = stop_grace(job.settings)
        secret = new_secret()  # every host of this job, and only them (over ssh's stdin)
        pumps = []
        for host in job.hosts:
            spec = AgentJob(
                job=job.job_id,
                job_dir=job.job_dir,
                hosts=job.names,
                current_host=host.name,
                hyperparameters=hyperparameters,
                grace=grace,
                env=job.env,
                secret=secret,
            )
            agent = subprocess.Popen(
                self._agent_argv(host),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches us, and we stop the job in order
            )
            assert agent.stdin is not None
            agent.stdin.write((spec.to_json() + "\n").encode())
            agent.stdin.flush()
            self._agents[host.name] = agent
            if self._interrupts:  # stopped while the agents were being started
                self._tell(agent, STOP)
            pump = threading.Thread(target=self._relay, args=(host, agent), daemon=True)
            pump.start()
            pumps.append(pump)
        leader = elect_leader(job.names)
        codes = {leader: self._agents[leader].wait()}
        # The leader has told every host the verdict; one that does not end within the
        # finish timeout and the grace is stopped, then cut off.
        deadline = time.monotonic() + DEFAULTS.finish + grace
        for name, agent in self._agents.items():
            if name != leader:
                codes[name] = self._wait_or_stop(name, agent, deadline, grace)
        for pump in pumps:
            pump.join(timeout=5)
        return {name: codes[name] for name in job.names}

    def _agent_argv(self, host: ClusterHost) -> list[str]:
        if host.name == self.local_host:
            return [sys.executable, "-m", "ringleader.tools.cluster.agent"]
        return self.job.ssh.python(host.address, ["-m", "ringleader.tools.cluster.agent"])

    def _wait_or_stop(
        self, name: str, agent: "subprocess.Popen[bytes]", deadline: float, grace: float
    ) -> int:
        try:
            return agent.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            self.console.line(f"==> {name} did not end after the job's verdict: stopping it")
        self._tell(agent, STOP)
        try:
            return agent.wait(timeout=grace + 5)
        except subprocess.TimeoutExpired:
            agent.kill()
            return agent.wait()

    @staticmethod
    def _tell(agent: "subprocess.Popen[bytes]", line: str) -> None:
        try:
            assert agent.stdin is not None
            agent.stdin.write(f"{line}\n".encode())
            agent.stdin.flush()
        except (OSError, ValueError):
            pass

    def _relay(self, host: ClusterHost, agent: "subprocess.Popen[bytes]") -> None:
        assert agent.stdout is not None
        for raw in agent.stdout:
            self.console.line(raw.decode(errors="replace"))

    def _on_interrupt(self, signum: int, _frame: object) -> None:
        self._interrupts += 1
        first = self._interrupts == 1
        threading.Thread(target=self._stop_agents, args=(first, signum), daemon=True).start()

    def _on_quit(self, _signum: int, _frame: object) -> None:
        """Ctrl-\\: the leader shows every rank's stacks, grouped; the job goes on."""
        agent = self._agents.get(elect_leader(self.job.names))
        if agent is not None:
            self.console.line("==> Ctrl-\\: taking every rank's stacks")
            threading.Thread(target=self._tell, args=(agent, STACKS), daemon=True).start()

    def _stop_agents(self, graceful: bool, signum: int = signal.SIGINT) -> None:
        if graceful:
            cause = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            self.console.line(
                f"==> {cause}: stopping the job on every host (SIGTERM to the ranks; "
                f"{cause} again to cut the connections, which stops them too)"
            )
        for agent in list(self._agents.values()):
            if graceful:
                self._tell(agent, STOP)
            else:
                agent.kill()

    # -------------------------------------------------------------------------------- results
    def _fetch_all(self) -> dict[ClusterHost, str | None]:
        """Every host's results into the results directory; each one's problem, if any."""
        job = self.job
        job.results_dir.mkdir(parents=True, exist_ok=True)
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(job.hosts))) as pool:
            return dict(zip(job.hosts, pool.map(self._fetch, job.hosts), strict=True))

    def _print_results(
        self, fetched: Mapping[ClusterHost, str | None], codes: Mapping[str, int], where: Path
    ) -> None:
        self.console.line(f"==> results in {where}/<host>/:")
        for host, problem in fetched.items():
            result = _result_line(where / host.name)
            note = f" (fetch failed: {problem})" if problem else ""
            self.console.line(f"    {host.name:<20} exit {codes[host.name]:>3}  {result}{note}")

    def _fetch(self, host: ClusterHost) -> str | None:
        """This host's output/ and model/ into the results directory; the problem, if any.
        It runs as long as data moves (a large model/ takes what it takes) and is given up
        after FETCH_STALL_SECONDS without any; it never changes the job's exit code."""
        destination = self.job.results_dir / host.name
        destination.mkdir(parents=True, exist_ok=True)
        remote = ["tar", "-C", f"{self.job.job_dir}/ml", "-cf", "-", "output", "model"]
        local = host.name == self.local_host
        sender = subprocess.Popen(
            remote if local else self.job.ssh.command(host.address, remote),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        receiver = subprocess.Popen(
            receive_argv(destination),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert sender.stdout is not None and receiver.stdin is not None
        note = ProgressNote(self.console.line, f"==> fetching {host.name}'s results")
        problem = copy_while_flowing(sender.stdout, receiver.stdin, FETCH_STALL_SECONDS, note)
        if problem is not None:
            sender.kill()
            receiver.kill()
        try:  # both have their data (or were killed): they end at once (communicate closes
            # the receiver's stdin, which ends its input)
            sender_err = sender.communicate(timeout=FETCH_STALL_SECONDS)[1]
            receiver_err = receiver.communicate(timeout=FETCH_STALL_SECONDS)[1]
        except subprocess.TimeoutExpired:
            sender.kill()
            receiver.kill()
            return f"tar did not end within {FETCH_STALL_SECONDS:g} s of its data"
        if problem is not None:
            return problem
        if sender.returncode != 0 or receiver.returncode != 0:
            text = (sender_err + receiver_err).decode(errors="replace").strip()
            return text.splitlines()[-1] if text else "tar failed"
        return None


def receive_argv(destination: Path) -> list[str]:
    """tar extracting a host's results here. What a job wrote is not trusted: run as root, tar
    would keep its files' owners (any uid of that host) and setuid/setgid bits; here they
    belong to whoever fetches them, with modes as that user's umask allows and no
    setuid/setgid (GNU tar and bsdtar both drop those bits without --same-permissions)."""
    return ["tar", "--no-same-owner", "--no-same-permissions", "-xf", "-", "-C", str(destination)]


def _result_line(host_dir: Path) -> str:
    failure = host_dir / "output" / "failure"
    if failure.is_file():
        lines = failure.read_text(errors="replace").strip().splitlines()
        return f"failure: {lines[0] if lines else ''}"
    if (host_dir / "output" / "success").is_file():
        return "success"
    return "no result file"


def with_defaults(job: ClusterJob) -> ClusterJob:
    return replace(job, job_id=job.job_id or new_job_id(), cwd=job.cwd or os.getcwd())


UNIX_SOCKET_PATH_MAX = 107  # bytes of sun_path on Linux, less the terminating NUL


def check_remote_dir(job: ClusterJob) -> None:
    """The job's run directory holds the host's Unix sockets (the agent's, sshd's readiness),
    whose paths Linux limits to 107 bytes: a long --remote-dir made every host exit 70. It
    must be absolute: a relative one would be taken from each host's home directory, which
    may be shared, and its ownership is checked on the way from /."""
    if not job.remote_dir.startswith("/"):
        raise ConfigError(
            "--remote-dir", f"{job.remote_dir!r} is not an absolute path (e.g. /tmp/my-jobs)"
        )
    longest = max(paths.AGENT_SOCKET.name, paths.SSHD_NOTIFY_SOCKET.name, key=len)
    socket_path = f"{job.job_dir}/run/{longest}"
    excess = len(socket_path.encode()) - UNIX_SOCKET_PATH_MAX
    if excess > 0:
        allowed = len(job.remote_dir.rstrip("/").encode()) - excess
        raise ConfigError(
            "--remote-dir",
            f"{job.remote_dir!r} is too long: the job's socket {socket_path} would be "
            f"{len(socket_path.encode())} bytes, and Linux allows {UNIX_SOCKET_PATH_MAX}; "
            f"use a directory of at most {allowed} bytes",
        )
