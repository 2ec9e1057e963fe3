"""Every (phase, event type) pair of the leader, decided: a rule, or ignored for a stated reason.

`step` is the leader's whole behaviour: a pure function from a state, an event and the moment
to the next state and the effects to carry out. tests/unit/test_leader_rules.py fails when a
pair is in neither DECISIONS.rules nor DECISIONS.ignored, so a new event or phase cannot be
dropped silently.
"""

from collections.abc import Callable
from typing import Any, get_args

from ringleader.supervise.decisions import Decisions
from ringleader.supervise.eventloop import Now
from ringleader.supervise.leading import hang_watch, restarts, running, settling, startup, telling
from ringleader.supervise.leading.effects import (
    Announce,
    AttemptPrepared,
    AttemptReaped,
    AwaitConfirmations,
    Deadline,
    Effect,
    HealthChecked,
    JobBegins,
    LauncherStarted,
    LeaderEvent,
    OutputChecked,
    SetupFailed,
)
from ringleader.supervise.leading.state import SUPERVISING, LeaderState, Phase
from ringleader.supervise.leading.steps import Step
from ringleader.wire.events import (
    LauncherExited,
    LeaderLost,
    LeaderMessage,
    RankEnded,
    RanksExited,
    RanksProgressed,
    RankStarted,
    SigtermReceived,
    SshChecked,
    StacksRequested,
    StacksTaken,
    WorkerBye,
    WorkerHello,
    WorkerLost,
    WorkerProbed,
    WorkerReady,
)

AnyRule = Callable[[LeaderState, Any, Now], Step]
EVENT_TYPES: tuple[type, ...] = get_args(LeaderEvent)

# ------------------------------------------------------------------------- the reasons to ignore
WORKERS_ONLY = "a worker's event: the leader's queue never has one"
ANSWERED_AT_ONCE = (
    "the interpreter steps the answer to this phase's effect before it takes another event"
)
NOT_STEPPED = "the interpreter steps no event here (run() has returned, or the job is done)"
NO_RANKS_YET = "no rank runs before the launch: nothing of a rank can arrive"
LATE_OF_AN_ENDED_ATTEMPT = "late news of an attempt already concluded"
ANSWER_OF_ANOTHER_PHASE = "the answer to an effect this phase never asks for"
ONCE_ONLY = "the job's start and the verdict's announcement happen once, in their own phases"
AFTER_THE_VERDICT = "the verdict is made: it no longer changes"
PROBED_BEFORE_THE_LAUNCH = "pair probes are asked for only before the first launch"

# The events after which every launcher may have exited.
ENDS_LAUNCHERS = frozenset({LauncherExited, RanksExited, WorkerLost})

DECISIONS: Decisions[LeaderState, Effect] = Decisions(Phase, EVENT_TYPES)
decide_phase = DECISIONS.decide


WORKER_EVENTS = {LeaderMessage: WORKERS_ONLY, LeaderLost: WORKERS_ONLY}
INTERNAL_ANSWERS = {
    AttemptPrepared: ANSWER_OF_ANOTHER_PHASE,
    LauncherStarted: ANSWER_OF_ANOTHER_PHASE,
    OutputChecked: ANSWER_OF_ANOTHER_PHASE,
    AttemptReaped: ANSWER_OF_ANOTHER_PHASE,
    SetupFailed: ANSWER_OF_ANOTHER_PHASE,
    HealthChecked: ANSWER_OF_ANOTHER_PHASE,
}

decide_phase(
    Phase.GATHERING,
    {
        JobBegins: startup.job_begins,
        SetupFailed: startup.setup_failed_at_start,
        WorkerHello: startup.hello,
        SshChecked: startup.ssh_checked,
        WorkerProbed: startup.pairs_probed,
        WorkerLost: startup.lost_while_gathering,
        SigtermReceived: startup.sigterm_before_launch,
        Deadline: startup.gathering_deadline,
        Announce: telling.announce,  # a job that never started: only its outcome to tell
    },
    {
        **WORKER_EVENTS,
        **{kind: NO_RANKS_YET for kind in (RankStarted, RankEnded, LauncherExited, RanksExited)},
        **{kind: NO_RANKS_YET for kind in (RanksProgressed, StacksTaken, StacksRequested)},
        WorkerReady: "ready for a restart: no attempt has run yet",
        WorkerBye: "a worker says bye only once told the verdict",
        AttemptPrepared: ANSWER_OF_ANOTHER_PHASE,
        LauncherStarted: ANSWER_OF_ANOTHER_PHASE,
        OutputChecked: ANSWER_OF_ANOTHER_PHASE,
        AttemptReaped: ANSWER_OF_ANOTHER_PHASE,
        HealthChecked: "the leader's own first checks come with JobBegins",
        AwaitConfirmations: "confirmations are awaited only once the verdict was announced",
    },
)

decide_phase(
    Phase.PREPARING,
    {
        AttemptPrepared: startup.attempt_prepared,
        LauncherStarted: startup.launcher_started,
        SetupFailed: startup.setup_failed_at_launch,
    },
    {},
    default=ANSWERED_AT_ONCE,
)

