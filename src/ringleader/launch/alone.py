"""One rank on this host, started directly: a job without a distribution runs the program
once on every host, each on its own."""

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ringleader.config.job import JobConfig
from ringleader.launch.spawn import SpawnSpec
from ringleader.launch.strategy import EndPolicy, LaunchPlan, NoSetup, rank_command, spawn_plan


@dataclass(frozen=True)
class AloneStrategy:
    config: JobConfig
    user_command: Callable[[], Sequence[str]]
    world_size: int = 1
    setup: NoSetup = field(default_factory=NoSetup)

    def prepare(self, attempt: int = 0) -> LaunchPlan:
        argv = rank_command(self.config, self.user_command(), (), attempt)
        policy = EndPolicy(launcher_name="the rank launcher")
        return LaunchPlan(tuple(argv), dict(os.environ, RINGLEADER_RANK="0"), policy=policy)

    def worker_plan(self, spec: SpawnSpec) -> LaunchPlan:
        return spawn_plan(self.config, spec, self.user_command())
