"""One SageMaker Python SDK v3 local-mode job, run by tests/sdk/v3_job.py under an interpreter
that has sagemaker>=3 (v2 and v3 cannot share a virtualenv): for
tests/sdk/test_sdk_v3_local_mode.py and bench/sdk3_drivers.py."""

import base64
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import docker

from tests.sdk.conftest import (
    MPI_HYPERPARAMETERS,
    ContainerState,
    HostSnapshot,
    SdkJob,
    compose_project,
    docker_time,
)

V3_JOB = Path(__file__).with_name("v3_job.py")
SOURCE = Path(__file__).resolve().parents[2] / "src"  # `from ringleader.sagemaker import ...`


def v3_spec(
    root: Path,
    code: Path,
    channel: Path,
    image: str,
    *,
    distributed: dict[str, Any] | None = None,
    entry_script: str = "train.py",
    instance_count: int = 3,
    construct_only: bool = False,
    hyperparameters: dict[str, Any],
) -> dict[str, Any]:
    """With `distributed`, ModelTrainer(source_code=SourceCode(code, entry_script),
    distributed=...) and only the user's hyperparameters; without, the image's entry point and
    the sagemaker_* hyperparameters (an mpi job)."""
    spec: dict[str, Any] = {
        "image": image,
        "root": str(root),
        "channel": str(channel),
        "instance_count": instance_count,
        "hyperparameters": hyperparameters,
    }
    if distributed is None:
        spec["hyperparameters"] = {
            "sagemaker_program": entry_script,
            "sagemaker_submit_directory": f"file://{code}",
            **MPI_HYPERPARAMETERS,
            **hyperparameters,
        }
    else:
        spec.update(
            distributed=distributed,
            source_code={"source_dir": str(code), "entry_script": entry_script},
            construct_only=construct_only,
        )
    return spec


def new_root(work_dir: Path) -> Path:
    """The job's local_container_root; its name is the compose project's, so unique per job,
    also across tests run side by side (pytest-xdist workers' tmp_path names repeat)."""
    root = work_dir / f"v3root{uuid.uuid4().hex[:12]}"
    root.mkdir()
    return root


def run_v3_job(
    python: str,
    work_dir: Path,
    client: docker.DockerClient,
    spec: dict[str, Any],
    timeout: float = 300,
) -> SdkJob:
    """Run the job, then read what the SDK said, each host's output and each container's end."""
    root = Path(spec["root"])
    job = SdkJob(root=root, output=root / "compressed_artifacts", docker=client)
    job.project = compose_project(str(root))
    spec_file, result_file = root.with_suffix(".spec.json"), root.with_suffix(".result.json")
    spec_file.write_text(json.dumps(spec))
    defaults = work_dir / "sagemaker-defaults.yaml"
    defaults.write_text(
        "SchemaVersion: '1.0'\nSageMaker:\n  PythonSDK:\n    Modules:\n"
        "      TelemetryOptOut: true\n"
    )
    env = dict(
        os.environ,
        SAGEMAKER_USER_CONFIG_OVERRIDE=str(defaults),
        SAGEMAKER_ADMIN_CONFIG_OVERRIDE=str(defaults),
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-west-2",
        AWS_EC2_METADATA_DISABLED="true",
        PYTHONPATH=str(SOURCE),
    )
    completed = subprocess.run(
        [python, str(V3_JOB), str(spec_file), str(result_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    print(completed.stdout[-20000:], completed.stderr[-20000:])
    result = json.loads(result_file.read_text())
    assert result["network_attempts"] == [], result["network_attempts"]
    job.hosts = result["hosts"]
    job.error = RuntimeError(result["error"]) if result["error"] else None
    if "seconds" not in result:  # the distributed config refused its fields: no job ran
        return job
    job.seconds = result["seconds"]
    job.job_root = Path(result["compose_root"])
    for host, files in result["snapshots"].items():
        job.snapshots[host] = HostSnapshot(
            {name: base64.b64decode(data) for name, (data, _) in files.items()},
            {name: mtime for name, (_, mtime) in files.items()},
        )
    for container in client.containers.list(all=True, filters={"label": _label(job)}):
        state = container.attrs["State"]
        job.containers[container.labels["com.docker.compose.service"]] = ContainerState(
            int(state["ExitCode"]), docker_time(state["FinishedAt"])
        )
    print(f"train() took {job.seconds:.1f} s; error {job.error!r}")
    return job


def remove_containers(client: docker.DockerClient, job: SdkJob) -> None:
    for container in client.containers.list(all=True, filters={"label": _label(job)}):
        container.remove(force=True)


def _label(job: SdkJob) -> str:
    return f"com.docker.compose.project={job.project}"
