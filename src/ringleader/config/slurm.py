"""The hosts of a Slurm job step, read from Slurm's own variables: the topology source beside
SageMaker's (config/topology.py), used when `ringleader slurm` started this host."""

from collections.abc import Mapping
from dataclasses import dataclass

from ringleader.config.hostlist import expand_hostlist
from ringleader.config.topology import DEFAULT_INTERFACE, Topology, check_host_names
from ringleader.core.errors import ConfigError

TOPOLOGY_VARIABLE = "RINGLEADER_TOPOLOGY"  # "slurm": this host's hosts come from Slurm
SLURM = "slurm"
INTERFACE_VARIABLE = "RINGLEADER_NETWORK_INTERFACE"  # `ringleader slurm --network-interface`
# What a rank may see of Slurm (job_environment): the job's, not the task's.
KEPT_VARIABLES = frozenset(
    {
        "SLURM_JOB_ID",
        "SLURM_JOB_NAME",
        "SLURM_JOB_NODELIST",
        "SLURM_JOB_NUM_NODES",
        "SLURM_JOB_PARTITION",
        "SLURM_JOB_ACCOUNT",
        "SLURM_JOB_USER",
        "SLURM_JOB_GPUS",
        "SLURM_GPUS_ON_NODE",
        "SLURM_CLUSTER_NAME",
        "SLURM_SUBMIT_DIR",
        "SLURM_SUBMIT_HOST",
        "SLURM_RESTART_COUNT",
        "SLURM_STEP_NODELIST",
        "SLURMD_NODENAME",
    }
)
# Slurm's job states after which a job does nothing more (`scontrol show job` says COMPLETING
# while a node still ends the job's processes, then one of these): for tools that wait on jobs.
FINAL_JOB_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "SPECIAL_EXIT",
        "TIMEOUT",
    }
)
LAUNCH_FIX = "start one per node: srun --ntasks-per-node=1 ringleader slurm ..."


@dataclass(frozen=True)
class SlurmStep:
    """What Slurm tells every task of a step, as ringleader needs it."""

    job_id: str
    step_id: str
    hosts: tuple[str, ...]  # the step's nodes, sorted
    node: str  # this node, as Slurm names it (SLURMD_NODENAME)
    gpus_on_node: int | None  # SLURM_GPUS_ON_NODE, when the job asked for GPUs
    cpus_on_node: int | None = None  # SLURM_CPUS_ON_NODE: what the allocation gave this node

    @property
    def mark(self) -> str:
        """The step's identity, the same on every node: the job's id on every host."""
        return f"slurm-{self.job_id}.{self.step_id}"


def uses_slurm(environ: Mapping[str, str]) -> bool:
    return environ.get(TOPOLOGY_VARIABLE) == SLURM


def read_step(environ: Mapping[str, str]) -> SlurmStep:
    """The step from Slurm's variables; a ConfigError naming the variable when one is missing
    or wrong, or when the step does not run one task per node."""
    job_id = _required(environ, "SLURM_JOB_ID")
    if "SLURM_STEP_ID" not in environ or "SLURM_STEP_NUM_NODES" not in environ:
        raise ConfigError("SLURM_STEP_ID", f"missing: not inside an srun step; {LAUNCH_FIX}")
    topology = slurm_topology(environ)
    tasks, nodes = environ.get("SLURM_STEP_NUM_TASKS", ""), environ["SLURM_STEP_NUM_NODES"]
    if tasks and tasks != nodes:
        raise ConfigError("SLURM_STEP_NUM_TASKS", f"{tasks} tasks on {nodes} node(s); {LAUNCH_FIX}")
    return SlurmStep(
        job_id=job_id,
        step_id=_required(environ, "SLURM_STEP_ID"),
        hosts=topology.hosts,
        node=topology.current_host,
        gpus_on_node=_count(environ.get("SLURM_GPUS_ON_NODE")),
        cpus_on_node=_count(environ.get("SLURM_CPUS_ON_NODE")),
    )


def slurm_topology(environ: Mapping[str, str]) -> Topology:
    """The step's nodes as the job's hosts, from the variables `ringleader slurm` keeps for
    the supervision (KEPT_VARIABLES); like every topology, the first in sorted order leads
    (config/topology.elect_leader), so every node agrees without talking."""
    field = "SLURM_STEP_NODELIST" if "SLURM_STEP_NODELIST" in environ else "SLURM_JOB_NODELIST"
    hosts = expand_hostlist(_required(environ, field), field)
    check_host_names(field, hosts)
    node = _required(environ, "SLURMD_NODENAME")
    if node not in hosts:
        raise ConfigError("SLURMD_NODENAME", f"{node!r} is not one of the step's nodes {hosts}")
    return Topology(
        hosts=tuple(sorted(hosts)),
        current_host=node,
        network_interface=environ.get(INTERFACE_VARIABLE) or DEFAULT_INTERFACE,
    )


def job_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment without what describes the one srun task per node ringleader runs as:
    Open MPI would take SLURM_JOBID for an allocation to launch into with srun, and
    per-task variables (SLURM_PROCID, SLURM_NTASKS, ...) would tell every rank it is task 0 of
    one per node. The job's own (SLURM_JOB_ID, its nodes, the submit directory) stay."""
    return {
        name: value
        for name, value in environ.items()
        if name in KEPT_VARIABLES or not name.startswith(("SLURM_", "PMI_", "PMIX_"))
    }


def _required(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name, "").strip()
    if not value:
        raise ConfigError(name, f"missing: not inside a Slurm job step; {LAUNCH_FIX}")
    return value


def _count(value: str | None) -> int | None:
    """A count Slurm gives; anything else (absent, empty) means none was asked for."""
    if value is None or not value.strip().isdigit():
        return None
    return int(value)
