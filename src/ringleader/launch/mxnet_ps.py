"""MXNet's parameter servers as SageMaker's MXNet container starts them for
`sagemaker_parameter_server_enabled`: a scheduler on the first host, servers on every host,
and one worker per host running the user's script (`kvstore='dist_sync'`), tied together by
ps-lite's DMLC_* variables.

Pure: which tasks each host runs and with what environment; ringleader.launch.spawn starts
them. `python -m ringleader.launch.mxnet_ps` is the scheduler's and each server's process:
importing mxnet with DMLC_ROLE set to scheduler or server runs that role until the workers
are done (what SageMaker's container does with `python -c 'import mxnet'`).
"""

from collections.abc import Sequence

from ringleader.launch.roles import RoleTask

SERVER_MODULE = "ringleader.launch.mxnet_ps"
DEFAULT_PORT = 8000  # DMLC_PS_ROOT_PORT, SageMaker's default
VARIABLES = (
    "DMLC_ROLE",
    "DMLC_PS_ROOT_URI",
    "DMLC_PS_ROOT_PORT",
    "DMLC_NUM_SERVER",
    "DMLC_NUM_WORKER",
    "DMLC_INTERFACE",
)


def host_tasks(
    hosts: Sequence[str],
    host: str,
    servers_per_host: int,
    root_address: str,
    port: int,
    interface: str | None,
) -> list[RoleTask]:
    """The processes `host` runs, in the order their ranks are numbered: its worker, its
    servers, and on the first host the scheduler last."""
    common = {
        "DMLC_PS_ROOT_URI": root_address,
        "DMLC_PS_ROOT_PORT": str(port),
        "DMLC_NUM_SERVER": str(servers_per_host * len(hosts)),
        "DMLC_NUM_WORKER": str(len(hosts)),
    }
    if interface is not None:
        common["DMLC_INTERFACE"] = interface  # ps-lite's own guess is the first interface up

    def task(role: str, index: int) -> RoleTask:
        return RoleTask(
            role,
            index,
            main=role == "worker",
            env={**common, "DMLC_ROLE": role},
            server_module=None if role == "worker" else SERVER_MODULE,
        )

    position = list(hosts).index(host)
    tasks = [task("worker", position)]
    first_server = position * servers_per_host
    tasks += [task("server", first_server + offset) for offset in range(servers_per_host)]
    if position == 0:
        tasks.append(task("scheduler", 0))
    return tasks


def serve() -> int:
    """The scheduler or a server: importing mxnet runs the role set in DMLC_ROLE."""
    import mxnet  # noqa: F401  (only in the MXNet image, only in this process)

    return 0


if __name__ == "__main__":
    raise SystemExit(serve())
