"""Validation of the stack command's input (pure; nothing here talks to AWS)."""

from __future__ import annotations

import dataclasses

import pytest

from ringleader.tools.stack import params
from ringleader.tools.stack.params import InvalidInput, RawCreateOptions, WaitPolicy, parse_create

NO_ENV: dict[str, str] = {}


def raw(**overrides: object) -> RawCreateOptions:
    base = RawCreateOptions(region="us-east-1", bucket="my-training-data")
    return dataclasses.replace(base, **overrides)  # type: ignore[arg-type]


def invalid(options: RawCreateOptions, env: dict[str, str] | None = None) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        parse_create(options, env if env is not None else NO_ENV)
    return caught.value


def test_defaults() -> None:
    created = parse_create(raw(), NO_ENV)
    assert created.target == params.Target("us-east-1", "ringleader-training-vpc")
    assert created.cfn_parameters() == {
        "BucketName": "my-training-data",
        "VpcCidr": "10.20.0.0/16",
        "PublicSubnetCidr": "10.20.0.0/24",
        "PrivateSubnetACidr": "10.20.16.0/20",
        "PrivateSubnetBCidr": "10.20.32.0/20",
        "CreateEfsFileSystem": "false",
        "ExistingEfsId": "",
        "FsxStorageCapacity": "0",
        "FsxS3Prefix": "fsx",
        "ExportDeletions": "false",
        "EcrRepositoryName": "ringleader",
        "NotebookInstanceType": "ml.t3.medium",
        "GitRepository": "",
    }
    assert created.wait_timeout == params.DEFAULT_CREATE_TIMEOUT


def test_every_option_reaches_the_parameters() -> None:
    created = parse_create(
        raw(
            stack_name="team-a-vpc",
            efs_id="fs-0123456789abcdef0",
            fsx="4800",
            fsx_s3_prefix="/datasets/imagenet/",
            export_deletions=True,
            ecr_repository="team/ringleader-gpu",
            git_repository="https://github.com/org/repo.git",
            vpc_cidr="172.31.0.0/16",
            public_subnet_cidr="172.31.255.0/24",
            private_subnet_a_cidr="172.31.0.0/18",
            private_subnet_b_cidr="172.31.64.0/18",
            notebook_instance_type="ml.m5.xlarge",
            wait_timeout="900",
        ),
        NO_ENV,
    )
    assert created.target.stack_name == "team-a-vpc"
    assert created.cfn_parameters() == {
        "BucketName": "my-training-data",
        "VpcCidr": "172.31.0.0/16",
        "PublicSubnetCidr": "172.31.255.0/24",
        "PrivateSubnetACidr": "172.31.0.0/18",
        "PrivateSubnetBCidr": "172.31.64.0/18",
        "CreateEfsFileSystem": "false",
        "ExistingEfsId": "fs-0123456789abcdef0",
        "FsxStorageCapacity": "4800",
        "FsxS3Prefix": "datasets/imagenet",
        "ExportDeletions": "true",
        "EcrRepositoryName": "team/ringleader-gpu",
        "NotebookInstanceType": "ml.m5.xlarge",
        "GitRepository": "https://github.com/org/repo.git",
    }
    assert created.wait_timeout == 900


def test_create_efs() -> None:
    created = parse_create(raw(create_efs=True), NO_ENV)
    assert created.cfn_parameters()["CreateEfsFileSystem"] == "true"
    assert created.cfn_parameters()["ExistingEfsId"] == ""


# ---------------------------------------------------------------------------- region
def test_missing_region_is_an_error_naming_the_option_and_the_variables() -> None:
    error = invalid(raw(region=None))
    assert error.option == "--region"
    assert str(error) == (
        "--region is required: expected an AWS region such as us-east-1 "
        "(or AWS_REGION / AWS_DEFAULT_REGION set)"
    )


@pytest.mark.parametrize(
    ("env", "region"),
    [
        ({"AWS_DEFAULT_REGION": "eu-west-1"}, "eu-west-1"),
        ({"AWS_REGION": "ap-southeast-2", "AWS_DEFAULT_REGION": "eu-west-1"}, "ap-southeast-2"),
        ({"AWS_REGION": "", "AWS_DEFAULT_REGION": "eu-west-1"}, "eu-west-1"),
    ],
)
def test_region_from_the_environment(env: dict[str, str], region: str) -> None:
    assert parse_create(raw(region=None), env).target.region == region


def test_the_option_wins_over_the_environment() -> None:
    created = parse_create(raw(region="us-west-2"), {"AWS_REGION": "eu-west-1"})
    assert created.target.region == "us-west-2"


