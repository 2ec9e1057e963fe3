import threading

import pytest

from ringleader.core.background import BackgroundCall


def test_the_result_is_the_functions_value_once_it_ended() -> None:
    release = threading.Event()
    call = BackgroundCall(lambda: release.wait(30) and ["python", "train.py"], "test")
    release.set()
    assert call.result() == ["python", "train.py"]
    assert call.result() == ["python", "train.py"]  # asked again: the same value


def test_what_the_function_raised_is_raised_by_result() -> None:
    def fail() -> list[str]:
        raise ValueError("no such program")

    call = BackgroundCall(fail, "test")
    call.wait()  # waiting alone does not raise
    with pytest.raises(ValueError, match="no such program"):
        call.result()


def test_it_runs_while_the_caller_goes_on() -> None:
    started, release = threading.Event(), threading.Event()

    def work() -> int:
        started.set()
        release.wait(30)
        return 7

    call = BackgroundCall(work, "test")
    assert started.wait(30)  # running before anyone asked for the result
    release.set()
    assert call.result() == 7
