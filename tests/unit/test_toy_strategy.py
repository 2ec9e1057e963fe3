"""The launch seam's proof: a strategy written outside ringleader (every rank started with its
own `ssh HOST ... ringleader.rank`, no mpirun) runs a whole job through the real composition
root and supervision, which need no change for it."""

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ringleader.config.job import JobConfig
from ringleader.launch.mpirun_strategy import SshSetup
from ringleader.launch.select import HostFacts
from ringleader.launch.spawn import SpawnSpec
from ringleader.launch.strategy import (
    EndPolicy,
    LaunchPlan,
    rank_command,
    spawn_plan,
    world_size,
)
from tests.unit.test_entrypoint import Rig


@dataclass(frozen=True)
class SshEachRank:
    """One `ssh HOST env RINGLEADER_RANK=N <rank wrapper>` per rank, run by a fan-out
    launcher on the leader; sshd on every host, as for mpirun."""

    config: JobConfig
    user_command: Callable[[], Sequence[str]]
    processes_per_host: int
    setup: SshSetup

    @property
    def world_size(self) -> int:
        return world_size(self.config, self.processes_per_host)

    def prepare(self, attempt: int = 0) -> LaunchPlan:
        command = rank_command(self.config, self.user_command(), ())
        argv = ["fan-out"]
        for index, host in enumerate(self.config.topology.participants):
            for local in range(self.processes_per_host):
                rank = index * self.processes_per_host + local
                argv += ["--", "ssh", host, "env", f"RINGLEADER_RANK={rank}", *command]
        return LaunchPlan(tuple(argv), dict(os.environ), policy=EndPolicy(launcher_name="ssh"))

    def worker_plan(self, spec: SpawnSpec) -> LaunchPlan:
        return spawn_plan(self.config, spec, self.user_command())


def test_a_strategy_defined_outside_launch_runs_a_job_end_to_end(tmp_path: Path) -> None:
    rig = Rig(tmp_path, "algo-1", sagemaker_mpi_enabled=True)
    chosen: list[SshEachRank] = []

    def select(
        config: JobConfig, facts: HostFacts, user_command: Callable[[], Sequence[str]]
    ) -> SshEachRank:
        chosen.append(SshEachRank(config, user_command, 2, SshSetup(False, None)))
        return chosen[0]

    assert rig.run(replace(rig.parts, select=select)) == (0, None)
    (plan,) = rig.launched
    assert plan.argv.count("ssh") == 6
    at = plan.argv.index("RINGLEADER_RANK=5")
    assert plan.argv[at - 3 : at + 1] == ("ssh", "algo-3", "env", "RINGLEADER_RANK=5")
    assert plan.argv[-2:] == ("python", "train.py")
    assert rig.servers[0].final == (0, None)
    assert rig.result_file() == "success"
