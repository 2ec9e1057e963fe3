"""This host is a worker: its sshd if the strategy needs one, the link to the leader (control
and pulse connections), the relay of its ranks' output, and the Worker itself."""

import time

from ringleader.config.job import JobConfig, ReportingSettings
from ringleader.core import exitcodes
from ringleader.core import timeline as phases
from ringleader.core.background import BackgroundCall
from ringleader.core.errors import ConfigError, JobError
from ringleader.core.health import Report
from ringleader.core.outcome import Outcome, truncate
from ringleader.launch.health import HealthCheck
from ringleader.launch.strategy import LaunchStrategy
from ringleader.output.printer import OutputRelay
from ringleader.supervise.context import HostContext
from ringleader.supervise.health import (
    PairProbes,
    checked,
    leader_probe,
    probe_peers,
    probes_pairs,
)
from ringleader.supervise.report import report_error, send_to_leader
from ringleader.supervise.stack_files import keep_rank_stacks
from ringleader.supervise.worker import Worker, WorkerParts
from ringleader.wire.control import Joined, LeaderAddress
from ringleader.wire.messages import CONTROL_LINK, PULSE_LINK


def follow(
    context: HostContext,
    config: JobConfig,
    strategy: LaunchStrategy,
    prepared: BackgroundCall[list[str]],
) -> Outcome:
    parts, timeouts, topology = context.parts, config.timeouts, config.topology
    check_health = parts.health(config, context.host)
    try:
        if strategy.setup.start(timeouts.startup):
            context.timeline.mark(context.host, phases.SSHD)
        prepared.result()
    except JobError as error:
        settings = ReportingSettings(timeouts, config.control_port)
        return report_error(context, topology.leader, settings, error)
    # Its peers probe it once every worker said hello: it answers from before its own.
    pairs = PairProbes.start(context, config) if probes_pairs(config) else None
    try:
        return _follow(context, config, strategy, check_health, pairs)
    finally:
        if pairs is not None:
            pairs.close()


def _follow(
    context: HostContext,
    config: JobConfig,
    strategy: LaunchStrategy,
    check_health: HealthCheck,
    pairs: "PairProbes | None",
) -> Outcome:
    parts, timeouts, topology = context.parts, config.timeouts, config.topology
    deadline = time.monotonic() + timeouts.startup
    leader = context.leader_address(topology.leader, config.control_port, timeouts)
    connected = _connect(context, config, leader, deadline)
    if isinstance(connected, Outcome):
        return connected
    control, pulse = connected
    context.timeline.mark(context.host, phases.CONNECTED)
    # Pulses flow from the join on: this host's checks may take ringleader_health_timeout.
    link = parts.leader_link(
        context.host, topology.leader, control.channel, pulse.channel, timeouts, context.events
    )
    probes = [leader_probe(context, config, leader, control.probe_addresses)]
    if pairs is not None and pairs.problem is not None:
        probes.append(pairs.problem)

    def health_before(attempt: int) -> Report:
        return checked(context, lambda number: check_health(number, probes), attempt)

    try:
        strategy.setup.authorize(control.ssh_key)
        health = health_before(0)
    except JobError as error:  # told on the connection the leader admitted
        outcome = Outcome(error.exit_code, truncate(f"Host {context.host}: {error}"))
        context.write(outcome)
        link.hello(error=(outcome.exit_code, outcome.failure or ""))
        link.until_closed(timeouts.finish + timeouts.leader_loss)
        link.close()
        return outcome
    address = None if pairs is None else pairs.address
    link.hello(context.timeline.marks(), strategy.setup.host_key, health, address)
    relay = OutputRelay()
    relay.attach(link.channel)
    agent = parts.agent(context.events, relay.deliver)
    worker_parts = WorkerParts(
        context.events,
        parts.clock,
        agent,
        link,
        context.log,
        strategy.worker_plan,
        context.launcher_starter(strategy),
        lambda stacks: keep_rank_stacks(parts.results.hang_dir, stacks, context.log),
        health_before,
        lambda peers: probe_peers(context, config, leader, peers),
    )
    try:
        return Worker(context.host, topology.leader, timeouts, worker_parts).run(
            on_outcome=context.write
        )
    finally:
        agent.close()
        context.detail(f"pulses from the leader: {link.close()}")


def _connect(
    context: HostContext, config: JobConfig, leader: LeaderAddress, deadline: float
) -> tuple[Joined, Joined] | Outcome:
    """The control and the pulse connection to this job's leader, or the outcome without them
    (written to this host's result file)."""
    connected: list[Joined] = []
    try:
        for link in (CONTROL_LINK, PULSE_LINK):
            joined = context.parts.connect(leader, context.host, link, deadline, context.stop)
            if joined is None:
                break
            connected.append(joined)
    except ConfigError as error:  # another process answers on the leader's control port
        outcome = Outcome(error.exit_code, truncate(f"Host {context.host}: {error}"))
    else:
        if len(connected) == 2:
            return connected[0], connected[1]
        outcome = _no_leader(context, config)
    for joined in connected:
        joined.channel.close()
    context.write(outcome)
    if context.stop.is_set():  # stopped while starting: the leader must not wait for us
        settings = ReportingSettings(config.timeouts, config.control_port)
        send_to_leader(context, leader.host, settings, outcome)
    return outcome


def _no_leader(context: HostContext, config: JobConfig) -> Outcome:
    if context.stop.is_set():
        return Outcome(
            exitcodes.SIGTERM_EXIT,
            f"Host {context.host}: stopped by SIGTERM while waiting for the leader.\n",
        )
    return Outcome(
        exitcodes.HOST_UNREACHABLE,
        truncate(
            f"Host {context.host}: the leader {config.topology.leader} never answered on port "
            f"{config.control_port} within {config.timeouts.startup:g} s "
            "(ringleader_startup_timeout)."
        ),
    )
