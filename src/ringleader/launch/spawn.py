"""The `spawn` launch strategy's per-host side: start this host's ranks directly, no mpirun.

Every host's entry point runs `python -m ringleader.launch.spawn --spec JSON --host NAME --
RANK_COMMAND...` as its launcher once the leader says the job is launched. It starts one rank
wrapper per local rank with that rank's environment (torchrun's contract for
torch_distributed; TF_CONFIG for TensorFlow's distributions, whose parameter servers are
`tf.distribute.Server`s it starts in place of the user's script), waits for all of them and
exits with the first non-zero exit code, else 0. The wrappers stay in its process group, so
killing the launcher's group kills them too.
"""

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ringleader.core import exitcodes, paths
from ringleader.launch import mxnet_ps, tfconfig
from ringleader.launch.roles import RoleTask

# torchrun's environment contract for each worker process (torch.distributed.run)
TORCH_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_ERROR_FILE",
    "OMP_NUM_THREADS",
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
)
RANK_VARIABLE = "RINGLEADER_RANK"  # how the rank wrapper learns its global rank
ROLE_VARIABLE = "RINGLEADER_ROLE"  # and its role, when it has one (TensorFlow: ps:1, chief:0)


@dataclass(frozen=True)
class SpawnSpec:
    """What every host needs to start its share of the ranks; the leader sends it."""

    hosts: tuple[str, ...]  # in rank order: each host's ranks follow the previous host's
    processes_per_host: int
    master_addr: str  # the leader (MXNet: its address, DMLC_PS_ROOT_URI)
    master_port: int
    run_id: str
    interface: str | None  # for NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME
    torch: bool  # give each rank torchrun's environment
    # Heterogeneous clusters: hosts outside the distribution run the program once each, as
    # ranks first_plain_rank, first_plain_rank + 1, ... with no distributed environment.
    plain_hosts: tuple[str, ...] = ()
    first_plain_rank: int = 0
    # TensorFlow: parameter_server or multi_worker_mirrored_strategy; each host then runs its
    # TF tasks instead of P copies of the script.
    tf: str | None = None
    tf_roles: str = tfconfig.MASTER_ROLES
    tf_ports: tfconfig.TfPorts = field(default_factory=tfconfig.TfPorts)
    # MXNet's parameter servers (when > 0): each host runs a worker and this many servers,
    # the first host the scheduler too.
    mxnet_servers: int = 0
    mxnet_port: int = mxnet_ps.DEFAULT_PORT
    # Restarts in place: which start of the ranks this is (torch's TORCHELASTIC_RESTART_COUNT)
    attempt: int = 0
    max_restarts: int = 0

    @property
    def world_size(self) -> int:
        """The distributed job's ranks (plain hosts' processes are not part of it)."""
        return sum(self.local_ranks(host) for host in self.hosts)

    def first_rank(self, host: str) -> int:
        """The rank of a distribution host's first process."""
        return sum(self.local_ranks(each) for each in self.hosts[: self.hosts.index(host)])

    def role_tasks(self, host: str) -> list[RoleTask] | None:
        """A distribution host's tasks when the job has roles (TensorFlow, MXNet's parameter
        servers); None when its ranks are P copies of the script."""
        if self.tf is not None:
            return tfconfig.host_tasks(self.tf, self.hosts, host, self.tf_roles, self.tf_ports)
        if self.mxnet_servers:
            return mxnet_ps.host_tasks(
                self.hosts,
                host,
                self.mxnet_servers,
                self.master_addr,
                self.mxnet_port,
                self.interface,
            )
        return None

    def forwarded_variables(self) -> tuple[str, ...]:
        """What the launcher sets that must win over each host's own environment."""
        if self.torch:
            return TORCH_VARIABLES
        if self.tf is not None:
            return tfconfig.VARIABLES
        return mxnet_ps.VARIABLES if self.mxnet_servers else ()

    @property
    def launching_hosts(self) -> tuple[str, ...]:
        """Hosts that start ranks of their own from this spec."""
        return (*self.hosts, *self.plain_hosts)

    def local_ranks(self, host: str) -> int:
        if host in self.plain_hosts:
            return 1
        if host not in self.hosts:
            return 0
        tasks = self.role_tasks(host)
        return self.processes_per_host if tasks is None else len(tasks)

    def main_ranks(self) -> frozenset[int] | None:
        """Jobs with roles: the ranks whose end ends the job (TensorFlow's master/chief or
        every mirrored worker; MXNet's workers); None when every rank counts."""
        if self.tf is None and not self.mxnet_servers:
            return None
        return frozenset(
            self.first_rank(host) + index
            for host in self.hosts
            for index, task in enumerate(self.role_tasks(host) or ())
            if task.main
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["hosts"] = list(self.hosts)
        data["plain_hosts"] = list(self.plain_hosts)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "SpawnSpec":
        interface = data.get("interface")
        return cls(
            hosts=tuple(str(host) for host in data["hosts"]),
            processes_per_host=int(data["processes_per_host"]),
            master_addr=str(data["master_addr"]),
            master_port=int(data["master_port"]),
            run_id=str(data["run_id"]),
            interface=None if interface is None else str(interface),
            torch=bool(data["torch"]),
            plain_hosts=tuple(str(host) for host in data.get("plain_hosts", ())),
            first_plain_rank=int(data.get("first_plain_rank", 0)),
            tf=None if data.get("tf") is None else str(data["tf"]),
            tf_roles=str(data.get("tf_roles", tfconfig.MASTER_ROLES)),
            tf_ports=tfconfig.TfPorts(**data.get("tf_ports", {})),
            mxnet_servers=int(data.get("mxnet_servers", 0)),
            mxnet_port=int(data.get("mxnet_port", mxnet_ps.DEFAULT_PORT)),
            attempt=int(data.get("attempt", 0)),
            max_restarts=int(data.get("max_restarts", 0)),
        )


def error_file(rank: int) -> str:
    """Where a rank's `@record`-decorated main writes its exception (TORCHELASTIC_ERROR_FILE)."""
    return str(paths.RANK_ERROR_DIR / f"rank-{rank}.json")


def rank_environment(
    spec: SpawnSpec, host: str, local_rank: int, inherited: Mapping[str, str]
) -> dict[str, str]:
    """The variables one local rank gets on top of what it inherits; the user's own
    OMP_NUM_THREADS and socket interface settings win, as under torchrun."""
    if host in spec.plain_hosts:
        return {RANK_VARIABLE: str(spec.first_plain_rank + spec.plain_hosts.index(host))}
    node_rank = spec.hosts.index(host)
    rank = spec.first_rank(host) + local_rank
    env = {RANK_VARIABLE: str(rank)}
    tasks = spec.role_tasks(host)
    if tasks is not None:
        env.update(tasks[local_rank].env, **{ROLE_VARIABLE: tasks[local_rank].role})
        return env
    if not spec.torch:
        return env
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(local_rank),
        WORLD_SIZE=str(spec.world_size),
        LOCAL_WORLD_SIZE=str(spec.processes_per_host),
        GROUP_RANK=str(node_rank),
        GROUP_WORLD_SIZE=str(len(spec.hosts)),
        ROLE_RANK=str(rank),
        ROLE_WORLD_SIZE=str(spec.world_size),
        ROLE_NAME="default",
        MASTER_ADDR=spec.master_addr,
        MASTER_PORT=str(spec.master_port),
        TORCHELASTIC_RUN_ID=spec.run_id,
        TORCHELASTIC_RESTART_COUNT=str(spec.attempt),
        TORCHELASTIC_MAX_RESTARTS=str(spec.max_restarts),
        TORCHELASTIC_ERROR_FILE=error_file(rank),
    )
    if spec.processes_per_host > 1 and "OMP_NUM_THREADS" not in inherited:
        env["OMP_NUM_THREADS"] = "1"  # torchrun's default: P ranks must not each take every core
    if spec.interface is not None:
        for name in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
            if name not in inherited:
                env[name] = spec.interface
    return env


