"""The container's entry point: `docker run IMAGE [train]` on every host of the job.

The composition root: it reads the configuration, asks launch/select.py for the strategy,
chooses this host's role (supervise/roles.py) and hands the parts (supervise/parts.py) to
the leader's side (supervise/lead.py) or the worker's (supervise/follow.py). A host's own
error is reported by supervise/report.py.
"""

import functools
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Sequence

from ringleader.config import sdk3
from ringleader.config.job import load_job_config, load_topology, reporting_settings
from ringleader.config.output_uri import OutputUri
from ringleader.config.topology import Topology
from ringleader.core import exitcodes, paths
from ringleader.core import timeline as phases
from ringleader.core.background import BackgroundCall
from ringleader.core.errors import ConfigError, JobError
from ringleader.core.exiting import exit_at_once
from ringleader.core.outcome import Outcome, truncate
from ringleader.core.proctimes import process_started_at
from ringleader.core.results import write_result
from ringleader.launch.select import HostFacts, command_shape, runs_alone
from ringleader.output import log
from ringleader.supervise import selfcheck
from ringleader.supervise.context import HostContext
from ringleader.supervise.follow import follow
from ringleader.supervise.lead import lead, tell_workers
from ringleader.supervise.parts import RootParts, real_parts
from ringleader.supervise.pid1 import run_as_init
from ringleader.supervise.report import early_leader, report_error, send_to_leader
from ringleader.supervise.roles import Role, choose_role
from ringleader.wire import auth
from ringleader.wire.events import SigtermReceived, StacksRequested


class EntryPoint:
    def __init__(self, parts: RootParts) -> None:
        self._context = HostContext(parts, parts.hostname)

    def on_signal(self, _signum: int, _frame: object) -> None:
        context = self._context
        context.stop.set()
        context.wake.set()
        # Queue.put takes a lock the interrupted main thread may hold: hand it to a thread.
        event = SigtermReceived(context.host)
        threading.Thread(target=context.events.put, args=(event,), daemon=True).start()

    def on_quit(self, _signum: int, _frame: object) -> None:
        """SIGQUIT (Ctrl-\\): every rank's stacks to the leader's console; the job goes on."""
        event = StacksRequested(self._context.host)
        threading.Thread(target=self._context.events.put, args=(event,), daemon=True).start()

    def run(self) -> Outcome:
        context = self._context
        parts = context.parts
        try:
            topology = load_topology(parts.environ, parts.files)
        except ConfigError as error:
            return self._early_error(error)
        context.host = topology.current_host
        log.set_host(context.host)
        context.timeline.mark(context.host, phases.ENTRY, process_started_at())
        try:
            config = load_job_config(topology, parts.environ, parts.files)
            log.set_verbose(config.output.verbose)
            parts.prepare_code(config, context.stop)  # fetch, extract, pip install, check
            shape = command_shape(config)
        except ConfigError as error:
            return self._config_failure(topology, error)
        context.timeline.mark(context.host, phases.CONFIG)
        role = choose_role(config.topology, runs_alone(config))
        context.log(
            f"{role.value} of {list(config.topology.hosts)}; program {config.source.program}; "
            f"distribution {config.distribution}"
        )
        # The host's environment is computed while sshd starts and the workers connect; each
        # role waits for it when it needs it.
        prepared = BackgroundCall(functools.partial(parts.prepare_host, config, shape), "prepare")
        run_id = context.job(config.topology.leader)
        image = parts.files.image_settings()  # read (and checked) with the job's config
        facts = HostFacts(parts.own_sshd, parts.gpus(), run_id, context.log, image)
        strategy = parts.select(config, facts, prepared.result)
        try:
            if role is Role.WORKER:
                outcome = follow(context, config, strategy, prepared)
            else:
                outcome = lead(context, config, strategy, role is Role.LEADER, prepared)
        finally:
            prepared.wait()  # the host's preparation (a pip install, say) ends before we exit
            strategy.setup.close(context.log)
        if config.output_uri is not None:
            self._deliver(config.output_uri)
        return outcome

    def _deliver(self, uri: OutputUri) -> None:
        """This host's archives to the output URI. SIGTERM before or during the delivery gives
        it up (what it would send stays on this host) so that the host still exits with the
        job's code before it is killed."""
        context = self._context
        if not context.stop.is_set():
            deliver = functools.partial(context.parts.deliver, uri, context.host)
            delivery = BackgroundCall(deliver, "deliver", ended=context.wake)
            context.wake.wait()  # the delivery's own transfers are bounded
            if delivery.ended():
                delivery.result()
                return
        context.log(
            f"artifacts: not delivered to {uri}: stopped by SIGTERM; the output and model "
            "stay on this host"
        )

    def _config_failure(self, topology: Topology, error: JobError) -> Outcome:
        """A toolkit error on this host: on the leader, every worker is told; else the leader."""
        context = self._context
        settings = reporting_settings(context.parts.files, topology)
        leader = settings.leader or topology.leader  # the host the main path would follow
        if context.host != leader:
            return report_error(context, leader, settings, error)
        outcome = Outcome(error.exit_code, truncate(f"Host {context.host}: {error}"))
        context.write(outcome)
        workers = [host for host in topology.hosts if host != leader]
        if workers:
            tell_workers(context, workers, settings, outcome)
        return outcome

    def _early_error(self, error: ConfigError) -> Outcome:
        """The host list or this host's name is wrong: still try to tell the leader."""
        context = self._context
        parts = context.parts
        outcome = Outcome(error.exit_code, truncate(str(error)))
        context.write(outcome)
        leader = early_leader(parts.environ, parts.files)
        context.host = parts.environ.get("SM_CURRENT_HOST") or context.host
        if leader is not None and leader != context.host:
            send_to_leader(context, leader, reporting_settings(parts.files), outcome)
        return outcome


