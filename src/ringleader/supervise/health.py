"""A host's health checks before an attempt, run and said in its log."""

from collections.abc import Callable

from ringleader.core import timeline as phases
from ringleader.core.errors import JobError
from ringleader.core.health import FAILED, CheckResult, Report, summary
from ringleader.supervise.context import HostContext


def checked(context: HostContext, check: Callable[[int], Report], attempt: int) -> Report:
    """This host's checks before `attempt`, in its log as one line (none: health is off).
    Before the first attempt a check that cannot run (the user's check is not there) is the
    job's configuration error; before a restart it is a failed check."""
    try:
        report = check(attempt)
    except JobError as error:
        if attempt == 0:
            raise
        report = (CheckResult("health check", FAILED, str(error)),)
    if report:
        context.log(f"health before attempt {attempt}: {summary(report)}")
        if attempt == 0:
            context.timeline.mark(context.host, phases.HEALTH_CHECKED)
    return report
