"""Startup: every worker says hello and passes its ssh check (and with
ringleader_health_pairs=all probes its share of the others), then the attempt is launched.

Failure-model rows: a host that never answers (69, named), a worker's own configuration
error (its code), ssh to a worker failing (69), a host lost before the launch (69), SIGTERM
before the launch (143), a launch command that cannot be made (its error's code).
"""

import shlex

from ringleader.core import exitcodes
from ringleader.core import timeline as phases
from ringleader.core.attempts import with_history
from ringleader.core.frozen import evolve
from ringleader.core.health import (
    FAILED,
    CheckResult,
    clock_check,
    health_outcome,
    slowest_links,
)
from ringleader.core.outcome import JobFacts, decide
from ringleader.core.pmap import PMap, PSet
from ringleader.core.timeline import Mark
from ringleader.supervise.eventloop import Now
from ringleader.supervise.leading.effects import (
    AttemptPrepared,
    Broadcast,
    CheckSsh,
    Effect,
    JobBegins,
    LauncherStarted,
    Log,
    MarkTimeline,
    SetupFailed,
    StartLauncher,
)
from ringleader.supervise.leading.hang_watch import watch_from_launch
from ringleader.supervise.leading.state import Gathering, LeaderState, Phase
from ringleader.supervise.leading.status import status_from_launch
from ringleader.supervise.leading.steps import (
    Step,
    error_verdict,
    prepare,
    stay,
    stopped_facts,
    verdict,
)
from ringleader.wire.events import (
    SigtermReceived,
    SshChecked,
    WorkerHello,
    WorkerLost,
    WorkerProbed,
)
from ringleader.wire.messages import Launched, ProbePeers

SSH_CHECKS_AT_ONCE = 32  # the leader's ssh checks running at the same time, at most
UNREACHABLE = exitcodes.HOST_UNREACHABLE
# The pair probes' reports may take this long beyond ringleader_health_timeout (the probes are
# bounded by it; their reports still travel).
PROBE_REPORT_SLACK = 5.0


def job_begins(state: LeaderState, event: JobBegins, now: Now) -> Step:
    """The job's size is known: wait for every worker's hello (or launch at once, alone)."""
    state = evolve(state, world_size=event.world_size)
    workers = state.setup.workers
    health = PMap({state.setup.host: event.health})
    gathering = Gathering(PSet(workers), now.monotonic + state.setup.timeouts.startup)
    state = evolve(state, gathering=evolve(gathering, health=health))
    if not workers:
        return _gathered_yet(state, now, [])
    waiting = Log(f"waiting for {len(workers)} worker(s): {', '.join(sorted(workers))}")
    return state, (waiting,)


def setup_failed_at_start(state: LeaderState, event: SetupFailed, now: Now) -> Step:
    """The job's size could not be known (its configuration): the job ends with the error."""
    return error_verdict(state, event.exit_code, event.message)


