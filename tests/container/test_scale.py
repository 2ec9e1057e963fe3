"""The largest job CI's time allows: 16 fake hosts x 4 ranks (64 ranks on this machine's 2
cores) with one failing rank. Every host must end with that rank's code and name it, with no
host taken for lost on a busy machine."""

import pytest

# Alone: 64 ranks saturate the machine's 2 cores by themselves.
pytestmark = [pytest.mark.container, pytest.mark.alone]

HOSTS = 16
PER_HOST = 4
FAILING_RANK = 40


def test_16_hosts_x_4_ranks_a_failing_rank_is_named_on_every_host(run_job):
    run = run_job(
        hosts=HOSTS,
        processes_per_host=PER_HOST,
        hyperparameters={"rounds": "3", "fail-rank": str(FAILING_RANK), "fail-code": "3"},
        settings={"startup_timeout": "180"},
    )
    hosts = [f"algo-{n}" for n in range(1, HOSTS + 1)]
    assert run.codes() == dict.fromkeys(hosts, 3), run.output
    # mpirun hands out ranks host by host in the leader's sorted order: algo-1, algo-10, ...
    culprit = sorted(hosts)[FAILING_RANK // PER_HOST]
    for host in hosts:
        first = run.failure(host).splitlines()[0]
        assert first.startswith(f"Rank {FAILING_RANK} on host {culprit} exited with code 3."), (
            host,
            first,
        )
    assert "lost" not in run.output.lower(), run.output
