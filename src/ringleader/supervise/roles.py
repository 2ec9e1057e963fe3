"""Which part this host plays in the job."""

import enum

from ringleader.config.topology import Topology


class Role(enum.Enum):
    ALONE = "alone"  # this host's ranks are the whole job: no workers to wait for or tell
    LEADER = "leader"  # starts the job, supervises every host, tells each the verdict
    WORKER = "worker"  # follows the leader and exits with the job's code


def choose_role(topology: Topology, runs_alone: bool) -> Role:
    """`runs_alone`: the strategy runs every host on its own (no distribution)."""
    if runs_alone or len(topology.hosts) == 1:
        return Role.ALONE
    return Role.LEADER if topology.is_leader else Role.WORKER