@pytest.mark.parametrize("region", ["us-east-1", "us-gov-west-1", "eu-central-2", "cn-north-1"])
def test_valid_regions(region: str) -> None:
    assert params.parse_region(region, NO_ENV) == region


@pytest.mark.parametrize("region", ["US-EAST-1", "us-east", "useast1", "us-east-1a", ""])
def test_invalid_regions(region: str) -> None:
    error = invalid(raw(region=region))
    assert (error.option, error.got) == ("--region", region)


def test_invalid_region_from_the_environment_says_where_it_came_from() -> None:
    error = invalid(raw(region=None), {"AWS_REGION": "mars-1"})
    assert error.got == "mars-1" and "environment" in error.expected


# ---------------------------------------------------------------------------- bucket
def test_missing_bucket() -> None:
    error = invalid(raw(bucket=None))
    assert error.option == "--bucket" and error.got is None
    assert str(error).startswith("--bucket is required: expected the name of an existing S3 bucket")


@pytest.mark.parametrize(
    "bucket",
    ["abc", "a" * 63, "my.training.data", "training-data-2024", "1bucket", "a-b.c-d"],
)
def test_valid_bucket_names(bucket: str) -> None:
    assert params.parse_bucket(bucket) == bucket


@pytest.mark.parametrize(
    ("bucket", "problem"),
    [
        ("ab", "it has 2 characters, not 3 to 63"),
        ("a" * 64, "it has 64 characters, not 3 to 63"),
        ("My-Bucket", "it contains 'BM'; only lowercase letters"),
        ("my_bucket", "it contains '_'"),
        ("-bucket", "it must begin and end with a lowercase letter or a digit"),
        ("bucket.", "it must begin and end with a lowercase letter or a digit"),
        ("my..bucket", "it has two adjacent periods"),
        ("192.168.5.4", "it is formatted as an IP address"),
        ("xn--bucket", "the prefix 'xn--' is reserved"),
        ("sthree-bucket", "the prefix 'sthree-' is reserved"),
        ("amzn-s3-demo-bucket", "the prefix 'amzn-s3-demo-' is reserved"),
        ("bucket-s3alias", "the suffix '-s3alias' is reserved"),
        ("bucket--ol-s3", "the suffix '--ol-s3' is reserved"),
        ("bucket.mrap", "the suffix '.mrap' is reserved"),
        ("bucket--x-s3", "the suffix '--x-s3' is reserved"),
        ("bucket--table-s3", "the suffix '--table-s3' is reserved"),
    ],
)
def test_bucket_names_that_break_s3_rules(bucket: str, problem: str) -> None:
    error = invalid(raw(bucket=bucket))
    assert (error.option, error.got) == ("--bucket", bucket)
    assert problem in str(error)


def test_bucket_given_as_a_url() -> None:
    error = invalid(raw(bucket="s3://my-bucket"))
    assert "without s3://" in str(error)


# ---------------------------------------------------------------------------- EFS and FSx
@pytest.mark.parametrize("efs_id", ["fs-0123abcd", "fs-0123456789abcdef0"])
def test_efs_ids_in_todays_formats(efs_id: str) -> None:
    assert parse_create(raw(efs_id=efs_id), NO_ENV).existing_efs_id == efs_id


@pytest.mark.parametrize(
    "efs_id",
    [
        "fs-0123ABCD",
        "fs-0123abc",
        "fs-0123456789abcdef",
        "fs-0123456789abcdef01",
        "0123abcd",
        "fsap-0123456789abcdef0",
        "arn:aws:elasticfilesystem:us-east-1:123456789012:file-system/fs-0123abcd",
        " fs-0123abcd",
    ],
)
def test_efs_ids_in_wrong_formats(efs_id: str) -> None:
    error = invalid(raw(efs_id=efs_id))
    assert (error.option, error.got) == ("--efs-id", efs_id)
    assert "17 (or, for older file systems, 8) lowercase hexadecimal digits" in error.expected


def test_efs_id_and_create_efs_exclude_each_other() -> None:
    error = invalid(raw(efs_id="fs-0123abcd", create_efs=True))
    assert error.option == "--efs-id" and "not both" in error.expected


@pytest.mark.parametrize(
    ("size", "gib"), [("0", 0), ("1200", 1200), ("2400", 2400), ("9600", 9600)]
)
def test_fsx_sizes(size: str, gib: int) -> None:
    assert parse_create(raw(fsx=size), NO_ENV).fsx_storage_gib == gib


