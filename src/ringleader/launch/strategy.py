"""How ranks are started: the one seam every way of starting them plugs into.

A strategy says what each host must set up first (`setup`: sshd, or nothing), how many ranks
the job has, the command that starts them on the leader (`prepare`, called once the workers
are up, since choosing the interface needs their addresses) and on a worker (`worker_plan`),
how the launcher's own output is read (`LaunchPlan.output`) and the end-of-job rules the
leader applies (`LaunchPlan.policy`). `launch/select.py` picks one from the configuration;
supervision never asks which one it has. Each rank runs under the per-rank wrapper
(`python -m ringleader.rank`), which reports to its host's agent whatever started it.
"""

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ringleader.config.job import JobConfig
from ringleader.core import paths
from ringleader.core.attempts import RESTART_PROGRESS_INTERVAL
from ringleader.core.errors import ConfigError
from ringleader.core.progress import report_interval
from ringleader.launch.health import port_taken
from ringleader.launch.netif import InterfaceChoice, choose_interface, local_interfaces, resolve
from ringleader.launch.process import PLAIN_OUTPUT, OutputReader
from ringleader.launch.spawn import SpawnSpec, spawn_argv

Logger = Callable[[str], None]
# (host, its sshd's public key from its hello, timeout) -> problem or None
SshCheck = Callable[[str, str | None, float], str | None]


@dataclass(frozen=True)
class EndPolicy:
    """When the job is over and who may be blamed: the strategy's rules, the leader's loop."""

    launcher_name: str = "mpirun"  # as the verdict names the leader's launcher
    # Hosts besides the leader whose own launcher must exit before the job is over.
    other_launchers: frozenset[str] = frozenset()
    # The leader's launcher holds every rank: once they were told to stop and all ended,
    # nothing is left for it to wait for.
    launcher_holds_every_rank: bool = True
    # Once every rank reported, the ranks' records decide (the launcher's code only says how
    # they ended).
    ranks_decide: bool = False
    # One rank failing stops every other rank at once through our own channel (mpirun's own
    # abort takes seconds across many hosts).
    rank_failure_stops_all: bool = True
    # A rank whose end blames another (MPI_Abort's bystanders) never starts a stop itself.
    blamed_ranks_start_no_stop: bool = True
    # Jobs with roles: once these ranks ended the rest is stopped (parameter servers).
    main_ranks: frozenset[int] | None = None


def spawned_policy(spec: SpawnSpec, leader: str, launcher_name: str) -> EndPolicy:
    """Every host in `spec` runs its own launcher; the job ends when each has exited."""
    spawned_here = leader in spec.launching_hosts
    return EndPolicy(
        launcher_name="the rank launcher" if spawned_here else launcher_name,
        other_launchers=frozenset(spec.launching_hosts) - {leader},
        launcher_holds_every_rank=False,
        ranks_decide=spawned_here,
        blamed_ranks_start_no_stop=not spawned_here,
        main_ranks=spec.main_ranks(),
    )


@dataclass(frozen=True)
class LaunchPlan:
    """The launcher this host runs; with `spawn`, every host in it starts its own ranks."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    spawn: SpawnSpec | None = None
    policy: EndPolicy = field(default_factory=EndPolicy)
    output: OutputReader = PLAIN_OUTPUT  # what the launcher's own output says about ranks


class HostSetup(Protocol):
    """What a host must have running before the launcher can start ranks on it."""

    def start(self, timeout: float) -> bool:
        """Start it (raises JobError); True when something was started."""

    @property
    def host_key(self) -> str | None:
        """This host's sshd's public key, made by `start` for this job; None: no sshd of ours."""

    def client_key(self, job: str) -> str | None:
        """On the leader: make the ssh key pair of `job`; its public key for every worker
        (None: the launch needs none)."""

    def authorize(self, client_key: str | None) -> None:
        """On a worker: let the leader's key (from its welcome; None: no key) in; raises
        JobError."""

    @property
    def check_worker(self) -> SshCheck | None:
        """The leader's check that it can reach a worker; None: nothing to check."""

    def launcher_killed(self) -> None:
        """The leader's launcher was killed: end what else holds its output."""

    def close(self, log: Logger) -> None:
        """At the job's end (bounded)."""


class LaunchStrategy(Protocol):
    @property
    def setup(self) -> HostSetup: ...

    @property
    def world_size(self) -> int: ...

    def prepare(self, attempt: int = 0) -> LaunchPlan:
        """The leader's launcher for the job's `attempt`-th start of its ranks (0, then one
        more per restart in place); raises JobError when it cannot be built."""

    def worker_plan(self, spec: SpawnSpec) -> LaunchPlan:
        """A worker's own launcher for the leader's spec (spawned ranks)."""


