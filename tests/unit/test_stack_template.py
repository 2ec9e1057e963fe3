"""Loading the template and checking values against its parameters (before any AWS call)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringleader.tools.stack.params import RawCreateOptions, parse_create
from ringleader.tools.stack.template import (
    MAX_TEMPLATE_BODY_BYTES,
    TemplateError,
    check_parameters,
    default_template_path,
    load_template,
    parse_template,
)

REPO = Path(__file__).resolve().parents[2]


def test_the_default_template_is_the_repositorys() -> None:
    assert default_template_path() == REPO / "cfn" / "training-vpc.yaml"
    template = load_template()
    assert len(template.body.encode()) <= MAX_TEMPLATE_BODY_BYTES
    assert "BucketName" in template.parameters
    assert {"EstimatorSubnets", "EstimatorSecurityGroupIds", "ExecutionRoleArn"} <= (
        template.output_names
    )


@pytest.mark.parametrize(
    "options",
    [
        RawCreateOptions(region="us-east-1", bucket="my-data"),
        RawCreateOptions(
            region="us-east-1",
            bucket="my.data.bucket",
            efs_id="fs-0123abcd",
            fsx="2400",
            fsx_s3_prefix="a/b_c/d-e.f",
            git_repository="https://git.example.com:8443/team/repo",
            vpc_cidr="192.168.0.0/20",
            notebook_instance_type="ml.p4de.24xlarge",
        ),
        RawCreateOptions(region="us-east-1", bucket="abc", create_efs=True, git_repository="repo1"),
    ],
)
def test_validated_values_satisfy_the_templates_own_rules(options: RawCreateOptions) -> None:
    check_parameters(load_template(), parse_create(options, {}).cfn_parameters())


def test_unknown_parameter() -> None:
    with pytest.raises(TemplateError, match="has no parameter"):
        check_parameters(load_template(), {"BucketName": "abc", "Nope": "1"})


def test_missing_required_parameter() -> None:
    with pytest.raises(TemplateError, match="needs value"):
        check_parameters(load_template(), {"VpcCidr": "10.0.0.0/16"})


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("VpcCidr", "10.0.0.0/8", "does not match"),
        ("CreateEfsFileSystem", "yes", "is not one of"),
    ],
)
def test_values_against_the_templates_rules(name: str, value: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        check_parameters(load_template(), {"BucketName": "abc", name: value})


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match="cannot read the template"):
        load_template(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "Resources:\n  X:\n    Type: AWS::EC2::VPC\n    Properties:\n      A: !Ref B\n",
            "short tags",
        ),
        ("Parameters: {}\n", "no Resources"),
        ("- a\n- b\n", "no Resources"),
        ("Resources: {X: {Type: T}}\nParameters: [1]\n", "Parameters must map"),
        ("Resources: {}\n#" + "x" * MAX_TEMPLATE_BODY_BYTES, "CreateStack accepts at most"),
    ],
)
def test_malformed_templates(body: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        parse_template(body, Path("t.yaml"))
