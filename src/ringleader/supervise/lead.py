"""This host leads: its printer, its agent, the control server for the workers, the Leader
itself, then the verdict to every worker and the job's files (supervise/verdict.py)."""

import time
from collections.abc import Sequence

from ringleader.config.job import JobConfig, ReportingSettings
from ringleader.core import paths
from ringleader.core import timeline as phases
from ringleader.core.background import BackgroundCall
from ringleader.core.errors import ConfigError, JobError
from ringleader.core.outcome import Outcome, truncate
from ringleader.core.progress import StatusSample, metric_values
from ringleader.launch.netif import addresses_on
from ringleader.launch.strategy import LaunchPlan, LaunchStrategy
from ringleader.output.kept_files import keep_files
from ringleader.output.metrics import MetricRecorder
from ringleader.output.printer import OutputPrinter
from ringleader.supervise.common import RunningLauncher
from ringleader.supervise.context import HostContext
from ringleader.supervise.health import checked
from ringleader.supervise.leader import Leader, LeaderParts
from ringleader.supervise.parts import Workers
from ringleader.supervise.stack_files import keep_report
from ringleader.supervise.verdict import conclude
from ringleader.wire.control import ControlPortTaken, resolved_addresses
from ringleader.wire.ports import await_visits


def lead(
    context: HostContext,
    config: JobConfig,
    strategy: LaunchStrategy,
    with_workers: bool,
    prepared: BackgroundCall[list[str]],
) -> Outcome:
    parts, timeouts, topology = context.parts, config.timeouts, config.topology
    check_health = parts.health(config, context.host)
    definitions = config.output.metric_definitions
    recorder = None  # one writer of metrics.jsonl: the ranks' metrics and the status line's
    if definitions or config.progress.status_interval > 0:
        recorder = MetricRecorder(definitions, paths.METRICS_FILE)
    metered = recorder if definitions else None
    printer = OutputPrinter(config.output.log_ranks, config.output.metric_ranks, metered)
    workers = topology.workers if with_workers else ()
    server = None
    if with_workers:
        try:
            ssh_key = strategy.setup.client_key(context.job(topology.leader))
        except JobError as error:  # no key for the job: its workers are told why
            outcome = Outcome(error.exit_code, truncate(f"Host {context.host}: {error}"))
            context.write(outcome)
            tell_workers(
                context, workers, ReportingSettings(timeouts, config.control_port), outcome
            )
            return outcome
        try:
            server = parts.control_server(
                config.control_port,
                context.events,
                timeouts,
                workers,
                printer.deliver,
                context.admission(ssh_key, *_gate_admission(config)),
            )
        except ConfigError as error:  # the control port is taken: the workers see that too
            outcome = Outcome(error.exit_code, truncate(f"Host {context.host}: {error}"))
            context.write(outcome)
            _let_workers_see_the_port(
                context, workers, config.control_port, timeouts.startup, error
            )
            return outcome
    agent = parts.agent(context.events, printer.deliver)
    leader_parts = LeaderParts(
        events=context.events,
        clock=parts.clock,
        start_launcher=context.launcher_starter(strategy),
        check_ssh=strategy.setup.check_worker,
        log=context.log,
        local=agent,
        link=server,
        timeline=context.timeline,
        output_taken=lambda: printer.delivered,
        post=context.events.put,
        keep_stacks=lambda report: keep_report(parts.results.hang_dir, report, context.log),
        on_attempt=lambda attempt: _note_attempt(recorder, attempt),
        check_health=lambda attempt: checked(context, check_health, attempt),
        record_status=lambda sample: _record_status(recorder, sample, context.host),
    )
    leader = Leader(
        context.host,
        workers,
        timeouts,
        leader_parts,
        config.restart,
        config.health,
        config.progress,
    )
    try:
        outcome = _ready_then_run(context, leader, strategy, with_workers, prepared, config)
        context.timeline.mark(context.host, phases.VERDICT)
        closing = printer.close()  # the ranks' metrics, when metered
        if recorder is not None and metered is None:  # the status line's only
            recorder.close()
            closing += recorder.summary_lines()
        for line in closing + keep_files(config.output.kept_files):
            context.log(line)
        conclude(
            leader,
            outcome,
            context.host,
            topology.hosts,
            context.timeline,
            parts.results,
            context.log,
        )
    finally:
        agent.close()
        if server is not None:
            close_server(context, server)  # the workers go first
    return outcome


