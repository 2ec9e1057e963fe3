"""Root-cause selection and the failure text."""

import pytest

from ringleader.core import exitcodes
from ringleader.core.outcome import (
    FAILURE_FILE_LIMIT,
    HostLoss,
    JobFacts,
    decide,
    root_cause,
    truncate,
)
from ringleader.core.records import RankRecord

T0 = 1_700_000_000.0


def rec(rank, code, ended, *, host=None, terminated=False, sig=None, tail=()):
    return RankRecord(
        rank=rank,
        host=host or f"algo-{rank // 2 + 1}",
        exit_code=code,
        signal=sig,
        started_at=T0,
        ended_at=T0 + ended,
        terminated=terminated,
        stderr_tail=tuple(tail),
    )


def test_success():
    facts = JobFacts(
        records=tuple(rec(r, 0, 1.0) for r in range(6)), world_size=6, launcher_exit_code=0
    )
    outcome = decide(facts)
    assert outcome.exit_code == 0
    assert outcome.succeeded
    assert outcome.failure is None
    assert outcome.root_cause is None


def test_failing_worker_rank_while_others_were_terminated():
    failing = rec(4, 3, 1.0, host="algo-3", tail=["Traceback ...", "ValueError: rank 4 fails"])
    others = [rec(r, 143, 1.2, terminated=True, sig=15) for r in (0, 1, 2, 3, 5)]
    outcome = decide(JobFacts(records=(*others, failing), world_size=6, launcher_exit_code=1))
    assert outcome.exit_code == 3
    assert outcome.root_cause == failing
    assert outcome.failure is not None
    assert outcome.failure.startswith("Rank 4 on host algo-3 exited with code 3.")
    assert "ValueError: rank 4 fails" in outcome.failure
    assert "It ran 1.0 s." in outcome.failure


def test_failing_rank_wins_even_if_terminated_ranks_ended_earlier():
    failing = rec(4, 3, 2.0)
    early_terminated = rec(0, 143, 0.5, terminated=True, sig=15)
    assert root_cause([early_terminated, failing]) == failing


def test_horovod_style_root_cause_is_the_first_unprompted_failure():
    # Rank 4 fails first; the others die by themselves with "Horovod has been shut down".
    failing = rec(4, 3, 10.0, tail=["RuntimeError: boom"])
    followers = [
        rec(r, 1, 10.2 + r / 100, tail=["Horovod has been shut down"]) for r in (0, 1, 2, 3, 5)
    ]
    facts = JobFacts(records=(*followers, failing), world_size=6, launcher_exit_code=1)
    outcome = decide(facts)
    assert outcome.root_cause == failing
    assert outcome.exit_code == 3
    assert "Rank 4 on host algo-3" in (outcome.failure or "")
    assert "RuntimeError: boom" in (outcome.failure or "")
    assert "Horovod has been shut down" not in (outcome.failure or "")


GLOO_PEER_CLOSED = (
    "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
    "Connection closed by peer [172.21.0.6]:17819. This is typically caused by a remote worker "
    "crashing. Check the logs of the remote worker before reporting an error."
)


def test_a_gloo_rank_that_lost_its_peer_is_not_the_cause_though_it_ended_first():
    """ci31: rank 3 exited with 3; its peers' gloo pairs saw the connection close while its
    own teardown ran, and rank 4 ended first with code 1."""
    failing = rec(3, 3, 10.4, host="algo-2", tail=["rank 3 failing on purpose with code 3"])
    peers = [rec(r, 1, 10.1 + r / 100, tail=[GLOO_PEER_CLOSED]) for r in (2, 4, 5)]
    outcome = decide(JobFacts(records=(*peers, failing), world_size=6, launcher_exit_code=1))
    assert outcome.root_cause == failing
    assert outcome.exit_code == 3


def test_ties_go_to_the_lowest_rank():
    assert root_cause([rec(5, 2, 1.0), rec(2, 7, 1.0)]).rank == 2


def test_only_terminated_failures_fall_back_to_the_earliest():
    records = [rec(1, 143, 2.0, terminated=True, sig=15), rec(3, 137, 1.0, terminated=True, sig=9)]
    assert root_cause(records).rank == 3


def test_no_failure_no_root_cause():
    assert root_cause([rec(0, 0, 1.0)]) is None
    assert root_cause([]) is None


def test_sigkill():
    killed = rec(2, 137, 3.0, sig=9, host="algo-2")
    outcome = decide(JobFacts(records=(killed,), world_size=2, launcher_exit_code=137))
    assert outcome.exit_code == 137
    assert "Rank 2 on host algo-2 was killed by signal 9 (SIGKILL); exit code 137" in (
        outcome.failure or ""
    )


