"""TensorFlow's distributions as SageMaker lays them out: TF_CONFIG and the tasks per host.

parameter_server (SageMaker's TensorFlow container): the first host is `master` on port 2222,
every other host a `worker` on 2222, and every host also runs a `ps` task on 2223; the user's
script runs as master and workers, the parameter servers are plain `tf.distribute.Server`s.
With the `chief` roles (TF2's ParameterServerStrategy with a ClusterCoordinator), the first
host's script is the `chief`, and the workers are servers as well: only the chief runs code.
multi_worker_mirrored_strategy: every host a `worker` on port 8890, index in host order.

Pure: which process each host runs and with what TF_CONFIG; ringleader.launch.spawn starts them.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass

from ringleader.config.job import MULTI_WORKER_MIRRORED, PARAMETER_SERVER
from ringleader.config.job import TF_CHIEF_ROLES as CHIEF_ROLES
from ringleader.config.job import TF_MASTER_ROLES as MASTER_ROLES
from ringleader.launch.roles import RoleTask

__all__ = ["CHIEF_ROLES", "MASTER_ROLES", "MULTI_WORKER_MIRRORED", "PARAMETER_SERVER"]


@dataclass(frozen=True)
class TfPorts:
    worker: int = 2222  # master/chief and workers (parameter_server)
    ps: int = 2223
    mirrored: int = 8890  # multi_worker_mirrored_strategy


def cluster(
    distribution: str, hosts: Sequence[str], roles: str, ports: TfPorts
) -> dict[str, list[str]]:
    if distribution == MULTI_WORKER_MIRRORED:
        return {"worker": [f"{host}:{ports.mirrored}" for host in hosts]}
    spec = {roles: [f"{hosts[0]}:{ports.worker}"]}
    if len(hosts) > 1:
        spec["worker"] = [f"{host}:{ports.worker}" for host in hosts[1:]]
    spec["ps"] = [f"{host}:{ports.ps}" for host in hosts]
    return spec


def tf_config(spec: dict[str, list[str]], job: str, index: int) -> str:
    return json.dumps(
        {"cluster": spec, "environment": "cloud", "task": {"type": job, "index": index}}
    )


def runs_alone(distribution: str, host_count: int) -> bool:
    """SageMaker runs a one-host parameter_server job as the plain script: no ps task, no
    TF_CONFIG."""
    return distribution == PARAMETER_SERVER and host_count == 1


SERVER_MODULE = "ringleader.launch.tfconfig"
VARIABLES = ("TF_CONFIG", "CUDA_VISIBLE_DEVICES")  # what a task's environment sets


def _task(
    job: str, index: int, main: bool, spec: dict[str, list[str]] | None, serves: bool
) -> RoleTask:
    env = {} if spec is None else {"TF_CONFIG": tf_config(spec, job, index)}
    if job == "ps":
        env["CUDA_VISIBLE_DEVICES"] = ""  # as SageMaker: parameter servers stay on the CPU
    return RoleTask(job, index, main, env, SERVER_MODULE if serves else None)


def host_tasks(
    distribution: str, hosts: Sequence[str], host: str, roles: str, ports: TfPorts
) -> list[RoleTask]:
    """The processes `host` runs, in the order their ranks are numbered."""
    if runs_alone(distribution, len(hosts)):
        return [_task(roles, 0, True, None, serves=False)]
    spec = cluster(distribution, hosts, roles, ports)
    position = list(hosts).index(host)
    if distribution == MULTI_WORKER_MIRRORED:
        return [_task("worker", position, True, spec, serves=False)]
    if position == 0:
        first = _task(roles, 0, True, spec, serves=False)
    else:
        # SageMaker's workers run the script; with chief roles they only serve the chief.
        first = _task("worker", position - 1, False, spec, serves=roles != MASTER_ROLES)
    return [first, _task("ps", position, False, spec, serves=True)]


def ports_on(distribution: str, ports: TfPorts, host_count: int) -> list[int]:
    """The TCP ports this host's tasks listen on (checked free before the job starts)."""
    if runs_alone(distribution, host_count):
        return []
    if distribution == MULTI_WORKER_MIRRORED:
        return [ports.mirrored]
    return [ports.worker, ports.ps]


def server_main() -> int:
    """`python -m ringleader.launch.tfconfig`: a tf.distribute.Server for this TF_CONFIG task
    (parameter servers; workers with the chief roles), serving until it is stopped."""
    import os

    import tensorflow as tf  # only in the TensorFlow image, only in this process

    config = json.loads(os.environ["TF_CONFIG"])
    task = config["task"]
    server = tf.distribute.Server(
        tf.train.ClusterSpec(config["cluster"]),
        job_name=task["type"],
        task_index=task["index"],
        protocol="grpc",
        start=True,
    )
    print(f"serving {task['type']}:{task['index']} at {server.target}", flush=True)
    server.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(server_main())
