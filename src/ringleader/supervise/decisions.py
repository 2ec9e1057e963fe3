"""What both state machines' tables share: every (phase, event type) pair decided, by a rule or
by a stated reason to ignore it, and the interpreter's step: the rules, then the effects, each
effect's answer stepped before any other event."""

import enum
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

from ringleader.supervise.eventloop import Clock, Now

S = TypeVar("S")
E = TypeVar("E")  # an effect
In = TypeVar("In")  # an input: an event, or an effect's answer


class Phases(enum.Enum):
    """The base of a state machine's phases: hashed by identity (the table looks a phase up at
    every step, and Enum's own hash runs in Python, a quarter of a microsecond)."""

    __hash__ = object.__hash__


class Decisions(Generic[S, E]):
    """The table of one state machine: phase x event type -> a rule or a reason to ignore."""

    def __init__(self, phases: Iterable[enum.Enum], event_types: Iterable[type]) -> None:
        self.phases = tuple(phases)
        self.event_types = tuple(event_types)
        self.rules: dict[tuple[enum.Enum, type], Callable[[S, Any, Now], tuple[S, tuple[E, ...]]]]
        self.rules = {}
        self.ignored: dict[tuple[enum.Enum, type], str] = {}

    def decide(
        self,
        phase: enum.Enum,
        handled: Mapping[type, Callable[[S, Any, Now], tuple[S, tuple[E, ...]]]],
        ignored: Mapping[type, str],
        default: str = "",
    ) -> None:
        """`default`: the reason for every event type this phase neither handles nor names."""
        for kind, rule in handled.items():
            self.rules[(phase, kind)] = rule
        for kind, reason in ignored.items():
            self.ignored[(phase, kind)] = reason
        if default:
            for kind in self.event_types:
                if (phase, kind) not in self.rules:
                    self.ignored.setdefault((phase, kind), default)

    def rule(
        self, phase: enum.Enum, event: object
    ) -> Callable[[S, Any, Now], tuple[S, tuple[E, ...]]] | None:
        """The pair's rule; None when it is ignored on purpose; an undecided pair is an error."""
        rule = self.rules.get((phase, type(event)))
        if rule is None and (phase, type(event)) not in self.ignored:
            raise LookupError(f"undecided: {phase.name} x {type(event).__name__}")
        return rule

    def undecided(self) -> list[str]:
        """Pairs with neither a rule nor a reason, and pairs with both (a test keeps it empty)."""
        wrong = []
        for phase in self.phases:
            for kind in self.event_types:
                pair = (phase, kind)
                if (pair in self.rules) == (pair in self.ignored):
                    wrong.append(f"{phase.name} x {kind.__name__}")
        return wrong


def step_with_answers(
    step: Callable[[S, In, Now], tuple[S, tuple[E, ...]]],
    state: S,
    event: In,
    clock: Clock,
    apply: Callable[[E], In | None],
    keep: Callable[[S], None],
) -> None:
    """Step `event`, keep the new state, carry out the effects in order; an effect's answer is
    stepped next, before any other event."""
    pending = deque((event,))
    while pending:
        state, effects = step(state, pending.popleft(), Now(clock.monotonic(), clock.time()))
        keep(state)
        for effect in effects:
            answer = apply(effect)
            if answer is not None:
                pending.append(answer)