def test_sigterm_stop_wins_over_rank_records():
    facts = JobFacts(
        records=(rec(0, 143, 1.0, terminated=True, sig=15),),
        stopped_on="algo-2",
        sigterm_grace=30,
    )
    outcome = decide(facts)
    assert outcome.exit_code == exitcodes.SIGTERM_EXIT == 143
    assert "SIGTERM" in (outcome.failure or "")
    assert "algo-2" in (outcome.failure or "")
    assert "30 s" in (outcome.failure or "")


def test_error_facts_give_their_code():
    outcome = decide(
        JobFacts(
            error_code=exitcodes.CONFIG_ERROR,
            error_message="Configuration error in sagemaker_program: missing",
            stopped_on="algo-1",
        )
    )
    assert outcome.exit_code == 78
    assert outcome.failure == "Configuration error in sagemaker_program: missing\n"


SILENT = "no pulse for 10 s (ringleader_leader_timeout)"


def loss(host="algo-3", at=5.0, ranks=(4, 5), reason=SILENT, protocol_error=False):
    return HostLoss(host, reason, T0 + at, ranks, protocol_error)


def stopped_by_the_loss(*ranks, ended=6.0):
    """Ranks on the surviving hosts, killed by ringleader or mpirun after the loss."""
    return tuple(rec(r, 143, ended, terminated=True, sig=15) for r in ranks)


def test_lost_host_outranks_the_ranks_killed_after_it():
    facts = JobFacts(records=stopped_by_the_loss(0, 1, 2, 3), world_size=6, lost_hosts=(loss(),))
    outcome = decide(facts)
    assert outcome.exit_code == exitcodes.HOST_LOST == 75
    failure = outcome.failure or ""
    assert failure.splitlines()[0].startswith(f"Host algo-3 (ranks 4, 5): {SILENT}")
    assert "Every other rank was stopped." in failure
    assert outcome.root_cause is None


@pytest.mark.parametrize(
    "record",
    [
        rec(0, 1, 6.0),  # failed on its own, but after the loss (a collective lost its peer)
        rec(0, 1, 4.0, tail=["Horovod has been shut down"]),  # before it, blaming another rank
        rec(0, 143, 4.0, terminated=True, sig=15),  # before it, ended by a stop
    ],
)
def test_lost_host_outranks_ranks_that_are_no_cause_of_their_own(record):
    outcome = decide(JobFacts(records=(record,), world_size=6, lost_hosts=(loss(),)))
    assert outcome.exit_code == exitcodes.HOST_LOST
    assert (outcome.failure or "").startswith("Host algo-3 (ranks 4, 5): ")


def test_a_rank_that_failed_on_its_own_before_the_loss_is_the_cause():
    failing = rec(0, 3, 4.0, host="algo-1", tail=["ValueError: rank 0 fails"])
    facts = JobFacts(
        records=(failing, *stopped_by_the_loss(1, 2, 3)), world_size=6, lost_hosts=(loss(),)
    )
    outcome = decide(facts)
    assert outcome.exit_code == 3
    assert outcome.root_cause == failing
    assert (outcome.failure or "").startswith("Rank 0 on host algo-1 exited with code 3.")


def test_a_single_lost_rank_and_a_loss_without_ranks_are_named_so():
    one = decide(JobFacts(lost_hosts=(loss(ranks=(4,)),)))
    assert (one.failure or "").startswith(f"Host algo-3 (rank 4): {SILENT}")
    none = decide(JobFacts(lost_hosts=(loss(ranks=()),)))
    assert (none.failure or "").startswith(f"Host algo-3: {SILENT}")


def test_several_lost_hosts_are_named_in_the_order_they_went_silent():
    later = loss("algo-2", at=7.0, ranks=(2, 3), reason="control connection closed (reset)")
    earlier = loss("algo-3", at=5.0)
    outcome = decide(JobFacts(world_size=6, lost_hosts=(later, earlier)))
    assert outcome.exit_code == exitcodes.HOST_LOST
    assert (outcome.failure or "").startswith(
        f"Hosts lost: algo-3 (ranks 4, 5): {SILENT}; "
        "algo-2 (ranks 2, 3): control connection closed (reset)."
    )


def test_sigterm_before_the_loss_wins():
    facts = JobFacts(
        records=stopped_by_the_loss(0, 1, 2, 3),
        stopped_on="algo-1",
        stopped_at=T0 + 5.0,  # at the very moment the lost host was last heard from
        sigterm_grace=30,
        lost_hosts=(loss(at=5.0),),
    )
    assert decide(facts).exit_code == exitcodes.SIGTERM_EXIT