def main(argv: Sequence[str] | None = None, own_sshd: bool = True) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if os.geteuid() == 0:
        # Containers run as root; Open MPI refuses root (mpirun, a singleton MPI_Init in a
        # rank) unless told, and a user's image seldom says so.
        for name in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"):
            os.environ.setdefault(name, "1")
    if args[:1] == ["doctor"]:  # this host's health checks, by hand (`ringleader doctor`)
        return selfcheck.main(args[1:])
    if args[:1] == ["train"]:
        args = args[1:]
    # Out of the environment before anything starts: no rank, sshd session or tool of the
    # user's inherits the job's secret.
    try:
        secret = auth.read_secret(os.environ.pop(auth.JOB_SECRET_VARIABLE, None))
    except auth.BadSecret as error:
        message = f"Configuration error in {auth.JOB_SECRET_VARIABLE}: {error}"
        log.log(message)
        write_result(exitcodes.CONFIG_ERROR, message + "\n")
        return exitcodes.CONFIG_ERROR
    log.keep_under(paths.LOG_DIR)
    entry = EntryPoint(
        real_parts(sdk3.config_files(os.environ), own_sshd, socket.gethostname(), secret)
    )
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, entry.on_signal)
    signal.signal(signal.SIGQUIT, entry.on_quit)
    if args:
        message = f"Configuration error in command: unexpected arguments {args}; expected `train`"
        log.log(message)
        write_result(exitcodes.CONFIG_ERROR, message + "\n")
        return exitcodes.CONFIG_ERROR
    try:
        outcome = entry.run()
    except Exception as error:  # a bug of ours must still leave a failure file and a code
        details = traceback.format_exc().strip().splitlines()
        outcome = Outcome(
            exitcodes.INTERNAL_ERROR,
            truncate(f"ringleader internal error: {error!r}", details, "Traceback:"),
        )
        write_result(outcome.exit_code, outcome.failure)
    if outcome.succeeded:
        log.log("job succeeded: exit code 0")
    else:
        log.log(f"job failed: exit code {outcome.exit_code}")
        for line in (outcome.failure or "").splitlines():
            log.log(f"  {line}")
    return outcome.exit_code


def exit_now(code: int) -> None:
    """Exit with `code` for sure: under docker compose a SIGTERM arrives while the others stop,
    and while stdout is flushed Python's default handler would turn the code into 143."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    exit_at_once(code)


def run() -> None:
    """`ringleader-entrypoint` (the console script and the image's stable script): as a
    container's first process, also its init (supervise/pid1.py)."""
    exit_now(run_as_init(main) if os.getpid() == 1 else main())


if __name__ == "__main__":
    run()