@dataclass(frozen=True)
class NoSetup:
    """Ranks started by each host itself need nothing running first."""

    check_worker: SshCheck | None = None
    host_key: str | None = None

    def start(self, timeout: float) -> bool:
        return False

    def client_key(self, job: str) -> str | None:
        return None

    def authorize(self, client_key: str | None) -> None:
        pass

    def launcher_killed(self) -> None:
        pass

    def close(self, log: Logger) -> None:
        pass


def rank_command(
    config: JobConfig, user_command: Sequence[str], forwarded: Sequence[str], attempt: int = 0
) -> list[str]:
    """The per-rank wrapper around the user's command, for the job's `attempt`-th start."""
    timeouts = config.timeouts
    # How often each rank's wrapper says it moved: for the hang watch, the status line's step
    # counts, and a restart's "made progress" (an attempt that failed before any is told apart).
    intervals = [
        timeouts.progress_interval,
        report_interval(config.progress.status_interval),
        RESTART_PROGRESS_INTERVAL if config.restart.enabled else None,
    ]
    chosen = [interval for interval in intervals if interval is not None]
    progress = ["--progress-interval", f"{min(chosen):g}"] if chosen else []
    if timeouts.progress_interval is not None:
        # Horovod's stall inspector names the ranks that hold up a collective: let it speak
        # before the hang verdict (its own default, 60 s, may be after it).
        progress += ["--horovod-stall-check", f"{max(timeouts.progress_interval, 1):.0f}"]
    step_regex = config.progress.step_pattern(config.output.metric_definitions)
    steps = [] if step_regex is None else ["--step-regex", step_regex]
    period = config.progress.sample_period
    if period is not None:  # the straggler watch: each rank's stacks, sampled
        rate = str(config.progress.straggler_sample_rate)
        steps += ["--wait-period", f"{period:g}", "--wait-rate", rate]
    restarts = ["--attempt", str(attempt)] if attempt else []
    return [
        paths.RANK_PYTHON,
        "-m",
        "ringleader.rank",
        "--grace",
        f"{timeouts.sigterm_grace:g}",
        "--abort-grace",
        f"{timeouts.abort_grace:g}",
        *progress,
        *steps,
        *restarts,
        # the wrapper's share of ringleader_stack_dump_timeout: its stacks must still travel
        "--stack-timeout",
        f"{max(timeouts.stack_dump * 0.7, 0.5):g}",
        "--cwd",
        config.source.code_dir,
        "--forwarded",
        ",".join(forwarded),
        # Only ranks whose output is shown or metered go to the leader; every host keeps the
        # others in their rank logs (the leader of a large job would spend its CPU on them).
        "--relay-ranks",
        str(config.output.log_ranks.union(config.output.metric_ranks)),
        "--",
        *user_command,
    ]


def world_size(config: JobConfig, processes_per_host: int) -> int:
    """Every rank the job supervises: the distribution's, then one per host outside it."""
    topology = config.topology
    return processes_per_host * len(topology.participants) + len(topology.plain_hosts)


def spawn_plan(config: JobConfig, spec: SpawnSpec, user_command: Sequence[str]) -> LaunchPlan:
    """This host's launcher for a spawned job (the leader's and every worker's)."""
    command = rank_command(config, user_command, spec.forwarded_variables(), spec.attempt)
    argv = spawn_argv(spec, config.topology.current_host, command)
    policy = spawned_policy(spec, config.topology.leader, "the rank launcher")
    return LaunchPlan(tuple(argv), dict(os.environ), spec, policy)


def job_interface(config: JobConfig, log: Logger) -> InterfaceChoice:
    topology = config.topology
    choice = choose_interface(
        topology.network_interface, local_interfaces(), resolve(topology.workers)
    )
    if choice.warning:
        log(f"warning: {choice.warning}")
    return choice


def check_port_free(
    port: int,
    host: str,
    field: str = "ringleader_master_port",
    what: str = "MASTER_PORT",
    where: str = " (the leader, where rank 0 listens)",
) -> None:
    """A port a rank will listen on must be free: MASTER_PORT on the leader, TensorFlow's on
    every host. The health gate checks the same before every attempt (launch/health.py); this
    check holds with the gate off, and for ringleader's own control port, which the gate
    leaves to it."""
    taken = port_taken(port)
    if taken is not None:
        raise ConfigError(
            field, f"{what} {port} is not free on {host}{where}: {taken}; choose another port"
        )