def test_sigterm_after_the_loss_does_not_hide_it():
    facts = JobFacts(
        records=stopped_by_the_loss(0, 1, 2, 3),
        stopped_on="algo-1",
        stopped_at=T0 + 5.5,
        sigterm_grace=30,
        lost_hosts=(loss(at=5.0),),
    )
    outcome = decide(facts)
    assert outcome.exit_code == exitcodes.HOST_LOST
    assert (outcome.failure or "").startswith("Host algo-3 (ranks 4, 5): ")


def test_sigterm_is_compared_with_the_first_loss():
    facts = JobFacts(
        stopped_on="algo-1",
        stopped_at=T0 + 6.0,
        lost_hosts=(loss("algo-2", at=9.0), loss("algo-3", at=5.0)),
    )
    assert decide(facts).exit_code == exitcodes.HOST_LOST


def test_a_host_speaking_garbage_is_a_protocol_error():
    garbled = loss(
        "algo-2",
        ranks=(2, 3),
        reason="protocol error: garbled message: b'xyz'",
        protocol_error=True,
    )
    outcome = decide(JobFacts(records=stopped_by_the_loss(0, 1), lost_hosts=(garbled,)))
    assert outcome.exit_code == exitcodes.PROTOCOL_ERROR == 76
    assert (outcome.failure or "").startswith(
        "Host algo-2 (ranks 2, 3): protocol error: garbled message: b'xyz'."
    )
    assert "stopped on every host" in (outcome.failure or "")


def test_a_toolkit_error_outranks_a_lost_host():
    outcome = decide(
        JobFacts(error_code=exitcodes.INTERNAL_ERROR, error_message="bug", lost_hosts=(loss(),))
    )
    assert outcome.exit_code == exitcodes.INTERNAL_ERROR
    assert outcome.failure == "bug\n"


def test_mpirun_failed_without_failing_ranks():
    facts = JobFacts(
        records=(rec(0, 0, 1.0), rec(1, 0, 1.0)),
        world_size=6,
        launcher_exit_code=213,
        launcher_output_tail=("ORTE was unable to reliably start", "one or more daemons"),
    )
    outcome = decide(facts)
    assert outcome.exit_code == exitcodes.INTERNAL_ERROR == 70
    failure = outcome.failure or ""
    assert "mpirun exited with code 213" in failure
    assert "4 of 6 ranks never reported" in failure
    assert "one or more daemons" in failure


def test_failure_text_keeps_the_last_stderr_lines_within_the_limit():
    tail = [f"line {index:04d} " + "x" * 80 for index in range(100)]
    outcome = decide(JobFacts(records=(rec(3, 1, 1.0, tail=tail),), world_size=4))
    failure = outcome.failure or ""
    assert len(failure.encode()) <= FAILURE_FILE_LIMIT
    assert failure.startswith("Rank 3 on host")
    assert failure.rstrip("\n").endswith(tail[-1])
    assert "line 0099" in failure
    assert "line 0000" not in failure
    kept = [line.strip() for line in failure.splitlines() if line.startswith("  ")]
    assert kept == tail[-len(kept) :]
    assert len(kept) >= 5


def test_truncate_short_text_unchanged():
    assert truncate("head", ["a", "b"], "Tail:") == "head\nTail:\n  a\n  b\n"
    assert truncate("head") == "head\n"


@pytest.mark.parametrize("length", [1023, 1024, 5000])
def test_failure_text_never_exceeds_the_limit_with_a_long_headline(length):
    outcome = decide(JobFacts(error_code=78, error_message="e" * length))
    assert len((outcome.failure or "").encode()) <= FAILURE_FILE_LIMIT
    assert (outcome.failure or "").startswith("e" * 1000)


def test_truncate_with_tail_and_long_headline_stays_within_limit():
    text = truncate("h" * 1100, ["last line"], "Last lines:")
    assert len(text.encode()) <= FAILURE_FILE_LIMIT


def test_truncate_never_splits_a_multibyte_character():
    text = truncate("a" + "é" * 600)  # 1201 bytes; byte 1024 is inside an "é"
    assert len(text.encode()) <= FAILURE_FILE_LIMIT
    assert set(text.rstrip("\n")[1:]) == {"é"}
    assert text.endswith("é\n")


def test_horovod_bystanders_that_end_first_are_not_the_root_cause():
    from ringleader.core.outcome import root_cause
    from ringleader.core.records import RankRecord

    def record(rank, code, ended, tail):
        return RankRecord(rank, f"algo-{rank // 2 + 1}", code, None, 0.0, ended, False, tail)

    shut_down = ("horovod.common.exceptions.HorovodInternalError: Horovod has been shut down.",)
    records = [
        record(0, 1, 10.1, shut_down),  # fails first, but only because rank 3 failed
        record(3, 7, 10.9, ("rank 3 failing on purpose",)),
        record(5, 1, 10.2, shut_down),
    ]
    assert root_cause(records).rank == 3
    # with nothing but bystanders, the earliest of them is still named
    assert root_cause([records[0], records[2]]).rank == 0


