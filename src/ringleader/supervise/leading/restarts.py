"""An attempt's outcome, and restarts in place: whether the job starts its ranks again, and the
wait between two attempts.

Failure-model rows: a failed rank or a hang is restarted while ringleader_max_restarts lasts;
a configuration error, a lost host, SIGTERM and success never are; two attempts in a row
without progress end the restarts; SIGTERM or a lost host between attempts ends the job (143,
the loss), a worker not ready within ringleader_startup_timeout ends it (69).
"""

from ringleader.core import exitcodes
from ringleader.core import timeline as phases
from ringleader.core.attempts import (
    ALLOWED,
    AttemptRecord,
    failure_cause,
    first_line,
    not_retried,
    refusal,
    with_history,
)
from ringleader.core.frozen import evolve
from ringleader.core.health import Report, health_outcome
from ringleader.core.outcome import (
    HostLoss,
    JobFacts,
    Outcome,
    decide,
    lost_hosts_outcome,
)
from ringleader.core.records import RankRecord
from ringleader.supervise.eventloop import Now
from ringleader.supervise.leading.effects import (
    AttemptReaped,
    BeginAttempt,
    Broadcast,
    CheckHealth,
    Effect,
    HealthChecked,
    Log,
    MarkTimeline,
)
from ringleader.supervise.leading.state import Attempt, BetweenAttempts, LeaderState, Phase
from ringleader.supervise.leading.status import close_episode
from ringleader.supervise.leading.steps import Step, prepare, stay, stopped_facts, verdict
from ringleader.wire.events import SigtermReceived, WorkerLost, WorkerReady
from ringleader.wire.messages import Restart


def attempt_facts(
    state: LeaderState,
    attempt: Attempt,
    records: tuple[RankRecord, ...],
    reaped: AttemptReaped,
) -> JobFacts:
    """What the attempt's verdict is decided from; `records`: its ranks' records, by rank."""
    losses = tuple(
        HostLoss(
            host=loss.host,
            reason=loss.reason,
            last_heard=loss.last_heard,
            ranks=tuple(sorted(attempt.unreported(frozenset((loss.host,))))),
            protocol_error=loss.protocol_error,
        )
        for loss in attempt.lost
    )
    released = attempt.released or frozenset()
    timeouts = state.setup.timeouts
    return JobFacts(
        # released ranks were stopped after the job's end
        records=tuple(r for r in records if not (r.rank in released and r.terminated)),
        world_size=state.world_size,
        launcher_exit_code=attempt.launcher_code,
        launcher_name=attempt.policy.launcher_name,
        launcher_output_tail=reaped.output_tail,
        mpi_aborts=tuple(sorted(reaped.rank_codes.items())),
        stopped_on=attempt.stopped_on,
        stopped_at=attempt.stopped_at,
        sigterm_grace=timeouts.sigterm_grace,
        lost_hosts=losses,
        hang=attempt.hang,
        straggled=attempt.straggled,
        error_code=exitcodes.HOST_UNREACHABLE if attempt.startup_error else None,
        error_message=attempt.startup_error,
    )


def attempt_reaped(state: LeaderState, event: AttemptReaped, now: Now) -> Step:
    """The attempt's outcome; then either the verdict, or the next attempt after the backoff
    (refusal() says when not: the failure-model's restart rows)."""
    state = close_episode(state, now)  # a straggler still named ends with its attempt
    attempt = state.attempt
    assert attempt is not None
    records = tuple(attempt.records[rank] for rank in sorted(attempt.records))
    facts = attempt_facts(state, attempt, records, event)
    outcome = decide(facts)
    record = AttemptRecord(
        attempt.number,
        attempt.started_at,
        now.wall,
        outcome.exit_code,
        first_line(outcome.failure),
        state.setup.hosts,
        bool(attempt.progress),
        tuple(loss.host for loss in facts.lost_hosts),
        kind=failure_cause(facts) if not outcome.succeeded else None,
    )
    earlier = state.attempts
    restart = state.setup.restart
    refused = refusal((*earlier, record), facts, restart.max_restarts, restart.policy)
    record = evolve(record, restart=ALLOWED if refused is None else refused.why)
    state = evolve(state, attempts=(*earlier, record), records=records)
    if refused is not None:
        said: tuple[Effect, ...] = ()
        if (restart.enabled or refused.do_not_retry) and not outcome.succeeded:
            said = (Log(f"attempt {attempt.number} failed; no restart: {refused.why}"),)
        final = not_retried(with_history(outcome, earlier), refused)
        return verdict(evolve(state, attempt=None), final, *said)
    # this attempt's ranks on the job's timeline (the last one's are added with the verdict)
    marks = MarkTimeline(tuple(phases.rank_marks(records)))
    return _between_attempts(state, attempt.number + 1, outcome, now, marks)


