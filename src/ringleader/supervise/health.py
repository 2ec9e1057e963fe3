"""A host's health checks before an attempt, run and said in its log; a worker's reachability
probes (to the leader before every attempt, to its share of the other workers before the first
with ringleader_health_pairs=all)."""

import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ringleader.config.job import PAIRS_ALL, JobConfig
from ringleader.core import timeline as phases
from ringleader.core.errors import JobError
from ringleader.core.frozen import evolve
from ringleader.core.health import FAILED, CheckResult, Report, summary
from ringleader.launch.health import Check
from ringleader.launch.netif import addresses_on
from ringleader.supervise.context import HostContext
from ringleader.wire.control import LeaderAddress
from ringleader.wire.probe import (
    ProbeResponder,
    peers_to_probe,
    run_in_turn,
)

NamedCheck = tuple[str, Check]


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


def leader_probe(
    context: HostContext, config: JobConfig, leader: LeaderAddress, addresses: Sequence[str]
) -> NamedCheck:
    """ "This worker reaches the leader on the job's interface": at the first of the leader's
    addresses there (its welcome's), else at its name."""
    interface = config.topology.network_interface
    target = evolve(leader, host=addresses[0] if addresses else leader.host)
    check = context.parts.probe(target, context.host, leader.host, interface, context.stop)
    return f"reach leader {leader.host}", check


def probes_pairs(config: JobConfig) -> bool:
    """This worker takes part in the pair probes (ringleader_health_pairs=all)."""
    health, workers = config.health, config.topology.workers
    return health.enabled and health.pairs == PAIRS_ALL and len(workers) > 1


@dataclass
class PairProbes:
    """A worker's end of its peers' probes: its responder on its address on the job's
    interface (where its name points when it has no such interface), or why it has none (a
    failed check of its own)."""

    address: str | None
    responder: ProbeResponder | None
    problem: NamedCheck | None

    @classmethod
    def start(cls, context: HostContext, config: JobConfig) -> "PairProbes":
        interface = config.topology.network_interface
        name = "answers pair probes"
        found = addresses_on(interface)
        if not found:  # no such interface here (a cluster's ens5): where its name points
            try:
                found = (socket.gethostbyname(context.host),)
            except OSError as error:
                problem = (
                    f"no IPv4 address on {interface} (network_interface_name), and "
                    f"{context.host} does not resolve: {error}"
                )
                return cls(None, None, (name, _failed(problem)))
        try:
            responder = ProbeResponder(
                found[0],
                config.control_port,
                context.admission(),
                config.topology.workers,
                context.log,
            )
        except OSError as error:
            where = f"{found[0]}:{config.control_port}"
            problem = f"cannot listen on {where} (ringleader_control_port): {error.strerror}"
            return cls(None, None, (name, _failed(problem)))
        return cls(found[0], responder, None)

    def close(self) -> None:
        if self.responder is not None:
            self.responder.close()


def _failed(problem: str) -> Check:
    return lambda seconds: CheckResult("", FAILED, problem)


def probe_peers(
    context: HostContext,
    config: JobConfig,
    leader: LeaderAddress,
    peers: Sequence[tuple[str, str]],
) -> Report:
    """This worker's share of the pair probes, one after the other, within
    ringleader_health_timeout; said in its log."""
    mine = set(peers_to_probe([name for name, _ in peers], context.host))
    interface = config.topology.network_interface
    checks = []
    for peer, address in sorted(peers):
        if peer in mine:
            target = evolve(leader, host=address)  # the job's port, identity and secret
            check = context.parts.probe(target, context.host, peer, interface, context.stop)
            checks.append((f"reach {peer}", check))
    report = run_in_turn(checks, config.health.timeout)
    if report:
        context.log(f"pair probes: {summary(report)}")
    return report
