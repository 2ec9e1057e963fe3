"""Every (phase, event type) pair of a worker, decided: a rule, or ignored for a stated reason.
tests/unit/test_worker_rules.py fails when a pair is in neither (DECISIONS.undecided())."""

from collections.abc import Callable
from typing import Any, get_args

from ringleader.supervise.decisions import Decisions
from ringleader.supervise.eventloop import Now
from ringleader.supervise.following import rules
from ringleader.supervise.following.effects import Deadline, Effect, OutcomeWritten, WorkerEvent
from ringleader.supervise.following.state import Phase, WorkerState
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

AnyRule = Callable[[WorkerState, Any, Now], rules.Step]
EVENT_TYPES: tuple[type, ...] = get_args(WorkerEvent)

LEADERS_ONLY = "a leader's event: a worker's queue never has one"
ANSWERED_AT_ONCE = "the interpreter steps the answer to this phase's effect before any event"
NOT_STEPPED = "the interpreter steps no event here: run() has ended"
VERDICT_IS_IN = "the verdict is in: the worker only waits for the leader to leave"
NOT_ASKED = "the answer to an effect this phase never asks for"

LEADER_EVENTS: dict[type, str] = {
    kind: LEADERS_ONLY
    for kind in (
        RanksExited,
        WorkerHello,
        SshChecked,
        WorkerLost,
        WorkerBye,
        WorkerReady,
        WorkerProbed,
    )
}
DECISIONS: Decisions[WorkerState, Effect] = Decisions(Phase, EVENT_TYPES)
decide_phase = DECISIONS.decide


FOLLOWING: dict[type, AnyRule] = {
    RankStarted: rules.rank_started,
    RankEnded: rules.rank_ended,
    LauncherExited: rules.launcher_exited,
    SigtermReceived: rules.sigterm,
    RanksProgressed: rules.progressed,
    StacksTaken: rules.stacks_taken,
    StacksRequested: rules.stacks_requested,
    LeaderLost: rules.leader_lost,
    LeaderMessage: rules.leader_message,
    Deadline: rules.deadline,
}
for _phase in (Phase.WAITING, Phase.LAUNCHED, Phase.RUNNING, Phase.STOPPING):
    decide_phase(_phase, FOLLOWING, {**LEADER_EVENTS, OutcomeWritten: NOT_ASKED})

decide_phase(Phase.WRITING, {OutcomeWritten: rules.verdict_written}, {}, ANSWERED_AT_ONCE)
decide_phase(
    Phase.TOLD,
    {LeaderLost: rules.leader_left, Deadline: rules.leader_left},
    {**LEADER_EVENTS, OutcomeWritten: NOT_ASKED},
    VERDICT_IS_IN,
)
decide_phase(Phase.ENDED, {OutcomeWritten: rules.outcome_written}, {}, ANSWERED_AT_ONCE)
decide_phase(Phase.DONE, {}, {}, NOT_STEPPED)

# A busy worker may notice its own launcher's kill deadline late: checked before every event.
CHECKS_THE_KILL = frozenset({Phase.WAITING, Phase.LAUNCHED, Phase.RUNNING, Phase.STOPPING})


def step(state: WorkerState, event: WorkerEvent, now: Now) -> rules.Step:
    rule = DECISIONS.rule(state.phase, event)
    if rule is None:
        return state, ()
    killed: tuple[Effect, ...] = ()
    if state.phase in CHECKS_THE_KILL:
        state, killed = rules.overdue_kill(state, now)
        if killed and isinstance(event, Deadline):
            return state, killed  # that was the deadline; wait again
    state, effects = rule(state, event, now)
    return state, (*killed, *effects)