def _between_attempts(
    state: LeaderState, number: int, failed: Outcome, now: Now, marks: MarkTimeline
) -> Step:
    """The backoff, while every worker ends what is left of the last attempt's ranks and says
    it is ready."""
    restart = state.setup.restart
    said = Log(
        f"attempt {number - 1} failed with exit code {failed.exit_code}; restarting every "
        f"rank in {restart.backoff:g} s (ringleader_restart_backoff): attempt {number}, "
        f"restart {number} of {restart.max_restarts} (ringleader_max_restarts)"
    )
    between = BetweenAttempts(
        attempt=number,
        waiting=state.unsettled.add(state.setup.host),  # the leader: until its own checks
        resume_at=now.monotonic + restart.backoff,
        deadline=now.monotonic + state.setup.timeouts.startup,
    )
    state = evolve(state, phase=Phase.RESTARTING, attempt=None, between=between)
    effects = (marks, said, BeginAttempt(), Broadcast(Restart(number)), CheckHealth(number))
    return _ready_yet(state, now, effects)


def _ready_yet(state: LeaderState, now: Now, effects: tuple[Effect, ...] = ()) -> Step:
    """Once every host is ready and the backoff passed: the next attempt, unless a host
    failed its health checks (then every host ends with HEALTH_CHECK_FAILED)."""
    between = state.between
    assert between is not None
    if between.waiting or now.monotonic < between.resume_at:
        return state, effects
    state = evolve(state, health=between.health)
    unhealthy = health_outcome(between.health, between.attempt)
    if unhealthy is not None:
        return verdict(state, with_history(unhealthy, state.attempts), *effects)
    return prepare(state, between.attempt, now, *effects)


def _checked(state: LeaderState, host: str, report: Report, now: Now) -> Step:
    between = state.between
    assert between is not None
    between = evolve(
        between, waiting=between.waiting.discard(host), health=between.health.set(host, report)
    )
    return _ready_yet(evolve(state, between=between), now)


def worker_ready(state: LeaderState, event: WorkerReady, now: Now) -> Step:
    between = state.between
    assert between is not None
    if event.attempt != between.attempt or event.host not in between.waiting:
        return stay(state)  # ready for another attempt, or again: the first report stands
    return _checked(state, event.host, event.health, now)


def own_health_checked(state: LeaderState, event: HealthChecked, now: Now) -> Step:
    """The leader's own checks before the next attempt are in: it is ready too."""
    return _checked(state, state.setup.host, event.report, now)


def sigterm_between_attempts(state: LeaderState, event: SigtermReceived, now: Now) -> Step:
    said = Log(f"SIGTERM received on {event.host}: no further attempt")
    outcome = decide(stopped_facts(state, event.host, now))
    return verdict(state, with_history(outcome, state.attempts), said)


def lost_between_attempts(state: LeaderState, event: WorkerLost, now: Now) -> Step:
    if event.host not in state.setup.workers:
        return stay(state)
    said = Log(f"lost worker {event.host} between attempts: {event.reason}")
    state = evolve(state, settled=state.settled.add(event.host))
    outcome = lost_hosts_outcome([HostLoss(event.host, event.reason, event.last_heard)])
    return verdict(state, with_history(outcome, state.attempts), said)


def restart_deadline(state: LeaderState, event: object, now: Now) -> Step:
    """The backoff ended (the next attempt starts once every worker is ready), or a worker did
    not get ready within ringleader_startup_timeout (69, named)."""
    between = state.between
    assert between is not None
    if between.waiting and now.monotonic >= between.deadline:
        outcome = Outcome(
            exitcodes.HOST_UNREACHABLE,
            f"Host(s) {', '.join(sorted(between.waiting))} did not get ready for attempt "
            f"{between.attempt} within {state.setup.timeouts.startup:g} s "
            "(ringleader_startup_timeout).\n",
        )
        return verdict(state, with_history(outcome, state.attempts))
    return _ready_yet(state, now)