@pytest.mark.parametrize("size", ["1000", "3600", "1200.0", "-2400", "large", "", "024000"])
def test_invalid_fsx_sizes(size: str) -> None:
    error = invalid(raw(fsx=size))
    assert (error.option, error.got) == ("--fsx", size)


@pytest.mark.parametrize("prefix", ["", "/", "a//b", "../x", "a/./b", "with space", "a*b"])
def test_invalid_fsx_prefixes(prefix: str) -> None:
    error = invalid(raw(fsx="1200", fsx_s3_prefix=prefix))
    assert (error.option, error.got) == ("--fsx-s3-prefix", prefix)


def test_fsx_prefix_without_fsx() -> None:
    error = invalid(raw(fsx_s3_prefix="data"))
    assert error.option == "--fsx"


def test_export_deletions_with_fsx() -> None:
    created = parse_create(raw(fsx="1200", export_deletions=True), NO_ENV)
    assert created.export_deletions
    assert created.cfn_parameters()["ExportDeletions"] == "true"


@pytest.mark.parametrize(
    ("fsx", "message"),
    [
        (
            None,
            "--fsx is required: expected an FSx for Lustre size in GiB (not 0) when "
            "--export-deletions is given: deletions are exported from FSx to S3",
        ),
        (
            "0",
            "--fsx: expected an FSx for Lustre size in GiB (not 0) when --export-deletions is "
            "given: deletions are exported from FSx to S3; got '0'",
        ),
    ],
)
def test_export_deletions_without_fsx_names_both_options(fsx: str | None, message: str) -> None:
    error = invalid(raw(fsx=fsx, export_deletions=True))
    assert (error.option, error.got) == ("--fsx", fsx)
    assert str(error) == message


# ---------------------------------------------------------------------------- ECR repository
@pytest.mark.parametrize(
    "repository", ["ringleader", "team/ringleader-gpu_2.1", "a/b/c", "r2", "my.repo"]
)
def test_ecr_repositories(repository: str) -> None:
    created = parse_create(raw(ecr_repository=repository), NO_ENV)
    assert created.ecr_repository == repository
    assert created.cfn_parameters()["EcrRepositoryName"] == repository


@pytest.mark.parametrize(
    "repository",
    [
        "Ringleader",
        "team//ringleader",
        "ringleader-",
        "/ringleader",
        "ringleader/",
        "ring--leader",
        "ringleader:0.1.0",
        "ringleader@sha256:0123",
        "*",
        "",
        "ringleader\n",
    ],
)
def test_invalid_ecr_repositories(repository: str) -> None:
    error = invalid(raw(ecr_repository=repository))
    assert (error.option, error.got) == ("--ecr-repository", repository)
    assert str(error).startswith(
        "--ecr-repository: expected the name of an ECR repository in the stack's account and "
        "region, such as ringleader or team/ringleader: lowercase letters and digits, "
        "separated by single '.', '_', '-' or '/' (no tag or digest); got "
    )


def test_an_ecr_repository_uri_asks_for_the_name() -> None:
    # What `docker push` and the ECR console show; the pattern alone would accept it.
    uri = "123456789012.dkr.ecr.us-east-1.amazonaws.com/ringleader"
    error = invalid(raw(ecr_repository=uri))
    assert (error.option, error.got) == ("--ecr-repository", uri)
    assert "(the name only, without the registry host)" in str(error)


# ---------------------------------------------------------------------------- network
@pytest.mark.parametrize(
    ("vpc", "expected"),
    [
        ("10.0.0.0/16", ("10.0.0.0/24", "10.0.64.0/18", "10.0.128.0/18")),
        ("192.168.0.0/20", ("192.168.0.0/24", "192.168.4.0/22", "192.168.8.0/22")),
        ("172.16.0.0/26", ("172.16.0.0/28", "172.16.0.16/28", "172.16.0.32/28")),
    ],
)
def test_subnets_are_carved_out_of_a_custom_vpc(vpc: str, expected: tuple[str, ...]) -> None:
    network = parse_create(raw(vpc_cidr=vpc), NO_ENV).network
    assert (
        network.public_subnet_cidr,
        network.private_subnet_a_cidr,
        network.private_subnet_b_cidr,
    ) == expected


