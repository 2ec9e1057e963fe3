"""The stack command's interface: its argparse wiring, and bad input refused (exit 2) on stderr
before any AWS client exists."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, NoReturn

import boto3
import pytest

from ringleader.tools.stack import cli


@pytest.fixture(autouse=True)
def no_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to make an AWS client fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError(f"an AWS client was created: {args} {kwargs}")

    monkeypatch.setattr(boto3, "client", refuse)
    monkeypatch.setattr(boto3.session.Session, "client", refuse)
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)


def top_level_parser() -> argparse.ArgumentParser:
    """The way the ringleader CLI wires the stack command in."""
    parser = argparse.ArgumentParser(prog="ringleader")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser


@pytest.mark.parametrize("command", ["create", "status", "outputs", "delete"])
def test_every_sub_command_sets_a_function(command: str) -> None:
    args = top_level_parser().parse_args(["stack", command, "--region", "us-east-1"])
    assert args.command == "stack" and args.stack_command == command
    assert args.func is getattr(cli, f"cmd_{command}")


def test_stack_alone_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        top_level_parser().parse_args(["stack"])
    assert exited.value.code == 2
    assert "COMMAND" in capsys.readouterr().err


def test_efs_id_and_create_efs_exclude_each_other_in_argparse(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        top_level_parser().parse_args(
            ["stack", "create", "--efs-id", "fs-0123abcd", "--create-efs"]
        )
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    args = top_level_parser().parse_args(["stack", *argv])
    code = args.func(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["create", "--bucket", "my-data"],
            "--region is required: expected an AWS region such as us-east-1 "
            "(or AWS_REGION / AWS_DEFAULT_REGION set)",
        ),
        (["status"], "--region is required"),
        (["outputs"], "--region is required"),
        (["delete"], "--region is required"),
        (
            ["create", "--region", "us-east-1"],
            "--bucket is required: expected the name of an existing S3 bucket",
        ),
        (["create", "--region", "us-east-1", "--bucket", "My_Data"], "--bucket: expected"),
        (
            ["create", "--region", "us-east-1", "--bucket", "my..data"],
            "it has two adjacent periods; got 'my..data'",
        ),
        (
            ["create", "--region", "us-east-1", "--bucket", "data", "--efs-id", "fs-12"],
            "--efs-id: expected an EFS file system id",
        ),
        (
            [
                "create",
                "--region",
                "us-east-1",
                "--bucket",
                "data",
                "--private-subnet-a-cidr",
                "10.20.0.0/20",
            ],
            "--private-subnet-a-cidr: expected a CIDR that does not overlap "
            "--public-subnet-cidr 10.20.0.0/24; got '10.20.0.0/20'",
        ),
        (
            ["create", "--region", "us-east-1", "--bucket", "data", "--vpc-cidr", "10.0.0.0/8"],
            "--vpc-cidr: expected an IPv4 CIDR block with a prefix length from /16 to /28",
        ),
        (
            ["create", "--region", "us-east-1", "--bucket", "data", "--fsx", "1000"],
            "--fsx: expected an FSx for Lustre size in GiB: 1200 or a multiple of 2400",
        ),
        (
            ["create", "--region", "us-east-1", "--bucket", "data", "--export-deletions"],
            "--fsx is required: expected an FSx for Lustre size in GiB (not 0) when "
            "--export-deletions is given",
        ),
        (
            ["create", "--region", "us-east-1", "--bucket", "data", "--ecr-repository", "Repo"],
            "--ecr-repository: expected the name of an ECR repository",
        ),
        (["delete", "--region", "us-east-1", "--wait-timeout", "soon"], "--wait-timeout"),
        (["status", "--region", "Virginia"], "--region: expected an AWS region"),
        (["outputs", "--region", "us-east-1", "--stack-name", "my_stack"], "--stack-name"),
    ],
)
def test_bad_input_exits_2_before_any_aws_call(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.startswith("ringleader stack: error: ")
    assert message in err
    assert err.count("\n") == 1


def test_a_missing_template_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    code, out, err = run(
        capsys, "create", "--region", "us-east-1", "--bucket", "data", "--template", str(missing)
    )
    assert (code, out) == (2, "")
    assert err == (
        f"ringleader stack: error: --template: cannot read the template {missing}: "
        "No such file or directory\n"
    )


def test_a_template_without_the_parameters_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    other = tmp_path / "other.yaml"
    other.write_text("Resources:\n  Vpc:\n    Type: AWS::EC2::VPC\n")
    code, _, err = run(
        capsys, "create", "--region", "us-east-1", "--bucket", "data", "--template", str(other)
    )
    assert code == 2
    assert "has no parameter(s) BucketName, CreateEfsFileSystem" in err
