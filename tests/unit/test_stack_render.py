"""The stack's outputs as estimator arguments (pure)."""

from __future__ import annotations

import ast
import json

import pytest

from ringleader.tools.stack.render import (
    OutputsError,
    estimator_kwargs,
    file_system_inputs,
    outputs_from_api,
    parse_outputs,
    render_json,
    render_python,
)

ROLE = "arn:aws:iam::123456789012:role/ringleader-training-vpc-ExecutionRole-ABC"
KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
BASE = {
    "VpcId": "vpc-0a1b2c3d4e5f60718",
    "PrivateSubnetIds": "subnet-0aaa,subnet-0bbb",
    "EstimatorSubnets": '["subnet-0aaa", "subnet-0bbb"]',
    "SecurityGroupId": "sg-0ccc",
    "EstimatorSecurityGroupIds": '["sg-0ccc"]',
    "ExecutionRoleArn": ROLE,
    "KmsKeyArn": KEY,
    "BucketName": "my-training-data",
    "NotebookInstanceName": "ringleader-training-vpc-NotebookInstance-XYZ",
}
EFS = {"EfsFileSystemId": "fs-0123456789abcdef0"}
FSX = {
    "FsxFileSystemId": "fs-0fedcba9876543210",
    "FsxMountName": "abcdefgh",
    "FsxDnsName": "fs-0fedcba9876543210.fsx.us-east-1.amazonaws.com",
    "FsxFileSystemPath": "/s3",
    "FsxDataRepositoryPath": "s3://my-training-data/fsx",
    "FsxSubnetId": "subnet-0aaa",
}


def assignments(source: str) -> dict[str, object]:
    """Every `name = literal` in a rendered snippet, evaluated as Python would."""
    tree = ast.parse(source)
    found: dict[str, object] = {}
    for node in tree.body:
        assert isinstance(node, ast.Assign), ast.dump(node)
        target = node.targets[0]
        assert isinstance(target, ast.Name)
        found[target.id] = ast.literal_eval(node.value)
    return found


def test_outputs_from_the_api_shape() -> None:
    api = [{"OutputKey": "VpcId", "OutputValue": "vpc-1", "Description": "x"}]
    assert outputs_from_api(api) == {"VpcId": "vpc-1"}


def test_estimator_arguments() -> None:
    outputs = parse_outputs(BASE)
    assert estimator_kwargs(outputs) == {
        "role": ROLE,
        "subnets": ["subnet-0aaa", "subnet-0bbb"],
        "security_group_ids": ["sg-0ccc"],
        "volume_kms_key": KEY,
        "output_kms_key": KEY,
        "output_path": "s3://my-training-data/output",
        "code_location": "s3://my-training-data/code",
    }
    assert file_system_inputs(outputs) == {}


def test_python_snippet_is_valid_python_with_the_real_values() -> None:
    source = render_python(parse_outputs({**BASE, **EFS, **FSX}), "vpc-stack", "us-east-1")
    values = assignments(source)
    assert values["estimator_kwargs"] == estimator_kwargs(parse_outputs(BASE))
    assert values["efs_input_kwargs"] == {
        "file_system_id": "fs-0123456789abcdef0",
        "file_system_type": "EFS",
        "directory_path": "/",
        "file_system_access_mode": "ro",
    }
    assert values["fsx_input_kwargs"] == {
        "file_system_id": "fs-0fedcba9876543210",
        "file_system_type": "FSxLustre",
        "directory_path": "/abcdefgh/s3",
        "file_system_access_mode": "ro",
    }
    assert source.splitlines()[0] == "# ringleader stack vpc-stack (us-east-1): estimator arguments"
    assert (
        "# FSx path /s3 mirrors s3://my-training-data/fsx; "
        'training is fastest with subnets=["subnet-0aaa"]'
    ) in source


def test_python_snippet_without_file_systems() -> None:
    values = assignments(render_python(parse_outputs(BASE), "s", "eu-west-1"))
    assert list(values) == ["estimator_kwargs"]


def test_json() -> None:
    document = json.loads(render_json(parse_outputs({**BASE, **EFS})))
    assert document["estimator"]["subnets"] == ["subnet-0aaa", "subnet-0bbb"]
    assert document["file_system_inputs"]["efs"]["file_system_id"] == "fs-0123456789abcdef0"
    assert document["vpc_id"] == "vpc-0a1b2c3d4e5f60718"


@pytest.mark.parametrize(
    ("outputs", "message"),
    [
        (
            {k: v for k, v in BASE.items() if k != "ExecutionRoleArn"},
            "no output(s) ExecutionRoleArn",
        ),
        ({**BASE, "EstimatorSubnets": "subnet-0aaa,subnet-0bbb"}, "is not a JSON list"),
        ({**BASE, "EstimatorSubnets": '["sg-1"]'}, "not a list of subnet-... ids"),
        ({**BASE, "EstimatorSecurityGroupIds": "[]"}, "not a list of sg-... ids"),
        ({**BASE, "FsxFileSystemId": "fs-0fedcba9876543210"}, "only some of the outputs"),
    ],
)
def test_outputs_that_are_not_the_templates(outputs: dict[str, str], message: str) -> None:
    with pytest.raises(OutputsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_outputs(outputs)
