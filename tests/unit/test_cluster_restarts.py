"""`ringleader cluster run --spares`: after_run, the pure rule that decides after each run
whether the job ends or starts again on spares, over random chains of runs (hosts lost or
not, the leader's job.json fetched or not, connections failed, Ctrl-C, any budget)."""

from dataclasses import replace

from hypothesis import event, given, settings
from hypothesis import strategies as st

from ringleader.config.topology import elect_leader
from ringleader.core import exitcodes
from ringleader.core.attempts import AttemptRecord
from ringleader.core.health import FAILED, OK, CheckResult
from ringleader.core.jobfile import JobSummary
from ringleader.core.straggler import Straggler
from ringleader.tools.cluster import run
from tests.properties import examples
from tests.unit.test_cluster import spare_job

HOST_LOST = exitcodes.HOST_LOST
SICK = exitcodes.HEALTH_CHECK_FAILED
STRAGGLED = exitcodes.STRAGGLER


@st.composite
def run_end(
    draw: st.DrawFn, job: run.ClusterJob, earlier: tuple[AttemptRecord, ...]
) -> run.RunEnded:
    """One run's end as the hosts could report it."""
    names = job.names
    code = draw(st.sampled_from([0, 3, HOST_LOST, HOST_LOST, 143, SICK]), label="code")
    codes = {name: code for name in names}
    for name in names:  # a host whose connection failed (ssh's own 255)
        if code == HOST_LOST and draw(st.integers(0, 5), label="ssh") == 0:
            codes[name] = run.SSH_FAILED
    summary = None
    if draw(st.booleans(), label="job.json"):
        lost = draw(st.lists(st.sampled_from(names), max_size=2, unique=True), label="lost")
        mine = AttemptRecord(
            len(earlier), 1.0, 2.0, code, None if code == 0 else "cause", names, True, tuple(lost)
        )
        attempts = (*earlier, mine) if draw(st.booleans(), label="attempted") else earlier
        if code == SICK:  # refused before an attempt: job.json names the hosts that failed
            attempts = earlier
        sick = draw(st.lists(st.sampled_from(names), max_size=2, unique=True), label="sick")
        health = (
            {
                name: (CheckResult("/dev/shm", FAILED if name in sick else OK, "1 MiB"),)
                for name in names
            }
            if code == SICK
            else {}
        )
        summary = JobSummary(code, None, names, 6, None, (), attempts=attempts, health=health)
    return run.RunEnded(
        run.job_exit_code(codes[elect_leader(names)], list(codes.values())),
        codes,
        summary,
        1.0,
        2.0,
        draw(st.integers(0, 9), label="interrupted") == 0,
    )


@settings(max_examples=examples(1000), deadline=None, database=None)
@given(st.data(), st.integers(0, 3), st.integers(0, 3))
def test_a_chain_of_runs_keeps_the_restart_rules(
    data: st.DataObject, most: int, spare_count: int
) -> None:
    job = spare_job(spares=("d", "e", "f")[:spare_count], settings={"max_restarts": str(most)})
    earlier: tuple[AttemptRecord, ...] = ()
    restarts = 0
    for number in range(6):
        ended = data.draw(run_end(job, earlier), label=f"run {number}")
        decision = run.after_run(job, earlier, f"cluster-1-r{number + 1}", ended)
        assert decision.exit_code == ended.exit_code  # the run's code is what ends the job
        if isinstance(decision, run.EndJob):
            event(f"{restarts} restart(s)")
            assert decision.lines[0] == f"==> job {job.job_id} ended: exit code {ended.exit_code}"
            return
        new = decision.job
        assert not ended.interrupted
        if ended.exit_code == SICK:
            # every host that failed its checks replaced by a spare; no restart spent
            assert ended.summary is not None and ended.summary.unhealthy
            assert not set(ended.summary.unhealthy) & set(new.names)
            assert decision.earlier == earlier and len(new.hosts) == len(job.hosts)
            event("a sick host replaced")
            job = new
            continue
        restarts += 1
        # a host loss, with a spare for every lost host, budget left
        assert ended.exit_code == HOST_LOST
        assert restarts <= most
        assert len(new.hosts) == len(job.hosts)
        assert len(new.spares) == len(job.spares) - (len(set(new.names) - set(job.names)))
        assert not set(new.names) & {host for host in job.names if host not in new.names}
        assert set(new.names) - set(job.names) <= {spare.name for spare in job.spares}
        # the attempts continue: numbered from 0, one more at least, the last naming its loss
        numbers = [each.attempt for each in decision.earlier]
        assert numbers == list(range(len(numbers))) and len(numbers) > len(earlier)
        assert decision.earlier[-1].lost and new.job_id == f"cluster-1-r{number + 1}"
        job, earlier = new, decision.earlier
    assert restarts <= most


def test_a_policy_without_health_leaves_a_sick_host_in_place() -> None:
    job = spare_job(spares=("d",), settings={"max_restarts": "1", "restart_on": "rank-failure"})
    health = {
        name: (CheckResult("/dev/shm", FAILED if name == "b" else OK, "1 MiB"),)
        for name in job.names
    }
    summary = JobSummary(SICK, None, job.names, 6, None, (), health=health)
    ended = run.RunEnded(SICK, dict.fromkeys(job.names, SICK), summary, 1.0, 2.0)
    decision = run.after_run(job, (), "cluster-1-r1", ended)
    assert isinstance(decision, run.EndJob) and decision.exit_code == SICK
    assert decision.lines[1] == (
        "==> no spare replaces a host that failed its health check: ringleader_restart_on does not "
        "name health; the job ends with exit code 71"
    )
    allowed = spare_job(spares=("d",), settings={"max_restarts": "1"})
    again = run.after_run(allowed, (), "cluster-1-r1", ended)
    assert isinstance(again, run.RunAgain) and "d" in again.job.names and "b" not in again.job.names
    assert again.lines[1].startswith("==> b failed its health check: starting the job again on ")


def test_a_straggler_the_job_was_stopped_for_is_replaced_by_a_spare() -> None:
    job = spare_job(spares=("d",), settings={"max_restarts": "1"})
    episode = Straggler(5, "c", 0.02, 0.3, 10.0, 20.0)
    summary = JobSummary(STRAGGLED, None, job.names, 6, None, (), stragglers=(episode,))
    ended = run.RunEnded(STRAGGLED, dict.fromkeys(job.names, STRAGGLED), summary, 1.0, 2.0)
    again = run.after_run(job, (), "cluster-1-r1", ended)
    assert isinstance(again, run.RunAgain) and "d" in again.job.names and "c" not in again.job.names
    assert again.lines[1].startswith("==> c was a straggler: starting the job again on ")
    refusing = spare_job(spares=("d",), settings={"max_restarts": "1", "restart_on": "hang"})
    ended_for_good = run.after_run(refusing, (), "cluster-1-r1", ended)
    assert isinstance(ended_for_good, run.EndJob) and ended_for_good.exit_code == STRAGGLED
    unread = replace(ended, summary=None)
    assert isinstance(run.after_run(job, (), "cluster-1-r1", unread), run.EndJob)