def spawn_argv(spec: SpawnSpec, host: str, rank_command: Sequence[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ringleader.launch.spawn",
        "--spec",
        json.dumps(spec.to_json()),
        "--host",
        host,
        "--",
        *rank_command,
    ]


def task_command(
    spec: SpawnSpec, host: str, local_rank: int, rank_command: Sequence[str]
) -> list[str]:
    """The rank wrapper around the user's command, or around a TensorFlow server that
    ringleader runs itself (parameter servers; workers with the chief roles)."""
    tasks = None if host in spec.plain_hosts else spec.role_tasks(host)
    module = None if tasks is None else tasks[local_rank].server_module
    if module is None:
        return list(rank_command)
    wrapper = list(rank_command[: rank_command.index("--")])
    return [*wrapper, "--", wrapper[0], "-m", module]


def run(spec: SpawnSpec, host: str, rank_command: Sequence[str]) -> int:
    paths.RANK_ERROR_DIR.mkdir(parents=True, exist_ok=True)
    children: dict[int, subprocess.Popen[bytes]] = {}
    for local_rank in range(spec.local_ranks(host)):
        env = dict(os.environ)
        env.update(rank_environment(spec, host, local_rank, os.environ))
        command = task_command(spec, host, local_rank, rank_command)
        child = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)
        children[child.pid] = child  # kept: Popen must not reap it behind os.wait()
    codes = []
    while children:
        pid, status = os.wait()  # in exit order: the first failure is the one reported
        if children.pop(pid, None) is not None:
            code = os.waitstatus_to_exitcode(status)
            codes.append(exitcodes.signal_exit_code(-code) if code < 0 else code)
    return exitcodes.first_failure(codes)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ringleader.launch.spawn")
    parser.add_argument("--spec", required=True, help="the leader's SpawnSpec as JSON")
    parser.add_argument("--host", required=True, help="this host's name in the spec")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return run(SpawnSpec.from_json(json.loads(args.spec)), args.host, command)


if __name__ == "__main__":
    sys.exit(main())