def test_a_rank_aborting_while_mpirun_stops_it_is_still_the_root_cause():
    """Rank 0 exits 5 through MPI_Abort; mpirun's stop reaches its wrapper first."""
    from ringleader.core.outcome import root_cause
    from ringleader.core.records import RankRecord

    shut_down = ("HorovodInternalError: Horovod has been shut down.",)
    records = [
        RankRecord(0, "algo-1", 5, None, 0.0, 11.0, True, ("rank 0 failing on purpose",)),
        RankRecord(1, "algo-1", 143, None, 0.0, 10.5, True, ("rank 1 received SIGTERM",)),
        RankRecord(2, "algo-2", 143, 15, 0.0, 10.4, True, ()),
        RankRecord(4, "algo-3", 1, None, 0.0, 10.1, False, shut_down),
    ]
    assert root_cause(records).rank == 0


MXNET_ATEXIT_SHUTDOWN = (
    "Exception ignored in atexit callback: <function _notify_shutdown at 0x7fea13f03ce0>",
    "Traceback (most recent call last):",
    '  File "/venv/lib/python3.11/site-packages/mxnet/base.py", line 592, in _notify_shutdown',
    "    check_call(_LIB.MXNotifyShutdown())",
    "mxnet.base.MXNetError: MXNetError: Horovod has been shut down. This was caused by ...",
)


def test_the_failing_rank_own_atexit_shutdown_report_does_not_make_it_a_bystander():
    """MXNet + Horovod: the rank that exits 7 shuts Horovod down, then MXNet's atexit hook
    reports "Horovod has been shut down" as an ignored exception in that same rank."""
    failing = rec(
        3, 7, 11.0, tail=("rank 3 failing on purpose with code 7", *MXNET_ATEXIT_SHUTDOWN)
    )
    bystanders = [
        rec(
            r,
            1,
            10.0 + r / 10,
            tail=(
                "    raise get_last_ffi_error()",
                "mxnet.base.MXNetError: MXNetError: Horovod has been shut down. This was ...",
                *MXNET_ATEXIT_SHUTDOWN,
            ),
        )
        for r in (0, 2, 4, 5)
    ]
    outcome = decide(JobFacts(records=(*bystanders, failing), world_size=6, launcher_exit_code=1))
    assert outcome.exit_code == 7
    assert outcome.root_cause == failing


def test_an_ignored_exception_without_traceback_is_skipped_but_later_lines_count():
    from ringleader.core.outcome import exit_relevant_lines

    lines = [
        "Exception ignored in: <function Thing.__del__ at 0x1>",
        "RuntimeError: Horovod has been shut down",
        "  indented line after the report",
        "HorovodInternalError: Horovod has been shut down.",
    ]
    assert exit_relevant_lines(lines) == lines[2:]


def test_open_mpi_5_abort_bystanders_that_end_first_are_not_the_root_cause():
    """Measured with Open MPI 5.0.7: rank 4 calls MPI_Abort(3); ranks 2 and 3 end 3-4 ms
    before it, exiting MPI_ERR_UNKNOWN (14) silently, before any stop reached them, while the
    stop reached rank 4's wrapper as it exited."""
    records = (
        rec(2, 14, 0.7246),
        rec(3, 14, 0.7289),
        rec(4, 3, 0.7267, terminated=True, tail=["rank 4 failing on purpose with code 3"]),
        rec(5, 14, 0.7310, terminated=True),
    )
    facts = JobFacts(records=records, world_size=6, launcher_exit_code=3, mpi_aborts=((4, 3),))
    outcome = decide(facts)
    assert outcome.exit_code == 3
    assert outcome.failure.startswith("Rank 4 on host algo-3 exited with code 3.")
    # without mpirun's report of the abort, code 14 is a failure like any other
    assert decide(JobFacts(records=records, world_size=6, launcher_exit_code=3)).exit_code == 14


@pytest.mark.parametrize(
    "bystander",
    [
        rec(2, 14, 0.5, tail=["MemoryError"]),  # said something of its own
        rec(2, 14, 0.5, sig=9),  # killed
        rec(2, 1, 0.5),  # another code
    ],
)
def test_only_silent_mpi_err_unknown_ends_count_as_open_mpi_5_bystanders(bystander):
    aborter = rec(4, 3, 0.7, terminated=True)
    facts = JobFacts(
        records=(bystander, aborter), world_size=6, launcher_exit_code=3, mpi_aborts=((4, 3),)
    )
    assert decide(facts).root_cause.rank == 2
