"""Tasks of jobs whose hosts run processes of different roles: TensorFlow's distributions
(master/chief, workers, parameter servers) and MXNet's parameter servers (scheduler, servers,
workers). Each task is one rank; its role's variables and what it runs are plain data."""

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class RoleTask:
    """One process of a role layout on one host."""

    job: str  # the role's name: master, chief, worker, ps; scheduler, server
    index: int
    # The job ends when every main task has ended; the others (parameter servers, schedulers,
    # servers or scripts still running) are then stopped without counting as a failure.
    main: bool
    env: Mapping[str, str]  # the role's variables (TF_CONFIG; DMLC_*)
    # None: the user's script; else `python -m MODULE`, a server ringleader runs in its place
    server_module: str | None = None

    @property
    def role(self) -> str:
        return f"{self.job}:{self.index}"

    @property
    def runs_script(self) -> bool:
        return self.server_module is None
