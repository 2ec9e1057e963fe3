"""When a silent peer counts as lost (wire.liveness.Silence), with an injected clock.

`watch` plays both threads of a pulse link the way Pulse runs them: the sender wakes every
interval, the watcher looks at the silence when `check` says to; either runs late while this
end is stalled (starved of CPU, or the whole machine frozen). The peer's kernel acknowledges
our pulses while it is up and reachable.
"""

import heapq
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringleader.wire.liveness import (
    FROZEN_FACTOR,
    STARVED_PATIENCE_FACTOR,
    Lost,
    Silence,
)
from tests.properties import examples

T = 10.0  # ringleader_leader_timeout
INTERVAL = T / 4
SETTING = "ringleader_leader_timeout"

AckAge = Callable[[float], float | None]


def stalled_until(stalls: Sequence[tuple[float, float]], at: float) -> float:
    """When a wake-up due at `at` really runs: at the end of a stall that covers it."""
    for start, end in stalls:
        if start <= at < end:
            return end
    return at


def watch(
    pulses: Sequence[float],
    ack_age: AckAge,
    until: float,
    stalls: Sequence[tuple[float, float]] = (),
) -> tuple[float, str] | None:
    """Run the link from time 0 to `until`: (when, why) the peer was declared lost, or None.

    `pulses`: when the peer's pulses arrive (read at once, or when our stall ends).
    """
    silence = Silence(T, SETTING, 0.0)
    queue: list[tuple[float, int, str, float]] = []  # (runs at, order, what, due)
    order = 0

    def schedule(due: float, what: str) -> None:
        nonlocal order
        order += 1
        heapq.heappush(queue, (stalled_until(stalls, due), order, what, due))

    for arrival in pulses:
        schedule(arrival, "pulse")
    schedule(INTERVAL, "send")
    schedule(T, "watch")
    watch_order = order
    while queue:
        now, number, what, due = heapq.heappop(queue)
        if now > until:
            return None
        if what == "pulse":
            silence = silence.heard(now)
            # the watcher was woken by the pulse: its pending look is replaced by a new one
            queue = [entry for entry in queue if entry[1] != watch_order]
            heapq.heapify(queue)
            verdict = silence.check(now, ack_age(now))
            assert isinstance(verdict, float)
            schedule(now + verdict, "watch")
            watch_order = order
        elif what == "send":
            silence = silence.woke(due, now)
            schedule(now + INTERVAL, "send")
        elif number == watch_order:
            silence = silence.woke(due, now)
            verdict = silence.check(now, ack_age(now))
            if isinstance(verdict, Lost):
                return now, verdict.reason
            schedule(now + verdict, "watch")
            watch_order = order
    return None


