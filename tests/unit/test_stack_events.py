"""Finding the resource that made a stack fail, from CloudFormation's events (pure)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from ringleader.tools.stack.events import (
    chronological,
    failure_report,
    format_failure,
    last_operation,
)

STACK = "ringleader-training-vpc"
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)


def api_event(
    seconds: int, logical: str, status: str, reason: str = "", kind: str = ""
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "StackName": STACK,
        "LogicalResourceId": logical,
        "ResourceType": kind or ("AWS::CloudFormation::Stack" if logical == STACK else "AWS::X"),
        "ResourceStatus": status,
        "Timestamp": T0 + timedelta(seconds=seconds),
        "PhysicalResourceId": "",
    }
    if reason:
        event["ResourceStatusReason"] = reason
    return event


# A real rollback, as DescribeStackEvents lists it: newest first.
ROLLBACK = [
    api_event(90, STACK, "ROLLBACK_COMPLETE"),
    api_event(80, "Vpc", "DELETE_COMPLETE"),
    api_event(70, "NotebookInstance", "DELETE_COMPLETE"),
    api_event(
        60,
        STACK,
        "ROLLBACK_IN_PROGRESS",
        "The following resource(s) failed to create: [NotebookInstance, Fsx]. "
        "Rollback requested by user.",
    ),
    api_event(50, "Fsx", "CREATE_FAILED", "Resource creation cancelled"),
    api_event(
        40,
        "NotebookInstance",
        "CREATE_FAILED",
        "The account-level service limit 'ml.g5.xlarge for notebook instance usage' is 0",
        "AWS::SageMaker::NotebookInstance",
    ),
    api_event(30, "Fsx", "CREATE_IN_PROGRESS"),
    api_event(
        20, "NotebookInstance", "CREATE_IN_PROGRESS", kind="AWS::SageMaker::NotebookInstance"
    ),
    api_event(10, "Vpc", "CREATE_COMPLETE"),
    api_event(5, "Vpc", "CREATE_IN_PROGRESS"),
    api_event(0, STACK, "CREATE_IN_PROGRESS", "User Initiated"),
]


def test_chronological_reverses_the_api_order() -> None:
    events = chronological(ROLLBACK)
    assert [e.timestamp for e in events] == sorted(e.timestamp for e in events if e.timestamp)
    assert events[0].status == "CREATE_IN_PROGRESS" and events[0].is_stack


def test_the_root_cause_is_the_first_resource_that_failed_for_its_own_reason() -> None:
    report = failure_report(chronological(ROLLBACK))
    assert report.resource == "NotebookInstance"
    assert [(e.status, e.resource_type) for e in report.events] == [
        ("CREATE_IN_PROGRESS", "AWS::SageMaker::NotebookInstance"),
        ("CREATE_FAILED", "AWS::SageMaker::NotebookInstance"),
        ("DELETE_COMPLETE", "AWS::X"),
    ]
    assert report.others == ("Fsx",)
    assert report.stack_reason is not None
    assert report.stack_reason.startswith("The following resource(s) failed to create")


def test_a_cancelled_resource_is_blamed_only_when_nothing_else_failed() -> None:
    events = chronological(
        [
            api_event(20, "Fsx", "CREATE_FAILED", "Resource creation cancelled"),
            api_event(0, STACK, "CREATE_IN_PROGRESS", "User Initiated"),
        ]
    )
    assert failure_report(events).resource == "Fsx"


def test_without_resource_failures_the_stack_events_are_reported() -> None:
    events = chronological(
        [
            api_event(20, STACK, "ROLLBACK_COMPLETE"),
            api_event(10, STACK, "ROLLBACK_IN_PROGRESS", "Stack creation time exceeded"),
            api_event(0, STACK, "CREATE_IN_PROGRESS", "User Initiated"),
        ]
    )
    report = failure_report(events)
    assert report.resource is None
    assert [e.status for e in report.events] == [
        "CREATE_IN_PROGRESS",
        "ROLLBACK_IN_PROGRESS",
        "ROLLBACK_COMPLETE",
    ]
    assert report.stack_reason == "Stack creation time exceeded"
    assert format_failure(report).startswith("no resource reported a failure")


def test_only_the_last_operation_counts() -> None:
    earlier_failure = [
        api_event(-50, "OldThing", "CREATE_FAILED", "an earlier attempt"),
        api_event(-60, STACK, "CREATE_IN_PROGRESS", "User Initiated"),
    ]
    deletion = [
        api_event(120, STACK, "DELETE_FAILED", "The following resource(s) failed to delete: [Vpc]"),
        api_event(110, "Vpc", "DELETE_FAILED", "The vpc has dependencies and cannot be deleted"),
        api_event(100, STACK, "DELETE_IN_PROGRESS", "User Initiated"),
    ]
    events = last_operation(chronological(deletion + ROLLBACK + earlier_failure))
    assert events[0].status == "DELETE_IN_PROGRESS"
    report = failure_report(events)
    assert report.resource == "Vpc"
    assert [e.status for e in report.events] == ["DELETE_FAILED"]


def test_format_names_the_resource_its_type_status_and_reason() -> None:
    text = format_failure(failure_report(chronological(ROLLBACK)))
    lines = text.splitlines()
    assert lines[0] == "resource NotebookInstance failed; its events:"
    assert lines[2] == (
        "  2024-05-01T12:00:40Z  NotebookInstance (AWS::SageMaker::NotebookInstance)  "
        "CREATE_FAILED: The account-level service limit 'ml.g5.xlarge for notebook instance "
        "usage' is 0"
    )
    assert "also failed or cancelled after it: Fsx" in lines
    assert lines[-1].startswith("stack: The following resource(s) failed to create")
