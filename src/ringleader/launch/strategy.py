"""How ranks are started: one seam, with the supervision around it unchanged.

A strategy turns the job's configuration into the command that starts every rank (called by
the leader once the workers are up, since choosing the interface needs their addresses). Each
rank runs under the per-rank wrapper (`python -m ringleader.rank`), which reports to its host's
agent whatever started it.
"""

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ringleader.config.job import JobConfig
from ringleader.config.mpi_options import forwarded_variables
from ringleader.launch.mpirun import MpiPlan, build_mpirun_argv
from ringleader.launch.netif import choose_interface, local_interfaces, resolve

Logger = Callable[[str], None]


@dataclass(frozen=True)
class LaunchPlan:
    argv: tuple[str, ...]
    env: Mapping[str, str]


class LaunchStrategy(Protocol):
    @property
    def world_size(self) -> int: ...

    def prepare(self) -> LaunchPlan:
        """The launcher's command; raises JobError when it cannot be built."""


def rank_command(
    config: JobConfig, user_command: Sequence[str], forwarded: Sequence[str]
) -> list[str]:
    """The per-rank wrapper around the user's command."""
    return [
        sys.executable,
        "-m",
        "ringleader.rank",
        "--grace",
        f"{config.timeouts.sigterm_grace:g}",
        "--abort-grace",
        f"{config.timeouts.abort_grace:g}",
        "--cwd",
        config.code_dir,
        "--forwarded",
        ",".join(forwarded),
        "--",
        *user_command,
    ]


@dataclass(frozen=True)
class SingleHostStrategy:
    """One rank on this host, started directly (one host, or MPI off)."""

    config: JobConfig
    user_command: Callable[[], Sequence[str]]
    world_size: int = 1

    def prepare(self) -> LaunchPlan:
        argv = rank_command(self.config, self.user_command(), ())
        return LaunchPlan(tuple(argv), dict(os.environ, RINGLEADER_RANK="0"))


@dataclass(frozen=True)
class MpirunStrategy:
    """mpirun on the leader starts every rank over ssh, pinned to the job's interface."""

    config: JobConfig
    user_command: Callable[[], Sequence[str]]
    processes_per_host: int
    log: Logger

    @property
    def world_size(self) -> int:
        return self.processes_per_host * len(self.config.topology.hosts)

    def prepare(self) -> LaunchPlan:
        topology = self.config.topology
        choice = choose_interface(
            topology.network_interface, local_interfaces(), resolve(topology.workers)
        )
        if choice.warning:
            self.log(f"warning: {choice.warning}")
        forwarded = forwarded_variables(self.config.custom_mpi_options)
        plan = MpiPlan(
            hosts=topology.hosts,
            processes_per_host=self.processes_per_host,
            interface=choice.name,
            custom_options=self.config.custom_mpi_options,
            rank_command=tuple(rank_command(self.config, self.user_command(), forwarded)),
        )
        return LaunchPlan(tuple(build_mpirun_argv(plan)), dict(os.environ))