def test_a_vpc_too_small_to_carve_asks_for_subnets() -> None:
    error = invalid(raw(vpc_cidr="10.0.0.0/27"))
    assert (error.option, error.got) == ("--vpc-cidr", "10.0.0.0/27")
    assert "give the three subnet CIDRs" in error.expected


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("vpc_cidr", "10.0.0.0", "IPv4 CIDR block"),
        ("vpc_cidr", "10.0.0.0/8", "from /16 to /28"),
        ("vpc_cidr", "10.0.0.0/29", "from /16 to /28"),
        ("vpc_cidr", "10.0.0.1/16", "without host bits set (did you mean 10.0.0.0/16?)"),
        ("vpc_cidr", "fd00::/56", "IPv4 CIDR block"),
        ("vpc_cidr", "10.0.0.0/x", "IPv4 CIDR block"),
        ("public_subnet_cidr", "300.0.0.0/24", "IPv4 CIDR block"),
        ("private_subnet_a_cidr", "10.99.0.0/20", "a CIDR inside --vpc-cidr 10.20.0.0/16"),
    ],
)
def test_invalid_cidrs(option: str, value: str, message: str) -> None:
    error = invalid(raw(**{option: value}))
    assert error.option == "--" + option.replace("_", "-")
    assert error.got == value
    assert message in str(error)


@pytest.mark.parametrize(
    ("subnets", "option", "message"),
    [
        (
            {"private_subnet_a_cidr": "10.20.0.0/20"},
            "--private-subnet-a-cidr",
            "does not overlap --public-subnet-cidr 10.20.0.0/24",
        ),
        (
            {"private_subnet_b_cidr": "10.20.24.0/21"},
            "--private-subnet-b-cidr",
            "does not overlap --private-subnet-a-cidr 10.20.16.0/20",
        ),
        (
            {"public_subnet_cidr": "10.20.16.0/24", "private_subnet_b_cidr": "10.20.48.0/20"},
            "--private-subnet-a-cidr",
            "does not overlap --public-subnet-cidr 10.20.16.0/24",
        ),
    ],
)
def test_overlapping_cidrs(subnets: dict[str, str], option: str, message: str) -> None:
    error = invalid(raw(**subnets))
    assert error.option == option
    assert message in str(error)


# ---------------------------------------------------------------------------- the rest
@pytest.mark.parametrize(
    "repository",
    [
        "https://github.com/org/repo.git",
        "https://git.example.com:8443/team/repo",
        "my-code-repo",
    ],
)
def test_git_repositories(repository: str) -> None:
    assert parse_create(raw(git_repository=repository), NO_ENV).git_repository == repository


@pytest.mark.parametrize(
    "repository",
    [
        "http://github.com/org/repo.git",
        "git@github.com:org/repo.git",
        "https://token@github.com/org/repo.git",
        "https://user:pw@github.com/org/repo.git",
        "https:///repo",
        "https://github.com/org/my repo",
        "https://github.com:99999/org/repo",
        "-repo",
    ],
)
def test_invalid_git_repositories(repository: str) -> None:
    error = invalid(raw(git_repository=repository))
    assert (error.option, error.got) == ("--git-repository", repository)


@pytest.mark.parametrize("instance_type", ["t3.medium", "ml.t3", "ML.T3.MEDIUM", "ml.t3.medium "])
def test_invalid_instance_types(instance_type: str) -> None:
    error = invalid(raw(notebook_instance_type=instance_type))
    assert error.option == "--notebook-instance-type"


@pytest.mark.parametrize("name", ["1stack", "my_stack", "a" * 129, "stack.name", ""])
def test_invalid_stack_names(name: str) -> None:
    error = invalid(raw(stack_name=name))
    assert (error.option, error.got) == ("--stack-name", name)


@pytest.mark.parametrize(
    "timeout", ["0", "-5", "1.5", "ten", "\u00b2", "", str(params.MAX_WAIT_TIMEOUT + 1)]
)
def test_invalid_timeouts(timeout: str) -> None:
    error = invalid(raw(wait_timeout=timeout))
    assert (error.option, error.got) == ("--wait-timeout", timeout)


@pytest.mark.parametrize(
    ("timeout", "delay", "expected"),
    [
        (3600, 10, WaitPolicy(10, 361)),
        (5, 10, WaitPolicy(5, 2)),
        (1, 10, WaitPolicy(1, 2)),
        (25, 10, WaitPolicy(10, 3)),
        (30, 0, WaitPolicy(1, 31)),
    ],
)
def test_wait_policy_is_bounded_by_the_timeout(
    timeout: int, delay: int, expected: WaitPolicy
) -> None:
    policy = WaitPolicy.for_timeout(timeout, delay)
    assert policy == expected
    assert policy.delay * (policy.max_attempts - 1) <= timeout
