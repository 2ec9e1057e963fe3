"""One SageMaker Python SDK v3 (`sagemaker>=3`) local-mode training job of our image.

Run by tests/sdk/test_sdk_v3_local_mode.py with an interpreter that has sagemaker>=3 (it
cannot share a virtualenv with SDK v2): `python v3_job.py SPEC.json RESULT.json`.

SPEC: {"image", "root", "channel", "hyperparameters", "instance_count"}, and optionally
"source_code" ({"source_dir", "entry_script"}) with "distributed" (Ringleader's fields, or
"driver": "MPI" or "Torchrun" and the fields of the SDK's own config). Without
them the job uses ModelTrainer in LOCAL_CONTAINER mode without source_code: the image's own
entry point runs, the code goes through the sagemaker_* hyperparameters, as with a generic v2
Estimator. With them, the SDK replaces the image's entry point by its own script
(/bin/bash .../sm_drivers/sm_train.sh), which runs Ringleader's driver. "construct_only": only
make Ringleader(**distributed) and report what it raised.

RESULT: {"error", "seconds", "hosts", "compose_root", "network_attempts",
         "snapshots": {host: {path: [base64 bytes, mtime]}}}
"""

import base64
import ipaddress
import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

ATTEMPTS: list[Any] = []


def _local(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def guard_network() -> None:
    real_connect = socket.socket.connect
    real_getaddrinfo = socket.getaddrinfo

    def connect(sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _local(address[0]):
            ATTEMPTS.append(["connect", str(address)])
            raise OSError(f"blocked a connection to {address}")
        real_connect(sock, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and not _local(str(host)):
            ATTEMPTS.append(["resolve", str(host)])
            raise socket.gaierror(f"blocked resolving {host}")
        return real_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.getaddrinfo = getaddrinfo


def distributed_config(fields: dict[str, Any]) -> Any:
    """Ringleader(**fields), or with "driver": "MPI" or "Torchrun" the SDK's own config
    (bench/sdk3_drivers.py compares them)."""
    fields = dict(fields)
    driver = fields.pop("driver", "Ringleader")
    if driver == "Ringleader":
        from ringleader.sagemaker import Ringleader

        return Ringleader(**fields)
    from sagemaker.train import distributed

    return getattr(distributed, driver)(**fields)


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    result: dict[str, Any] = {"error": None, "snapshots": {}, "hosts": []}
    guard_network()

    from sagemaker.train import ModelTrainer
    from sagemaker.train.configs import Compute, InputData
    from sagemaker.train.local.local_container import _LocalContainer
    from sagemaker.train.model_trainer import Mode

    original = _LocalContainer.retrieve_artifacts

    def retrieve_artifacts(self: Any, compose_data: Any) -> Any:
        result["hosts"] = list(self.hosts)
        result["compose_root"] = self.container_root
        for host in self.hosts:
            output = Path(self.container_root) / host / "output"
            result["snapshots"][host] = {
                str(path.relative_to(output)): [
                    base64.b64encode(path.read_bytes()).decode(),
                    path.stat().st_mtime,
                ]
                for path in output.rglob("*")
                if path.is_file()
            }
        return original(self, compose_data)

    _LocalContainer.retrieve_artifacts = retrieve_artifacts  # type: ignore[method-assign]

    options: dict[str, Any] = {}
    if "distributed" in spec:
        try:
            options["distributed"] = distributed_config(spec["distributed"])
        except ValueError as error:
            result["error"] = str(error)
        if spec.get("construct_only") or result["error"]:
            result["network_attempts"] = ATTEMPTS
            Path(sys.argv[2]).write_text(json.dumps(result))
            return
    if "source_code" in spec:
        from sagemaker.train.configs import SourceCode

        options["source_code"] = SourceCode(**spec["source_code"])

    trainer = ModelTrainer(
        training_image=spec["image"],
        training_mode=Mode.LOCAL_CONTAINER,
        compute=Compute(instance_type="local", instance_count=spec["instance_count"]),
        hyperparameters=spec["hyperparameters"],
        role="arn:aws:iam::123456789012:role/RingleaderLocalTests",
        local_container_root=spec["root"],
        base_job_name="ringleader-sdk-v3",
        **options,
    )
    started = time.monotonic()
    try:
        trainer.train(
            input_data_config=[InputData(channel_name="training", data_source=spec["channel"])],
            wait=True,
        )
    except Exception as error:
        result["error"] = repr(error)
    result["seconds"] = time.monotonic() - started
    result["network_attempts"] = ATTEMPTS
    Path(sys.argv[2]).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
