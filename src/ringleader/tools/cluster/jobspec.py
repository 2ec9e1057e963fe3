"""A cluster job as JSON (pure): how `ringleader cluster run --detach` hands the job to its
runner on the leader. It travels on ssh's stdin, never on a command line, since it holds the
`--env` values."""

import json
from pathlib import Path
from typing import Any

from ringleader.tools.cluster.hostfile import ClusterHost
from ringleader.tools.cluster.run import ClusterJob
from ringleader.tools.cluster.ssh import SshOptions


def job_to_json(job: ClusterJob) -> str:
    return json.dumps(
        {
            "hosts": [host.__dict__ for host in job.hosts],
            "command": list(job.command),
            "cwd": job.cwd,
            "processes_per_host": job.processes_per_host,
            "distribution": job.distribution,
            "settings": dict(job.settings),
            "job_id": job.job_id,
            "output_dir": None if job.output_dir is None else str(job.output_dir),
            "remote_dir": job.remote_dir,
            "ssh": {
                "connect_timeout": job.ssh.connect_timeout,
                "extra": list(job.ssh.extra),
                "remote_python": job.ssh.remote_python,
            },
            "preflight_timeout": job.preflight_timeout,
            "bootstrap": job.bootstrap,
            "min_free_bytes": job.min_free_bytes,
            "mpi_options": job.mpi_options,
            "env": dict(job.env),
            "spares": [host.__dict__ for host in job.spares],
        }
    )


def job_from_json(text: str) -> ClusterJob:
    data: dict[str, Any] = json.loads(text)
    return ClusterJob(
        hosts=_hosts(data["hosts"]),
        spares=_hosts(data.get("spares", ())),
        command=tuple(str(word) for word in data["command"]),
        cwd=str(data["cwd"]),
        processes_per_host=int(data["processes_per_host"]),
        distribution=str(data["distribution"]),
        settings={str(k): str(v) for k, v in data["settings"].items()},
        job_id=str(data["job_id"]),
        output_dir=None if data["output_dir"] is None else Path(data["output_dir"]),
        remote_dir=str(data["remote_dir"]),
        ssh=SshOptions(
            float(data["ssh"]["connect_timeout"]),
            tuple(str(o) for o in data["ssh"]["extra"]),
            None if data["ssh"]["remote_python"] is None else str(data["ssh"]["remote_python"]),
        ),
        preflight_timeout=float(data["preflight_timeout"]),
        bootstrap=bool(data["bootstrap"]),
        min_free_bytes=int(data["min_free_bytes"]),
        mpi_options=str(data["mpi_options"]),
        env={str(k): str(v) for k, v in data["env"].items()},
    )


def _hosts(items: Any) -> tuple[ClusterHost, ...]:
    return tuple(
        ClusterHost(str(h["address"]), str(h["name"]), int(h["slots"]), str(h["origin"]))
        for h in items
    )


def results_on_leader(job: ClusterJob) -> Path:
    """Where a detached job's results land on the leader: a relative --output is taken from
    the job's working directory (the same path on every host)."""
    return Path(job.cwd) / job.results_dir
