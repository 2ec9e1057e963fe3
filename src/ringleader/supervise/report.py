"""A host's own error, reported to the leader so that every host ends with it.

A worker that cannot take part (a bad configuration, sshd failing) says hello with its error
and then stays until the leader has gone: under docker compose the first container to exit
stops the others, and that must be the leader, after it has told everyone the job's result.
"""

import contextlib
import threading
import time
from collections.abc import Mapping

from ringleader.config.job import ConfigFiles, ReportingSettings, Timeouts
from ringleader.config.topology import leader_hint
from ringleader.core.errors import ConfigError, JobError
from ringleader.core.outcome import Outcome, truncate
from ringleader.supervise.context import HostContext
from ringleader.wire.control import hello_message
from ringleader.wire.messages import CONTROL_LINK
from ringleader.wire.protocol import Channel, ChannelClosed

STOPPING_REPORT_SECONDS = 5.0  # reporting an error after SIGTERM: how long to try


def report_error(
    context: HostContext, leader: str, settings: ReportingSettings, error: JobError
) -> Outcome:
    """This host's own error: its result file, then the report to the leader."""
    outcome = Outcome(error.exit_code, truncate(f"Host {context.host}: {error}"))
    context.write(outcome)
    send_to_leader(context, leader, settings, outcome)
    return outcome


def send_to_leader(
    context: HostContext, leader: str, settings: ReportingSettings, outcome: Outcome
) -> None:
    """Say hello with this host's error, then read until the leader closes (bounded)."""
    timeouts, port = settings.timeouts, settings.control_port
    # Still try for a short while when SIGTERM already arrived: the report is the point.
    timeout = STOPPING_REPORT_SECONDS if context.stop.is_set() else timeouts.startup
    deadline = time.monotonic() + timeout
    address = context.leader_address(leader, port, timeouts)
    try:
        joined = context.parts.connect(
            address, context.host, CONTROL_LINK, deadline, threading.Event()
        )
    except ConfigError as error:  # another process answers on the leader's control port
        context.log(f"could not report the error to the leader {leader}: {error}")
        return
    if joined is None:
        context.log(f"could not report the error to the leader {leader} within {timeout:g} s")
        return
    report_on(context.host, joined.channel, timeouts, outcome)


def report_on(host: str, channel: Channel, timeouts: Timeouts, outcome: Outcome) -> None:
    """Say hello with this host's error on a joined control connection, then read until the
    leader closes it (bounded)."""
    try:
        channel.send(hello_message(host, (outcome.exit_code, outcome.failure or "")))
        deadline = time.monotonic() + timeouts.finish + timeouts.leader_loss
        while (remaining := deadline - time.monotonic()) > 0:
            channel.receive_frame(timeout=remaining)
    except (ChannelClosed, TimeoutError):
        pass
    finally:
        channel.close()


def early_leader(environ: Mapping[str, str], files: ConfigFiles) -> str | None:
    """The leader's name when the host list is all that can be read (an error in the rest)."""
    resource_config = None
    with contextlib.suppress(ConfigError):
        resource_config = files.read_resource_config()
    return leader_hint(environ, resource_config)
