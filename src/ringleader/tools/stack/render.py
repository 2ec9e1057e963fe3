"""The stack's outputs as SageMaker estimator arguments, ready to paste (pure)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

REQUIRED_OUTPUTS = (
    "VpcId",
    "EstimatorSubnets",
    "EstimatorSecurityGroupIds",
    "ExecutionRoleArn",
    "KmsKeyArn",
    "BucketName",
)


class OutputsError(ValueError):
    """The stack's outputs are not what cfn/training-vpc.yaml produces."""


@dataclass(frozen=True)
class StackOutputs:
    vpc_id: str
    subnets: tuple[str, ...]
    security_group_ids: tuple[str, ...]
    role_arn: str
    kms_key_arn: str
    bucket: str
    notebook_instance: str | None = None
    # Stacks made before the roles were split have no TrainingJobBaseName output.
    base_job_name: str | None = None
    efs_id: str | None = None
    fsx_id: str | None = None
    fsx_mount_name: str | None = None
    fsx_dns_name: str | None = None
    fsx_path: str | None = None
    fsx_data_repository: str | None = None
    fsx_subnet: str | None = None


def outputs_from_api(api_outputs: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    return {str(o["OutputKey"]): str(o.get("OutputValue", "")) for o in api_outputs}


def _id_list(raw: Mapping[str, str], key: str, prefix: str) -> tuple[str, ...]:
    try:
        value = json.loads(raw[key])
    except json.JSONDecodeError:
        raise OutputsError(f"output {key} is not a JSON list: {raw[key]!r}") from None
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(item, str) and item.startswith(prefix) for item in value)
    ):
        raise OutputsError(f"output {key} is not a list of {prefix}... ids: {raw[key]!r}")
    return tuple(value)


def parse_outputs(raw: Mapping[str, str]) -> StackOutputs:
    missing = [key for key in REQUIRED_OUTPUTS if not raw.get(key)]
    if missing:
        raise OutputsError(f"the stack has no output(s) {', '.join(missing)}")
    fsx_keys = ("FsxFileSystemId", "FsxMountName", "FsxFileSystemPath")
    if any(raw.get(key) for key in fsx_keys) and not all(raw.get(key) for key in fsx_keys):
        raise OutputsError(f"the stack has only some of the outputs {', '.join(fsx_keys)}")
    return StackOutputs(
        vpc_id=raw["VpcId"],
        subnets=_id_list(raw, "EstimatorSubnets", "subnet-"),
        security_group_ids=_id_list(raw, "EstimatorSecurityGroupIds", "sg-"),
        role_arn=raw["ExecutionRoleArn"],
        kms_key_arn=raw["KmsKeyArn"],
        bucket=raw["BucketName"],
        notebook_instance=raw.get("NotebookInstanceName") or None,
        base_job_name=raw.get("TrainingJobBaseName") or None,
        efs_id=raw.get("EfsFileSystemId") or None,
        fsx_id=raw.get("FsxFileSystemId") or None,
        fsx_mount_name=raw.get("FsxMountName") or None,
        fsx_dns_name=raw.get("FsxDnsName") or None,
        fsx_path=raw.get("FsxFileSystemPath") or None,
        fsx_data_repository=raw.get("FsxDataRepositoryPath") or None,
        fsx_subnet=raw.get("FsxSubnetId") or None,
    )


def estimator_kwargs(outputs: StackOutputs) -> dict[str, str | list[str]]:
    """Keyword arguments of sagemaker.estimator.Estimator (and PyTorch, TensorFlow, ...).

    The roles may use only the stack's bucket, so the job's output and the uploaded source must
    go there too (the SDK's default bucket would be refused); the notebook role may start only
    jobs named after the stack, hence base_job_name when the stack has that output."""
    kwargs: dict[str, str | list[str]] = {
        "role": outputs.role_arn,
        "subnets": list(outputs.subnets),
        "security_group_ids": list(outputs.security_group_ids),
        "volume_kms_key": outputs.kms_key_arn,
        "output_kms_key": outputs.kms_key_arn,
        "output_path": f"s3://{outputs.bucket}/output",
        "code_location": f"s3://{outputs.bucket}/code",
    }
    if outputs.base_job_name:
        kwargs["base_job_name"] = outputs.base_job_name
    return kwargs


def file_system_inputs(outputs: StackOutputs) -> dict[str, dict[str, str]]:
    """Keyword arguments of sagemaker.inputs.FileSystemInput for each file system."""
    inputs: dict[str, dict[str, str]] = {}
    if outputs.efs_id:
        inputs["efs"] = {
            "file_system_id": outputs.efs_id,
            "file_system_type": "EFS",
            "directory_path": "/",
            "file_system_access_mode": "ro",
        }
    if outputs.fsx_id and outputs.fsx_mount_name and outputs.fsx_path:
        inputs["fsx"] = {
            "file_system_id": outputs.fsx_id,
            "file_system_type": "FSxLustre",
            "directory_path": f"/{outputs.fsx_mount_name}{outputs.fsx_path}",
            "file_system_access_mode": "ro",
        }
    return inputs


def _literal(value: str | list[str]) -> str:
    # JSON strings and lists of strings are also Python literals.
    return json.dumps(value)


def _dict_block(name: str, values: Mapping[str, str | list[str]]) -> list[str]:
    lines = [f"{name} = {{"]
    lines.extend(f"    {json.dumps(key)}: {_literal(value)}," for key, value in values.items())
    lines.append("}")
    return lines


def render_python(outputs: StackOutputs, stack_name: str, region: str) -> str:
    lines = [
        f"# ringleader stack {stack_name} ({region}): estimator arguments",
        "# estimator = PyTorch(..., **estimator_kwargs)",
        *_dict_block("estimator_kwargs", estimator_kwargs(outputs)),
    ]
    inputs = file_system_inputs(outputs)
    if "efs" in inputs:
        lines += [
            "# estimator.fit({'training': FileSystemInput(**efs_input_kwargs)})"
            "  # sagemaker.inputs; 'rw' to write",
            *_dict_block("efs_input_kwargs", inputs["efs"]),
        ]
    if "fsx" in inputs:
        lines += [
            f"# FSx path {outputs.fsx_path} mirrors {outputs.fsx_data_repository}; "
            f"training is fastest with subnets=[{json.dumps(outputs.fsx_subnet)}]",
            "# estimator.fit({'training': FileSystemInput(**fsx_input_kwargs)})",
            *_dict_block("fsx_input_kwargs", inputs["fsx"]),
        ]
    if outputs.notebook_instance:
        lines.append(f"# notebook instance: {outputs.notebook_instance}")
    return "\n".join(lines) + "\n"


def render_json(outputs: StackOutputs) -> str:
    document = {
        "estimator": estimator_kwargs(outputs),
        "file_system_inputs": file_system_inputs(outputs),
        "vpc_id": outputs.vpc_id,
        "notebook_instance": outputs.notebook_instance,
    }
    return json.dumps(document, indent=2) + "\n"
