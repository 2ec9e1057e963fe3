"""`ringleader stack create|status|outputs|delete`.

Exit codes: 0 ok; 1 the stack failed, rolled back, timed out or AWS refused; 2 invalid input,
reported on stderr before any AWS call. Results go to stdout, progress and failures to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from ringleader.tools.stack import params as p
from ringleader.tools.stack.client import Result, StackClient, error_text, make_client
from ringleader.tools.stack.events import READY_STACK_STATUSES, format_failure
from ringleader.tools.stack.render import OutputsError, parse_outputs, render_json, render_python
from ringleader.tools.stack.template import TemplateError, check_parameters, load_template

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
PROG = "ringleader stack"

Command = Callable[[argparse.Namespace], int]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    stack = subparsers.add_parser(
        "stack",
        help="create, inspect or delete the private training VPC (cfn/training-vpc.yaml)",
        description="The CloudFormation stack of a private VPC for multi-host training. "
        "Exit codes: 0 ok, 1 the stack failed or rolled back, 2 invalid input.",
    )
    commands = stack.add_subparsers(dest="stack_command", metavar="COMMAND", required=True)

    create = commands.add_parser("create", help="create the stack and print estimator arguments")
    _common(create)
    create.add_argument("--bucket", help="existing S3 bucket the execution role may use (required)")
    efs = create.add_mutually_exclusive_group()
    efs.add_argument("--efs-id", help="existing EFS file system to mount (fs-...)")
    efs.add_argument(
        "--create-efs", action="store_true", help="create an encrypted EFS file system"
    )
    create.add_argument(
        "--fsx", metavar="GIB", help="create FSx for Lustre of this size (1200 or n*2400 GiB)"
    )
    create.add_argument(
        "--fsx-s3-prefix",
        metavar="PREFIX",
        help=f"bucket prefix FSx imports from and exports to (default {p.DEFAULT_FSX_S3_PREFIX})",
    )
    create.add_argument(
        "--export-deletions",
        action="store_true",
        help="a file deleted on FSx also deletes its object in S3 (needs --fsx; default: kept)",
    )
    create.add_argument(
        "--ecr-repository",
        metavar="NAME",
        help="the only ECR repository (in this account and region) training jobs may pull from "
        f"(default {p.DEFAULT_ECR_REPOSITORY})",
    )
    create.add_argument("--git-repository", help="notebook's default https:// Git repository")
    create.add_argument("--vpc-cidr", help=f"VPC CIDR (default {p.DEFAULT_VPC_CIDR})")
    create.add_argument("--public-subnet-cidr", help="NAT gateway subnet CIDR")
    create.add_argument("--private-subnet-a-cidr", help="first private subnet CIDR")
    create.add_argument("--private-subnet-b-cidr", help="second private subnet CIDR (other AZ)")
    create.add_argument(
        "--notebook-instance-type",
        help=f"notebook instance type (default {p.DEFAULT_NOTEBOOK_INSTANCE_TYPE})",
    )
    create.add_argument(
        "--wait-timeout",
        metavar="SECONDS",
        help=f"how long to wait for the stack (default {p.DEFAULT_CREATE_TIMEOUT})",
    )
    create.add_argument(
        "--template", type=Path, help="template file (default: cfn/training-vpc.yaml)"
    )
    create.set_defaults(func=cmd_create)

    status = commands.add_parser("status", help="print the stack's state (and failure events)")
    _common(status)
    status.set_defaults(func=cmd_status)

    outputs = commands.add_parser("outputs", help="print the outputs as estimator arguments")
    _common(outputs)
    outputs.add_argument("--format", choices=("python", "json"), default="python")
    outputs.set_defaults(func=cmd_outputs)

    delete = commands.add_parser("delete", help="delete the stack and wait until it is gone")
    _common(delete)
    delete.add_argument(
        "--wait-timeout",
        metavar="SECONDS",
        help=f"how long to wait for the deletion (default {p.DEFAULT_DELETE_TIMEOUT})",
    )
    delete.set_defaults(func=cmd_delete)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--region", help="AWS region (default: $AWS_REGION or $AWS_DEFAULT_REGION)")
    parser.add_argument(
        "--stack-name", help=f"CloudFormation stack name (default {p.DEFAULT_STACK_NAME})"
    )


# ---------------------------------------------------------------------------- commands
def cmd_create(args: argparse.Namespace) -> int:
    def run(env: Mapping[str, str]) -> int:
        params = p.parse_create(
            p.RawCreateOptions(
                region=args.region,
                stack_name=args.stack_name,
                bucket=args.bucket,
                efs_id=args.efs_id,
                create_efs=args.create_efs,
                fsx=args.fsx,
                fsx_s3_prefix=args.fsx_s3_prefix,
                export_deletions=args.export_deletions,
                ecr_repository=args.ecr_repository,
                git_repository=args.git_repository,
                vpc_cidr=args.vpc_cidr,
                public_subnet_cidr=args.public_subnet_cidr,
                private_subnet_a_cidr=args.private_subnet_a_cidr,
                private_subnet_b_cidr=args.private_subnet_b_cidr,
                notebook_instance_type=args.notebook_instance_type,
                wait_timeout=args.wait_timeout,
            ),
            env,
        )
        template = load_template(args.template)
        check_parameters(template, params.cfn_parameters())
        client = _client(params.target)
        result = client.create(params, template, p.WaitPolicy.for_timeout(params.wait_timeout))
        if not result.ok:
            return _report_failure(result)
        _err(result.message)
        return _print_outputs(result, params.target, "python")

    return _guarded(run)


def cmd_status(args: argparse.Namespace) -> int:
    def run(env: Mapping[str, str]) -> int:
        target = p.parse_target(args.region, args.stack_name, env)
        client = _client(target)
        state = client.describe()
        if state is None:
            _err(f"no stack {target.stack_name} in {target.region}")
            return EXIT_FAILED
        reason = f" ({state.reason})" if state.reason else ""
        print(f"{state.name} ({target.region}): {state.status}{reason}")
        if state.failed:
            _err(format_failure(client.failure(state.stack_id or None)))
            return EXIT_FAILED
        return EXIT_OK

    return _guarded(run)


def cmd_outputs(args: argparse.Namespace) -> int:
    def run(env: Mapping[str, str]) -> int:
        target = p.parse_target(args.region, args.stack_name, env)
        state = _client(target).describe()
        if state is None:
            _err(f"no stack {target.stack_name} in {target.region}")
            return EXIT_FAILED
        if state.status not in READY_STACK_STATUSES:
            _err(f"stack {state.name} is {state.status}; outputs exist once it is CREATE_COMPLETE")
            return EXIT_FAILED
        return _print_outputs(Result(True, "", state), target, args.format)

    return _guarded(run)


def cmd_delete(args: argparse.Namespace) -> int:
    def run(env: Mapping[str, str]) -> int:
        target = p.parse_target(args.region, args.stack_name, env)
        timeout = p.parse_timeout(args.wait_timeout, p.DEFAULT_DELETE_TIMEOUT)
        result = _client(target).delete(p.WaitPolicy.for_timeout(timeout))
        if not result.ok:
            return _report_failure(result)
        print(result.message)
        return EXIT_OK

    return _guarded(run)


# ---------------------------------------------------------------------------- helpers
def _client(target: p.Target) -> StackClient:
    return StackClient(target, make_client(target.region), on_progress=_err)


def _guarded(run: Callable[[Mapping[str, str]], int]) -> int:
    """Input errors exit 2 (they are raised before any AWS call); AWS errors exit 1."""
    try:
        return run(os.environ)
    except p.InvalidInput as error:
        _err(f"{PROG}: error: {error}")
        return EXIT_INVALID
    except TemplateError as error:
        _err(f"{PROG}: error: --template: {error}")
        return EXIT_INVALID
    except ClientError as error:
        _err(f"{PROG}: AWS refused: {error_text(error)}")
        return EXIT_FAILED
    except BotoCoreError as error:
        _err(f"{PROG}: AWS error: {error}")
        return EXIT_FAILED


def _report_failure(result: Result) -> int:
    _err(f"{PROG}: {result.message}")
    if result.failure is not None:
        _err(format_failure(result.failure))
    return EXIT_FAILED


def _print_outputs(result: Result, target: p.Target, fmt: str) -> int:
    assert result.state is not None
    try:
        outputs = parse_outputs(result.state.outputs)
    except OutputsError as error:
        _err(f"{PROG}: {error}")
        return EXIT_FAILED
    if fmt == "json":
        sys.stdout.write(render_json(outputs))
    else:
        sys.stdout.write(render_python(outputs, target.stack_name, target.region))
    return EXIT_OK


def _err(message: str) -> None:
    print(message, file=sys.stderr)
