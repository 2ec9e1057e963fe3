"""The CloudFormation calls of the stack command: bounded waiters, failure events on rollback.

Nothing here prints: each operation returns a Result that cli.py turns into text and an exit
code. ClientError is handled where CloudFormation's answer has a meaning (no such stack,
already exists, refused); everything else propagates to cli.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError, WaiterError

from ringleader.aws import client as aws
from ringleader.tools.stack.events import (
    FAILED_STACK_STATUSES,
    FailureReport,
    StackEvent,
    chronological,
    failure_report,
    last_operation,
)
from ringleader.tools.stack.params import CreateParams, Target, WaitPolicy
from ringleader.tools.stack.render import outputs_from_api
from ringleader.tools.stack.template import Template

if TYPE_CHECKING:
    from mypy_boto3_cloudformation.client import CloudFormationClient
    from mypy_boto3_cloudformation.waiter import (
        StackCreateCompleteWaiter,
        StackDeleteCompleteWaiter,
    )

STACK_TAG_KEY, STACK_TAG_VALUE = "ringleader:template", "training-vpc"
MAX_EVENT_PAGES = 20  # DescribeStackEvents pages (of up to 100 events) read at most


@dataclass(frozen=True)
class StackState:
    name: str
    stack_id: str
    status: str
    reason: str | None
    outputs: Mapping[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.status in FAILED_STACK_STATUSES


@dataclass(frozen=True)
class Result:
    """What an operation did: ok or not, a message, and the failing resource's events."""

    ok: bool
    message: str
    state: StackState | None = None
    failure: FailureReport | None = None


def make_client(region: str) -> CloudFormationClient:
    """A CloudFormation client of boto3's default session (see ringleader.aws.client)."""
    return cast("CloudFormationClient", aws.make_client("cloudformation", region=region))


def error_text(error: ClientError) -> str:
    info = error.response.get("Error", {})
    return f"{info.get('Code', 'Error')}: {info.get('Message', str(error))}"


def _does_not_exist(error: ClientError) -> bool:
    info = error.response.get("Error", {})
    return info.get("Code") == "ValidationError" and "does not exist" in info.get("Message", "")


def _waited(wait: WaitPolicy) -> int:
    return wait.delay * (wait.max_attempts - 1)


class StackClient:
    """One stack (region and name) and the CloudFormation client that manages it."""

    def __init__(
        self,
        target: Target,
        cfn: CloudFormationClient,
        on_progress: Callable[[str], None] = lambda _message: None,
    ) -> None:
        self.target = target
        self.cfn = cfn
        self.on_progress = on_progress

    # ------------------------------------------------------------------ reading
    def describe(self, stack: str | None = None) -> StackState | None:
        """The stack's state (by name, or by id, which also finds deleted stacks), or None."""
        try:
            stacks = self.cfn.describe_stacks(StackName=stack or self.target.stack_name)["Stacks"]
        except ClientError as error:
            if _does_not_exist(error):
                return None
            raise
        if not stacks:
            return None
        found = stacks[0]
        return StackState(
            name=found["StackName"],
            stack_id=found.get("StackId", ""),
            status=found["StackStatus"],
            reason=found.get("StackStatusReason"),
            outputs=outputs_from_api(found.get("Outputs", [])),
        )

    def events(self, stack: str | None = None) -> list[StackEvent]:
        """The events of the stack's last operation, oldest first (a bounded number of pages)."""
        paginator = self.cfn.get_paginator("describe_stack_events")
        raw: list[Any] = []
        pages = paginator.paginate(StackName=stack or self.target.stack_name)
        for number, page in enumerate(pages):
            raw.extend(page.get("StackEvents", []))
            if number + 1 >= MAX_EVENT_PAGES:
                break
        return last_operation(chronological(raw))

    def failure(self, stack: str | None = None) -> FailureReport:
        return failure_report(self.events(stack))

    # ------------------------------------------------------------------ writing
    def create(self, params: CreateParams, template: Template, wait: WaitPolicy) -> Result:
        name = self.target.stack_name
        try:
            response = self.cfn.create_stack(
                StackName=name,
                TemplateBody=template.body,
                Parameters=[
                    {"ParameterKey": key, "ParameterValue": value}
                    for key, value in params.cfn_parameters().items()
                ],
                Capabilities=["CAPABILITY_IAM"],
                OnFailure="ROLLBACK",
                Tags=[{"Key": STACK_TAG_KEY, "Value": STACK_TAG_VALUE}],
            )
        except ClientError as error:
            return self._create_refused(error)
        self.on_progress(
            f"creating stack {name} in {self.target.region}; waiting up to {_waited(wait)} s"
        )
        stack_id = response.get("StackId") or name
        return self._wait(self.cfn.get_waiter("stack_create_complete"), wait, stack_id)

    def _create_refused(self, error: ClientError) -> Result:
        """CloudFormation refused the request itself, so it created no stack (unless one of
        that name already existed)."""
        if error.response.get("Error", {}).get("Code") == "AlreadyExistsException":
            state = self.describe()
            if state is not None:
                return Result(
                    False,
                    f"stack {state.name} already exists ({state.status}); read it with "
                    "`ringleader stack outputs` or remove it with `ringleader stack delete`",
                    state,
                )
        return Result(False, f"CreateStack was refused: {error_text(error)}")

    def delete(self, wait: WaitPolicy) -> Result:
        state = self.describe()
        if state is None:
            return Result(True, f"no stack {self.target.stack_name} in {self.target.region}")
        stack_id = state.stack_id or state.name
        self.cfn.delete_stack(StackName=stack_id)
        self.on_progress(
            f"deleting stack {state.name} in {self.target.region}; waiting up to {_waited(wait)} s"
        )
        return self._wait(self.cfn.get_waiter("stack_delete_complete"), wait, stack_id)

    def _wait(
        self,
        waiter: StackCreateCompleteWaiter | StackDeleteCompleteWaiter,
        wait: WaitPolicy,
        stack_id: str,
    ) -> Result:
        try:
            waiter.wait(
                StackName=stack_id,
                WaiterConfig={"Delay": wait.delay, "MaxAttempts": wait.max_attempts},
            )
        except WaiterError:
            return self._wait_failed(stack_id, wait)
        state = self.describe(stack_id)
        name = self.target.stack_name
        if state is None or state.status == "DELETE_COMPLETE":
            return Result(True, f"stack {name} deleted")
        return Result(True, f"stack {name}: {state.status}", state)

    def _wait_failed(self, stack_id: str, wait: WaitPolicy) -> Result:
        state = self.describe(stack_id)
        name = self.target.stack_name
        if state is None:
            return Result(False, f"stack {name} disappeared while waiting")
        if state.failed:
            reason = f" ({state.reason})" if state.reason else ""
            return Result(
                False, f"stack {name} failed: {state.status}{reason}", state, self.failure(stack_id)
            )
        return Result(
            False,
            f"stack {name} is still {state.status} after {_waited(wait)} s; "
            "follow it with `ringleader stack status`",
            state,
        )
