"""The status line and the straggler watch, every ringleader_status_interval while the ranks
run.

The status: the job's progress in steps (its lowest rank's), its rate since the last status
and its ETA (core/progress.py); said in the leader's log, as a metric line, and into
metrics.jsonl; a job whose ranks have no step source says none.

The straggler watch (core/straggler.py): each rank's wait samples at every status; once
ringleader_straggler_window intervals have passed, the rank that waits least by
ringleader_straggler_threshold below the median rank, by more than chance, is named in a
warning, with its numbers
in the status line from then on, until it no longer is (said too). Every episode goes into
job.json. With ringleader_straggler_action=stop, naming one stops every rank: the verdict is
exitcodes.STRAGGLER, naming the rank and its host.
"""

from ringleader.config.job import STRAGGLER_OFF, STRAGGLER_STOP
from ringleader.core.frozen import evolve
from ringleader.core.outcome import Straggled
from ringleader.core.progress import kept, metric_line, sample, status_line
from ringleader.core.straggler import Shares, Straggler, shares, straggler, window_counts
from ringleader.supervise.eventloop import Now
from ringleader.supervise.leading.effects import Effect, Log, RecordStatus
from ringleader.supervise.leading.state import Attempt, LeaderState
from ringleader.supervise.leading.steps import STOP_KILL_MARGIN_SECONDS, Step, terminate_everywhere


def status_from_launch(state: LeaderState, attempt: Attempt, now: Now) -> Attempt:
    """The first status is due one interval after the launch (none with the interval 0)."""
    interval = state.setup.progress.status_interval
    if interval <= 0:
        return attempt
    return evolve(attempt, status_deadline=now.monotonic + interval)


def status_due(attempt: Attempt, now: Now) -> bool:
    return attempt.status_deadline is not None and now.monotonic >= attempt.status_deadline


def say_status(state: LeaderState, now: Now) -> Step:
    """The straggler watch's verdict and the status now; the next one an interval later (none
    once the job is being stopped)."""
    attempt = state.current
    settings = state.setup.progress
    due = None if attempt.ending else now.monotonic + settings.status_interval
    attempt = evolve(attempt, status_deadline=due)
    effects: list[Effect] = []
    if settings.straggler_action != STRAGGLER_OFF:
        state, attempt, effects = _judge_stragglers(state, attempt, now)
    found = sample(attempt.steps, now.wall, settings.total_steps, attempt.last_status)
    if found is None:
        return evolve(state, attempt=attempt), tuple(effects)
    attempt = evolve(attempt, last_status=found)
    line = status_line(found)
    if attempt.straggler is not None:
        line += f"; straggler: {attempt.straggler.describe()}"
    effects += [Log(line), Log(metric_line(found)), RecordStatus(found)]
    return evolve(state, attempt=attempt, progress=kept(state.progress, found)), tuple(effects)


def _judge_stragglers(
    state: LeaderState, attempt: Attempt, now: Now
) -> tuple[LeaderState, Attempt, list[Effect]]:
    settings = state.setup.progress
    window = settings.straggler_window
    history = (*attempt.wait_history, attempt.waits)[-(window + 1) :]
    attempt = evolve(attempt, wait_history=history)
    judged = shares(window_counts(history, window)) if len(history) > window else None
    named = straggler(judged, settings.straggler_threshold) if judged is not None else None
    current = attempt.straggler
    effects: list[Effect] = []
    if current is not None and (named is None or named != current.rank):
        share = None if judged is None else judged.by_rank.get(current.rank)
        effects.append(Log(_cleared(current, share, judged)))
        state = _close(state, current, now)
        attempt, current = evolve(attempt, straggler=None), None
    if named is None or judged is None:
        return state, attempt, effects
    host = attempt.started.get(named, "an unknown host")
    found = Straggler(named, host, judged.by_rank[named], judged.median, now.wall)
    if current is not None:  # the same rank still: its latest numbers, since when it was named
        return state, evolve(attempt, straggler=evolve(found, since=current.since)), effects
    samples, waiting = judged.counts[named]
    evidence = (
        f"over the last {window} status intervals (ringleader_straggler_window; {waiting} of "
        f"its {samples} samples waited), {settings.straggler_threshold:.0%} or more below "
        "(ringleader_straggler_threshold)"
    )
    effects.append(
        Log(f"warning: straggler: {found.describe()} {evidence}; the other ranks wait for it")
    )
    attempt = evolve(attempt, straggler=found)
    if settings.straggler_action == STRAGGLER_STOP and not attempt.ending:
        return _stop_for(state, attempt, found, evidence, now, effects)
    return state, attempt, effects


def _stop_for(
    state: LeaderState,
    attempt: Attempt,
    found: Straggler,
    evidence: str,
    now: Now,
    effects: list[Effect],
) -> tuple[LeaderState, Attempt, list[Effect]]:
    """ringleader_straggler_action=stop: every rank gets SIGTERM and its grace (a checkpoint
    on SIGTERM still gets written); the verdict names the rank and its host."""
    headline = (
        f"Rank {found.rank} on host {found.host} is a straggler: it waits {found.share:.0%} of "
        f"the time, the median rank {found.median:.0%}, {evidence}. The job was stopped "
        f"(ringleader_straggler_action=stop) so that {found.host} can be replaced."
    )
    grace = state.setup.timeouts.sigterm_grace
    attempt = evolve(attempt, straggled=Straggled(headline, now.wall))
    attempt = attempt.stop_launcher_by(now.monotonic + grace + STOP_KILL_MARGIN_SECONDS)
    effects.append(Log(f"stopping every rank: {headline}"))
    stopped, stopping = terminate_everywhere(state, attempt, grace)
    return stopped, stopped.current, [*effects, *stopping]


def _cleared(current: Straggler, share: float | None, judged: Shares | None) -> str:
    now = (
        ""
        if share is None or judged is None
        else (f": it waits {share:.0%} of the time, the median rank {judged.median:.0%}")
    )
    return f"straggler cleared: rank {current.rank} on {current.host}{now}"


def _close(state: LeaderState, episode: Straggler, now: Now) -> LeaderState:
    """The episode ends now: into the job's list (job.json)."""
    return evolve(state, stragglers=(*state.stragglers, evolve(episode, until=now.wall)))


def close_episode(state: LeaderState, now: Now) -> LeaderState:
    """The attempt ends: a straggler still named ends with it."""
    attempt = state.attempt
    if attempt is None or attempt.straggler is None:
        return state
    state = _close(state, attempt.straggler, now)
    return evolve(state, attempt=evolve(attempt, straggler=None))