_SUPERVISING_RULES: dict[type, AnyRule] = {
    RankStarted: running.rank_started,
    RankEnded: running.rank_ended,
    SigtermReceived: running.sigterm,
    WorkerLost: running.worker_lost,
    LauncherExited: running.launcher_exited,
    RanksExited: running.ranks_exited,
    RanksProgressed: hang_watch.progressed,
    StacksTaken: hang_watch.stacks_taken,
    StacksRequested: hang_watch.stacks_requested,
    Deadline: running.deadline,
}
for _phase in SUPERVISING:
    decide_phase(
        _phase,
        _SUPERVISING_RULES,
        {
            **WORKER_EVENTS,
            **INTERNAL_ANSWERS,
            WorkerHello: "every worker said hello before the launch: a repeat changes nothing",
            SshChecked: "every ssh check ended before the launch",
            WorkerProbed: PROBED_BEFORE_THE_LAUNCH,
            WorkerReady: LATE_OF_AN_ENDED_ATTEMPT,
            WorkerBye: "a worker says bye only once told the verdict",
            JobBegins: ONCE_ONLY,
            Announce: ONCE_ONLY,
            AwaitConfirmations: ONCE_ONLY,
        },
    )

decide_phase(
    Phase.SETTLING,
    {
        RankEnded: settling.record_arrived,
        WorkerLost: settling.lost_while_settling,
        SigtermReceived: settling.sigterm_while_settling,
        OutputChecked: settling.output_checked,
        Deadline: settling.settle_deadline,
    },
    {
        **WORKER_EVENTS,
        RankStarted: "every launcher exited: a start now is stale",
        LauncherExited: "this host's launcher already exited",
        RanksExited: "every launcher already exited",
        RanksProgressed: "the ranks' end is known: no hang to watch for",
        StacksTaken: "the stacks' wait ended with the launchers (shown as they were)",
        StacksRequested: "no rank left to take stacks from",
        WorkerHello: "every worker said hello before the launch",
        SshChecked: "every ssh check ended before the launch",
        WorkerProbed: PROBED_BEFORE_THE_LAUNCH,
        WorkerReady: LATE_OF_AN_ENDED_ATTEMPT,
        WorkerBye: "a worker says bye only once told the verdict",
        AttemptPrepared: ANSWER_OF_ANOTHER_PHASE,
        LauncherStarted: ANSWER_OF_ANOTHER_PHASE,
        AttemptReaped: ANSWER_OF_ANOTHER_PHASE,
        SetupFailed: ANSWER_OF_ANOTHER_PHASE,
        HealthChecked: ANSWER_OF_ANOTHER_PHASE,
        JobBegins: ONCE_ONLY,
        Announce: ONCE_ONLY,
        AwaitConfirmations: ONCE_ONLY,
    },
)

decide_phase(
    Phase.CONCLUDING,
    {AttemptReaped: restarts.attempt_reaped},
    {},
    default=ANSWERED_AT_ONCE,
)

decide_phase(
    Phase.RESTARTING,
    {
        WorkerReady: restarts.worker_ready,
        HealthChecked: restarts.own_health_checked,
        SigtermReceived: restarts.sigterm_between_attempts,
        WorkerLost: restarts.lost_between_attempts,
        Deadline: restarts.restart_deadline,
    },
    {
        **WORKER_EVENTS,
        **{kind: why for kind, why in INTERNAL_ANSWERS.items() if kind is not HealthChecked},
        **{
            kind: LATE_OF_AN_ENDED_ATTEMPT
            for kind in (RankStarted, RankEnded, LauncherExited, RanksExited, RanksProgressed)
        },
        StacksTaken: LATE_OF_AN_ENDED_ATTEMPT,
        StacksRequested: "no rank runs between two attempts",
        WorkerHello: "every worker said hello before the first launch",
        SshChecked: "every ssh check ended before the first launch",
        WorkerProbed: PROBED_BEFORE_THE_LAUNCH,
        WorkerBye: "a worker says bye only once told the verdict",
        JobBegins: ONCE_ONLY,
        Announce: ONCE_ONLY,
        AwaitConfirmations: ONCE_ONLY,
    },
)

decide_phase(Phase.DECIDED, {Announce: telling.announce}, {}, default=NOT_STEPPED)

decide_phase(
    Phase.TELLING,
    {
        AwaitConfirmations: telling.await_confirmations,
        WorkerBye: telling.bye,
        WorkerLost: telling.lost_while_telling,
        WorkerHello: telling.hello_while_telling,
        Deadline: telling.confirmations_deadline,
    },
    {
        **WORKER_EVENTS,
        **INTERNAL_ANSWERS,
        SigtermReceived: AFTER_THE_VERDICT + ": every host exits with it",
        **{
            kind: AFTER_THE_VERDICT
            for kind in (RankStarted, RankEnded, LauncherExited, RanksExited, RanksProgressed)
        },
        StacksTaken: AFTER_THE_VERDICT,
        StacksRequested: "no rank left to take stacks from",
        SshChecked: "every ssh check ended before the launch",
        WorkerProbed: AFTER_THE_VERDICT,
        WorkerReady: AFTER_THE_VERDICT,
        JobBegins: ONCE_ONLY,
        Announce: ONCE_ONLY,
    },
)

decide_phase(Phase.DONE, {}, {}, default=NOT_STEPPED)


def step(state: LeaderState, event: LeaderEvent, now: Now) -> Step:
    """The next state and the effects to carry out, in order."""
    rule = DECISIONS.rule(state.phase, event)
    if rule is None:
        return state, ()
    state, effects = rule(state, event, now)
    # A running attempt ends once every launcher has exited (or its host was lost).
    if (
        type(event) in ENDS_LAUNCHERS
        and state.phase in SUPERVISING
        and running.every_launcher_exited(state)
    ):
        return settling.settle(state, now, effects)
    return state, effects