def hello(state: LeaderState, event: WorkerHello, now: Now) -> Step:
    """A worker is up: its clock offset (a health check of its own) and timeline are taken, its
    ssh check starts. A worker
    that reports its own error (bad configuration, sshd) ends the job with that error."""
    gathering = state.gathering
    if gathering is None or event.host not in gathering.hellos:
        return stay(state)  # a repeated hello
    timeout = state.setup.timeouts.startup
    hellos = gathering.hellos.discard(event.host)
    deadline = gathering.deadline
    if not hellos:  # each check is bounded by the timeout; 32 run at once
        rounds = -(-len(state.setup.workers) // SSH_CHECKS_AT_ONCE)
        deadline = now.monotonic + rounds * timeout + 5.0
    offsets = state.clock_offsets.set(event.host, event.clock_offset)
    report = event.health
    if state.setup.health.enabled and event.error_code is None:
        report = (*report, clock_check(event.clock_offset, state.setup.health.max_clock_offset))
    health = gathering.health.set(event.host, report)
    addresses = gathering.addresses
    if event.probe_address is not None:
        addresses = addresses.set(event.host, event.probe_address)
    state = evolve(state, clock_offsets=offsets)
    effects: list[Effect] = [MarkTimeline(state.on_leader_clock(event.host, event.marks))]
    if event.error_code is not None:
        state = evolve(state, settled=state.settled.add(event.host))
        message = event.error_message or f"host {event.host} reported an error"
        return error_verdict(state, event.error_code, message, *effects)
    checks = gathering.checks
    if state.setup.checks_ssh:
        checks = checks.add(event.host)
        effects.append(CheckSsh(event.host, event.host_key, timeout))
    gathering = evolve(
        gathering,
        hellos=hellos,
        deadline=deadline,
        checks=checks,
        health=health,
        addresses=addresses,
    )
    return _gathered_yet(evolve(state, gathering=gathering), now, effects)


def ssh_checked(state: LeaderState, event: SshChecked, now: Now) -> Step:
    gathering = state.gathering
    if gathering is None or event.host not in gathering.checks:
        return stay(state)
    problems = gathering.problems
    if event.problem is not None:
        problems = (*problems, event.problem)
    gathering = evolve(gathering, checks=gathering.checks.discard(event.host), problems=problems)
    return _gathered_yet(evolve(state, gathering=gathering), now, [])


def _gathered_yet(state: LeaderState, now: Now, effects: list[Effect]) -> Step:
    gathering = state.gathering
    assert gathering is not None
    if gathering.hellos or gathering.checks:
        return state, tuple(effects)
    if gathering.problems:
        problems = "; ".join(sorted(gathering.problems))
        return error_verdict(state, UNREACHABLE, f"ssh to worker host(s) failed: {problems}")
    if state.setup.probes_pairs and gathering.probing is None:
        return _ask_for_pair_probes(state, now, effects)
    if gathering.probing:
        return state, tuple(effects)
    state = evolve(state, health=gathering.health)
    slowest = slowest_links(gathering.health)
    if slowest is not None:
        effects.append(Log(slowest))
    unhealthy = health_outcome(gathering.health, len(state.attempts))
    if unhealthy is not None:
        return verdict(state, with_history(unhealthy, state.attempts), *effects)
    if state.setup.workers:
        up = Mark(state.setup.host, phases.WORKERS_UP, now.wall)
        effects += [Log("all workers are up"), MarkTimeline((up,))]
    return prepare(evolve(state, gathering=None), len(state.attempts), now, *effects)


def _ask_for_pair_probes(state: LeaderState, now: Now, effects: list[Effect]) -> Step:
    """Every worker is up (its peers' probes are answered from before its hello on): each
    probes its share of the others, within ringleader_health_timeout."""
    gathering = state.gathering
    assert gathering is not None
    peers = tuple(sorted(gathering.addresses.items()))
    deadline = now.monotonic + state.setup.health.timeout + PROBE_REPORT_SLACK
    gathering = evolve(gathering, probing=PSet(state.setup.workers), deadline=deadline)
    asked = Log(f"probing every pair of the {len(state.setup.workers)} workers")
    mark = Mark(state.setup.host, phases.PAIRS_ASKED, now.wall)
    effects += [asked, MarkTimeline((mark,)), Broadcast(ProbePeers(peers))]
    return evolve(state, gathering=gathering), tuple(effects)


def pairs_probed(state: LeaderState, event: WorkerProbed, now: Now) -> Step:
    """A worker's pair probes: added to its health report."""
    gathering = state.gathering
    if gathering is None or not gathering.probing or event.host not in gathering.probing:
        return stay(state)
    report = (*gathering.health.get(event.host, ()), *event.health)
    gathering = evolve(
        gathering,
        probing=gathering.probing.discard(event.host),
        health=gathering.health.set(event.host, report),
    )
    return _gathered_yet(evolve(state, gathering=gathering), now, [])


def lost_while_gathering(state: LeaderState, event: WorkerLost, now: Now) -> Step:
    if event.host not in state.setup.workers:
        return stay(state)
    state = evolve(state, settled=state.settled.add(event.host))
    message = f"Host {event.host} was lost before the job started: {event.reason}."
    return error_verdict(state, UNREACHABLE, message)


def sigterm_before_launch(state: LeaderState, event: SigtermReceived, now: Now) -> Step:
    """A stop from outside before anything was launched: 143, nothing started."""
    return verdict(state, decide(stopped_facts(state, event.host, now)))


def gathering_deadline(state: LeaderState, event: object, now: Now) -> Step:
    gathering = state.gathering
    if gathering is None or now.monotonic < gathering.deadline:
        return stay(state)
    timeout = state.setup.timeouts.startup
    if gathering.hellos:
        state = evolve(state, settled=PSet((*state.settled, *gathering.hellos)))  # nobody to tell
        message = (
            f"Host(s) {', '.join(sorted(gathering.hellos))} never answered within "
            f"{timeout:g} s (ringleader_startup_timeout)."
        )
        return error_verdict(state, UNREACHABLE, message)
    if gathering.checks:
        unfinished = ", ".join(sorted(gathering.checks))
        message = f"ssh to worker host(s) did not finish: {unfinished}."
        return error_verdict(state, UNREACHABLE, message)
    # pair probes not reported in time: each such worker failed that check
    health = gathering.health
    late = (
        f"not reported within {state.setup.health.timeout:g} s (ringleader_health_timeout) "
        f"and {PROBE_REPORT_SLACK:g} s"
    )
    for host in sorted(gathering.probing or ()):
        health = health.set(host, (*health.get(host, ()), CheckResult("pair probes", FAILED, late)))
    gathering = evolve(gathering, probing=PSet(), health=health)
    return _gathered_yet(evolve(state, gathering=gathering), now, [])


# ----------------------------------------------------------------------------- the launch
def attempt_prepared(state: LeaderState, event: AttemptPrepared, now: Now) -> Step:
    """The launch command is made: say what is launched, tell the workers, start it."""
    attempt = state.attempt
    assert attempt is not None
    plan, spawn = event.plan, event.plan.spawn
    if spawn is None or state.setup.host not in spawn.launching_hosts:
        effects: list[Effect] = [Log("launching: " + shlex.join(plan.argv))]
    else:
        command = shlex.join(plan.argv[plan.argv.index("--") + 1 :])
        effects = [
            Log(
                f"spawning {spawn.processes_per_host} rank(s) on each of {len(spawn.hosts)} "
                f"host(s): {command}"
            )
        ]
    if spawn is not None and spawn.plain_hosts:
        effects.append(
            Log(f"outside the distribution, running the program once: {spawn.plain_hosts}")
        )
    effects += [Broadcast(Launched(spawn)), StartLauncher(attempt.number, plan)]
    return evolve(state, attempt=evolve(attempt, plan=plan)), tuple(effects)


def launcher_started(state: LeaderState, event: LauncherStarted, now: Now) -> Step:
    """The launcher runs: every rank must start within ringleader_startup_timeout, and the
    hang watch counts from now."""
    attempt = state.attempt
    assert attempt is not None
    timeouts = state.setup.timeouts
    attempt = evolve(attempt, launch_deadline=now.monotonic + timeouts.startup)
    if timeouts.hang is not None:
        attempt = watch_from_launch(state, attempt, now)
    attempt = status_from_launch(state, attempt, now)
    launched = Mark(state.setup.host, phases.LAUNCHED, now.wall)
    return evolve(state, phase=Phase.LAUNCHING, attempt=attempt), (MarkTimeline((launched,)),)


def setup_failed_at_launch(state: LeaderState, event: SetupFailed, now: Now) -> Step:
    """The launch command could not be made: the job ends with the error, earlier attempts
    named."""
    facts = JobFacts(error_code=event.exit_code, error_message=event.message)
    return verdict(state, with_history(decide(facts), state.attempts))
