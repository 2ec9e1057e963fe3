"""The job exit-code policy and the first failure: one implementation each (core.exitcodes)."""

from ringleader.core.exitcodes import HOST_LOST, first_failure, job_exit_code


def test_first_failure_is_the_first_non_zero_in_order() -> None:
    assert first_failure([]) == 0
    assert first_failure([0, 0]) == 0
    assert first_failure(iter([0, 3, 143])) == 3


def test_the_leaders_known_code_is_the_jobs() -> None:
    assert job_exit_code(0, [0, None, 7], lost=HOST_LOST) == 0
    assert job_exit_code(3, [3, None], lost=HOST_LOST, unknown_fails=True) == 3


def test_an_unknown_leader_takes_the_first_failure_another_host_knows() -> None:
    assert job_exit_code(None, [None, 75, 0, 3], lost=HOST_LOST) == 75
    assert job_exit_code(None, [None, 0], lost=HOST_LOST) == HOST_LOST
    assert job_exit_code(None, [], lost=1) == 1


def test_with_unknown_fails_a_host_not_heard_from_fails_a_success() -> None:
    assert job_exit_code(0, [0, None], lost=1, unknown_fails=True) == 1
    assert job_exit_code(0, [0, 0], lost=1, unknown_fails=True) == 0
    assert job_exit_code(None, [3], lost=1, unknown_fails=True) == 1
