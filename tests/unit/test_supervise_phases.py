"""The leader's and the worker's explicit phases: the phase each waits in, event by event."""

from ringleader.supervise import leader as leader_module
from ringleader.supervise import worker as worker_module
from ringleader.wire.events import (
    LauncherExited,
    LeaderLost,
    LeaderMessage,
    RankEnded,
    RankStarted,
    SigtermReceived,
    WorkerBye,
)
from ringleader.wire.messages import Exit, Launched, Terminate
from tests.unit.test_supervise_faults import LeaderRig, WorkerRig, record

Leading = leader_module.Phase
Following = worker_module.Phase


def phases_seen(rig: LeaderRig | WorkerRig, machine: object) -> list[object]:
    """The machine's phase at each wait, without repeats."""
    seen: list[object] = []
    waiting = rig.events.next

    def next_event(deadline: float | None) -> object:
        phase = machine.phase  # type: ignore[attr-defined]
        if not seen or seen[-1] is not phase:
            seen.append(phase)
        return waiting(deadline)

    rig.events.next = next_event  # type: ignore[method-assign]
    return seen


def test_a_successful_job_walks_the_leader_through_every_phase_in_order() -> None:
    rig = LeaderRig()
    seen = phases_seen(rig, rig.leader)
    rig.hellos()
    rig.ranks_start()
    rig.events.at(5.0, *(RankEnded(record(rank, 0)) for rank in range(6)), LauncherExited(0))
    rig.events.at(5.1, WorkerBye("algo-2"), WorkerBye("algo-3"))
    assert rig.run().exit_code == 0
    assert seen == [
        Leading.GATHERING,
        Leading.LAUNCHING,
        Leading.RUNNING,
        Leading.TELLING,
    ]
    assert rig.leader.phase is Leading.DONE


def test_sigterm_moves_the_leader_to_stopping_before_it_settles() -> None:
    rig = LeaderRig()
    seen = phases_seen(rig, rig.leader)
    rig.hellos()
    rig.ranks_start()
    rig.events.at(3.0, SigtermReceived("algo-2"))
    rig.events.at(4.0, *(RankEnded(record(r, 143, terminated=True)) for r in range(5)))
    rig.events.at(4.1, LauncherExited(143))
    rig.events.at(4.2, WorkerBye("algo-2"), WorkerBye("algo-3"))
    assert rig.run().exit_code == 143
    assert seen == [
        Leading.GATHERING,
        Leading.LAUNCHING,
        Leading.RUNNING,
        Leading.STOPPING,
        Leading.SETTLING,  # rank 5's record never came: waited for, bounded
        Leading.TELLING,
    ]


def test_a_worker_waits_for_the_launch_runs_stops_and_is_told() -> None:
    rig = WorkerRig()
    seen = phases_seen(rig, rig.worker)
    rig.events.at(1.0, LeaderMessage(Launched()))
    rig.events.at(1.5, *(RankStarted(rank, "algo-2") for rank in (2, 3)))
    rig.events.at(2.0, LeaderMessage(Terminate(0.5)))
    rig.events.at(2.5, LeaderMessage(Exit(143, "stopped\n")))
    rig.events.at(2.6, LeaderLost("control connection closed (connection closed)"))
    assert rig.run().exit_code == 143
    assert seen == [
        Following.WAITING,
        Following.LAUNCHED,
        Following.RUNNING,
        Following.STOPPING,
        Following.TOLD,
    ]
    assert rig.worker.phase is Following.DONE