def answering(last_ack: float = -1.0) -> AckAge:
    """The peer's kernel acknowledges every pulse we send (every interval, from time 0)."""

    def age(now: float) -> float:
        if now < 0.0:
            return 0.0
        sent = (now // INTERVAL) * INTERVAL
        return now - max(sent, last_ack)

    return age


def silent_from(cut: float, last_ack: float) -> AckAge:
    """Partitioned at `cut`: the last ACK came at `last_ack` (before the cut)."""

    def age(now: float) -> float | None:
        return now - last_ack if now >= cut else answering()(now)

    return age


def regular(until: float, every: float = INTERVAL, start: float = INTERVAL) -> list[float]:
    count = int((until - start) // every) + 1
    return [start + index * every for index in range(count)]


def test_a_peer_that_keeps_pulsing_is_never_lost() -> None:
    assert watch(regular(200), answering(), until=200) is None


def test_a_frozen_peer_among_idle_hosts_is_lost_after_three_timeouts() -> None:
    frozen_at = 20.0
    lost = watch(regular(frozen_at), answering(), until=200)
    assert lost is not None
    when, reason = lost
    last_pulse = 20.0
    assert when == pytest.approx(last_pulse + FROZEN_FACTOR * T)
    assert reason == (
        "no pulse for 30 s; its kernel still answers: frozen or starved "
        "(3 x ringleader_leader_timeout)"
    )


@pytest.mark.parametrize("cut_after_pulse", [0.01, 0.6, 1.2, 2.4])
@pytest.mark.parametrize("ack_after_pulse", [None, 0.0, 0.4, 2.3])
def test_a_partitioned_peer_is_lost_one_timeout_after_its_last_pulse(
    cut_after_pulse: float, ack_after_pulse: float | None
) -> None:
    """Even when its kernel acknowledged one of our pulses after its own last pulse (the race
    that gave the partitioned side a second timeout: 19 s instead of 10)."""
    last_pulse = 30.0
    cut = last_pulse + cut_after_pulse
    ack = last_pulse if ack_after_pulse is None else min(last_pulse + ack_after_pulse, cut)
    lost = watch(regular(last_pulse), silent_from(cut, ack), until=200)
    assert lost is not None
    when, reason = lost
    assert when == pytest.approx(last_pulse + T)
    assert reason == "no pulse for 10 s (ringleader_leader_timeout)"


def test_without_acknowledgement_figures_silence_is_partition() -> None:
    lost = watch(regular(30.0), lambda _now: None, until=200)
    assert lost is not None and lost[0] == pytest.approx(40.0)


def test_every_host_stalled_longer_than_three_timeouts_is_not_a_loss() -> None:
    """The whole machine froze for 45 s (every host, every peer): the peer's pulses stop, and
    so do our own timers; once both run again, nobody is lost."""
    stall = (52.0, 97.0)
    peer_pulses = [at for at in regular(300) if not stall[0] <= at < stall[1]] + [stall[1]]
    assert watch(sorted(peer_pulses), answering(), until=300, stalls=[stall]) is None


def test_an_observer_starved_in_bursts_while_the_peer_is_too_blames_nobody() -> None:
    # Every 20 s both ends lose 12 s of CPU; the peer's pulses stop for those 12 s (and more:
    # it sends only every interval), our timers run late by as much.
    stalls = [(start, start + 12.0) for start in range(10, 290, 20)]
    peer_pulses = sorted(
        {stalled_until(stalls, at) for at in regular(300)}
    )  # late, bunched at each stall's end
    assert watch(peer_pulses, answering(), until=300, stalls=stalls) is None


def test_a_frozen_peer_is_still_caught_by_a_starved_observer() -> None:
    """Our own timers run late 2 s in every 3: what that lateness covers does not count, so
    the frozen peer is lost later than among idle hosts, but it is lost."""
    frozen_at = 20.0
    stalls = [(start, start + 2.0) for start in range(21, 400, 3)]
    lost = watch(regular(frozen_at), answering(), until=400, stalls=stalls)
    assert lost is not None
    when, reason = lost
    assert frozen_at + FROZEN_FACTOR * T < when <= frozen_at + STARVED_PATIENCE_FACTOR * 30.0
    assert "; this host itself ran late for " in reason


def test_an_observer_that_hardly_runs_waits_at_most_twice_the_limit() -> None:
    frozen_at = 20.0
    stalls = [(start, start + 9.0) for start in range(21, 400, 10)]  # ours: 9 s in every 10
    lost = watch(regular(frozen_at), answering(), until=400, stalls=stalls)
    assert lost is not None
    when, reason = lost
    limit = STARVED_PATIENCE_FACTOR * FROZEN_FACTOR * T
    assert frozen_at + limit <= when <= frozen_at + limit + 9.0  # the cap, seen once it runs
    assert reason.endswith(" s of it (waited at most 2 x as long)")


def test_a_partition_seen_by_a_starved_observer_counts_only_its_on_time_silence() -> None:
    last_pulse = 30.0
    stall = (32.5, 37.5)  # 5 s during which our timers ran late (a sender wake-up was due)
    lost = watch(regular(last_pulse), silent_from(last_pulse, last_pulse), 200, [stall])
    assert lost is not None
    when, reason = lost
    assert when == pytest.approx(last_pulse + T + 5.0)
    assert reason == (
        "no pulse for 15 s (ringleader_leader_timeout); this host itself ran late for 5 s of it"
    )


def test_late_runs_of_both_threads_count_once() -> None:
    silence = Silence(T, SETTING, 0.0)
    silence = silence.woke(2.0, 8.0)  # the sender
    silence = silence.woke(3.0, 8.0)  # the watcher, in the same stall
    silence = silence.woke(9.0, 9.5)
    assert silence.starved(9.5) == pytest.approx(6.5)
    assert silence.starved(5.0) == pytest.approx(3.0)  # only up to now
    silence = silence.heard(10.0)
    assert silence.starved(12.0) == 0.0  # a new silence starts clean
    assert silence.worst_lateness == pytest.approx(6.0)


def test_a_timer_on_time_or_early_is_not_lateness() -> None:
    silence = Silence(T, SETTING, 0.0)
    assert silence.woke(2.0, 2.0).woke(3.0, 2.9) == silence
    assert silence.starved(5.0) == 0.0


def test_check_says_when_to_look_again() -> None:
    silence = Silence(T, SETTING, 0.0)
    assert silence.check(1.0, None) == pytest.approx(T - 1.0)
    # while the peer's kernel answers: no later than when that ACK would be stale
    assert silence.check(1.0, 0.5) == pytest.approx(0.625 * T - 0.5)


# ------------------------------------------------------------------- over random stalls
def stalls_strategy(until: float) -> st.SearchStrategy[list[tuple[float, float]]]:
    """Stalls of this end (starved, or the machine frozen): disjoint, 0.1 to 40 s each."""

    def disjoint(pairs: list[tuple[float, float]]) -> list[tuple[float, float]]:
        made, after = [], 0.0
        for gap, length in pairs:
            start = after + gap
            if start >= until:
                break
            made.append((start, start + length))
            after = start + length
        return made

    pair = st.tuples(st.floats(0.0, 60.0), st.floats(0.1, 40.0))
    return st.lists(pair, max_size=8).map(disjoint)


@settings(max_examples=examples(500), deadline=None, database=None)
@given(stalls_strategy(300.0))
def test_a_peer_that_keeps_pulsing_is_never_lost_whatever_this_end_stalls(
    stalls: list[tuple[float, float]],
) -> None:
    """Its pulses, bunched at the end of each of our stalls, are read before any look at the
    silence that the stall delayed: a live peer is never blamed for our own starvation."""
    pulses = sorted({stalled_until(stalls, at) for at in regular(300)})
    assert watch(pulses, answering(), until=300, stalls=stalls) is None


@settings(max_examples=examples(500), deadline=None, database=None)
@given(
    stalls_strategy(400.0),
    st.floats(5.0, 100.0),
    st.booleans(),
)
def test_a_silent_peer_is_always_lost_within_the_cap_after_it_fell_silent(
    stalls: list[tuple[float, float]], silent_at: float, kernel_answers: bool
) -> None:
    """Frozen (its kernel answers) or partitioned: lost, and never later than the cap
    (STARVED_PATIENCE_FACTOR x the limit) after this end read its last pulse, plus the stall
    that may hold our own look; never before one timeout of silence."""
    pulses = [at for at in regular(silent_at)]
    last = pulses[-1]
    ack = answering() if kernel_answers else silent_from(last, last)
    lost = watch(pulses, ack, until=last + 400, stalls=stalls)
    assert lost is not None
    when, _reason = lost
    limit = T * (FROZEN_FACTOR if kernel_answers else 1.0)
    longest_stall = max((end - start for start, end in stalls), default=0.0)
    read = stalled_until(stalls, last)  # when this end could read that last pulse
    assert read + T <= when <= read + STARVED_PATIENCE_FACTOR * limit + longest_stall + 1e-6
