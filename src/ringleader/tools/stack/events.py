"""Stack states and events: which resource made a stack fail, and how to show it (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

STACK_RESOURCE_TYPE = "AWS::CloudFormation::Stack"

# Stack states after which the operation did not do what was asked.
FAILED_STACK_STATUSES = frozenset(
    {
        "CREATE_FAILED",
        "ROLLBACK_IN_PROGRESS",
        "ROLLBACK_FAILED",
        "ROLLBACK_COMPLETE",
        "DELETE_FAILED",
        "UPDATE_FAILED",
        "UPDATE_ROLLBACK_IN_PROGRESS",
        "UPDATE_ROLLBACK_FAILED",
        "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS",
        "UPDATE_ROLLBACK_COMPLETE",
        "IMPORT_ROLLBACK_IN_PROGRESS",
        "IMPORT_ROLLBACK_FAILED",
        "IMPORT_ROLLBACK_COMPLETE",
    }
)
READY_STACK_STATUSES = frozenset({"CREATE_COMPLETE", "UPDATE_COMPLETE", "IMPORT_COMPLETE"})
_CANCELLED = ("Resource creation cancelled", "Resource update cancelled")


@dataclass(frozen=True)
class StackEvent:
    timestamp: datetime | None
    logical_id: str
    resource_type: str
    status: str
    reason: str
    physical_id: str = ""

    @property
    def is_stack(self) -> bool:
        return self.resource_type == STACK_RESOURCE_TYPE

    @property
    def failed(self) -> bool:
        return self.status.endswith("_FAILED")


@dataclass(frozen=True)
class FailureReport:
    """The resource that failed first, all of its events, and who else failed after it."""

    resource: str | None
    events: tuple[StackEvent, ...]
    others: tuple[str, ...]
    stack_reason: str | None


def event_from_api(raw: Mapping[str, Any]) -> StackEvent:
    timestamp = raw.get("Timestamp")
    return StackEvent(
        timestamp=timestamp if isinstance(timestamp, datetime) else None,
        logical_id=str(raw.get("LogicalResourceId", "")),
        resource_type=str(raw.get("ResourceType", "")),
        status=str(raw.get("ResourceStatus", "")),
        reason=str(raw.get("ResourceStatusReason") or ""),
        physical_id=str(raw.get("PhysicalResourceId") or ""),
    )


def chronological(api_events: Iterable[Mapping[str, Any]]) -> list[StackEvent]:
    """DescribeStackEvents lists the newest event first; this is oldest first."""
    return [event_from_api(raw) for raw in api_events][::-1]


def last_operation(events: Sequence[StackEvent]) -> list[StackEvent]:
    """The events since the last user-initiated operation on the stack itself."""
    start = 0
    for index, event in enumerate(events):
        if (
            event.is_stack
            and event.status.endswith("_IN_PROGRESS")
            and (event.reason == "User Initiated")
        ):
            start = index
    return list(events[start:])


def failure_report(events: Sequence[StackEvent]) -> FailureReport:
    """The root cause among oldest-first events: the first resource that failed for a reason
    of its own (not "Resource creation cancelled" because another one failed)."""
    failed = [event for event in events if event.failed and not event.is_stack]
    own = [event for event in failed if not event.reason.startswith(_CANCELLED)]
    root = (own or failed)[0] if failed else None
    stack_failures = [
        event
        for event in events
        if event.is_stack and event.reason and event.reason != "User Initiated"
    ]
    stack_reason = stack_failures[-1].reason if stack_failures else None
    if root is None:
        return FailureReport(None, tuple(e for e in events if e.is_stack), (), stack_reason)
    others: list[str] = []
    for event in failed:
        if event.logical_id != root.logical_id and event.logical_id not in others:
            others.append(event.logical_id)
    return FailureReport(
        resource=root.logical_id,
        events=tuple(e for e in events if e.logical_id == root.logical_id and not e.is_stack),
        others=tuple(others),
        stack_reason=stack_reason,
    )


def format_event(event: StackEvent) -> str:
    when = event.timestamp.strftime("%Y-%m-%dT%H:%M:%SZ") if event.timestamp else "-"
    line = f"  {when}  {event.logical_id} ({event.resource_type})  {event.status}"
    return f"{line}: {event.reason}" if event.reason else line


def format_failure(report: FailureReport) -> str:
    lines: list[str] = []
    if report.resource is None:
        lines.append("no resource reported a failure; the stack's own events:")
    else:
        lines.append(f"resource {report.resource} failed; its events:")
    lines.extend(format_event(event) for event in report.events)
    if report.others:
        lines.append(f"also failed or cancelled after it: {', '.join(report.others)}")
    if report.stack_reason:
        lines.append(f"stack: {report.stack_reason}")
    return "\n".join(lines)