def _gate_admission(config: JobConfig) -> tuple[tuple[str, ...], float]:
    """Where the workers probe this leader: its addresses on the job's interface (none: at
    its name); how long their checks may hold up their hello."""
    if not config.health.enabled:
        return (), 0.0
    return addresses_on(config.topology.network_interface), config.health.timeout


def _ready_then_run(
    context: HostContext,
    leader: Leader,
    strategy: LaunchStrategy,
    with_workers: bool,
    prepared: BackgroundCall[list[str]],
    config: JobConfig,
) -> Outcome:
    """sshd (for the workers), this host's preparation and health checks, then the job."""
    try:
        if with_workers and strategy.setup.start(config.timeouts.startup):
            context.timeline.mark(context.host, phases.SSHD)
        prepared.result()
        health = leader.check_health(0)
    except JobError as error:
        return Outcome(error.exit_code, truncate(f"Host {context.host}: {error}"))
    return leader.run(strategy, health)


def tell_workers(
    context: HostContext, workers: Sequence[str], settings: ReportingSettings, outcome: Outcome
) -> None:
    """A job that never started (an error on the leader): only tell the workers its outcome."""
    try:
        server = context.parts.control_server(
            settings.control_port,
            context.events,
            settings.timeouts,
            workers,
            _no_output,
            context.admission(),
        )
    except ConfigError as error:  # the workers see that another process holds the port
        context.log(f"could not tell the workers: {error}")
        _let_workers_see_the_port(
            context, workers, settings.control_port, settings.timeouts.startup, error
        )
        return
    parts = LeaderParts(
        events=context.events,
        clock=context.parts.clock,
        start_launcher=_never_launches,
        check_ssh=None,
        log=context.log,
        link=server,
    )
    try:
        Leader(context.host, workers, settings.timeouts, parts).tell_workers(outcome)
    finally:
        close_server(context, server)


def close_server(context: HostContext, server: Workers) -> None:
    """The workers' links end; how regularly each one's pulses came goes to the details."""
    for host, summary in sorted(server.close().items()):
        context.detail(f"pulses from {host}: {summary}")


def _let_workers_see_the_port(
    context: HostContext, workers: Sequence[str], port: int, startup: float, error: ConfigError
) -> None:
    """The control port is taken: no worker can be told. Each finds that out when what holds
    the port does not greet it as its job's leader; stay until every worker has been there (a
    holder in this container goes when it does), at most `startup` s. Not on a cluster
    machine whose port another job's leader holds: that leader outlives this one, and its
    greeting tells each worker, whenever it comes, that it has reached another job."""
    if isinstance(error, ControlPortTaken) and error.running_job and not context.parts.own_sshd:
        context.log(
            f"the workers learn from the leader of {error.running_job!r} that {port} is taken"
        )
        return
    context.log(
        f"waiting up to {startup:g} s (ringleader_startup_timeout) for {', '.join(workers)} to "
        f"find port {port} taken"
    )
    deadline = time.monotonic() + startup
    visits = await_visits(port, workers, resolved_addresses, deadline, context.stop)
    missing = [worker for worker in workers if worker not in visits.done]
    if missing:
        context.log(f"not seen at port {port}: {', '.join(missing)}")
    else:
        context.log(f"every worker has been to port {port}")


def _record_status(recorder: MetricRecorder | None, sample: StatusSample, host: str) -> None:
    if recorder is not None:
        recorder.record(metric_values(sample), host)


def _note_attempt(recorder: MetricRecorder | None, attempt: int) -> None:
    if recorder is not None:
        recorder.attempt = attempt


def _no_output(_frame: bytes) -> None:
    """Output handler while reporting an error: no rank ever started."""


def _never_launches(plan: LaunchPlan) -> RunningLauncher:
    raise AssertionError("a leader that only reports an error never launches")
