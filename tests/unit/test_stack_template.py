"""Loading the template and checking values against its parameters (before any AWS call)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ringleader.tools.stack.params import (
    MAX_NEW_STACK_NAME,
    InvalidInput,
    RawCreateOptions,
    parse_create,
    parse_target,
)
from ringleader.tools.stack.render import estimator_kwargs, parse_outputs
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
            export_deletions=True,
            ecr_repository="team/ringleader-gpu_2.1",
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


# ---------------------------------------------------------------------------- job role, job names
def test_the_template_names_the_job_role_the_notebook_role_and_the_job_prefix() -> None:
    assert {"ExecutionRoleArn", "NotebookRoleArn", "TrainingJobBaseName"} <= (
        load_template().output_names
    )


STACK_OUTPUTS = {
    "VpcId": "vpc-0a1b2c3d4e5f60718",
    "EstimatorSubnets": '["subnet-0aaa"]',
    "EstimatorSecurityGroupIds": '["sg-0ccc"]',
    "ExecutionRoleArn": "arn:aws:iam::123456789012:role/team-a-vpc-JobRole-ABC",
    "KmsKeyArn": "arn:aws:kms:us-east-1:123456789012:key/1234",
    "BucketName": "my-data",
}


def test_the_estimator_runs_as_the_job_role_under_the_stack_prefix() -> None:
    kwargs = estimator_kwargs(parse_outputs({**STACK_OUTPUTS, "TrainingJobBaseName": "team-a-vpc"}))
    assert kwargs["role"] == STACK_OUTPUTS["ExecutionRoleArn"]
    # The notebook role may start only jobs named "<stack>-...": the SDK names them so.
    assert kwargs["base_job_name"] == "team-a-vpc"


def test_a_stack_from_before_the_split_gives_no_base_job_name() -> None:
    assert "base_job_name" not in estimator_kwargs(parse_outputs(STACK_OUTPUTS))


# The SageMaker Python SDK names a job f"{base_job_name}-{timestamp}", cutting the base so that
# the whole fits 63 characters; its timestamp is %Y-%m-%d-%H-%M-%S plus milliseconds.
SDK_TIMESTAMP = "2024-05-01-12-00-00-123"
JOB_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")


def test_the_longest_new_stack_name_still_prefixes_whole_job_names() -> None:
    name = "a" + "-b" * ((MAX_NEW_STACK_NAME - 1) // 2)
    assert len(name) == MAX_NEW_STACK_NAME
    parse_create(RawCreateOptions(region="us-east-1", bucket="abc", stack_name=name), {})
    job = f"{name}-{SDK_TIMESTAMP}"
    assert len(job) == 63 and JOB_NAME.match(job)


@pytest.mark.parametrize(
    "name",
    [
        "Team-A-vpc",  # job ARNs have carried names in lower case: the prefix would not match
        "a" * (MAX_NEW_STACK_NAME + 1),  # the SDK would cut it, and the hyphen after it
    ],
)
def test_a_new_stack_name_that_could_not_prefix_its_jobs_is_refused(name: str) -> None:
    with pytest.raises(InvalidInput, match="prefixes the names of its training jobs") as caught:
        parse_create(RawCreateOptions(region="us-east-1", bucket="abc", stack_name=name), {})
    assert (caught.value.option, caught.value.got) == ("--stack-name", name)


def test_existing_stacks_keep_any_valid_name() -> None:
    # Only create is held to the job prefix; status, outputs and delete reach older stacks.
    assert parse_target("us-east-1", "Team-A-vpc", {}).stack_name == "Team-A-vpc"
