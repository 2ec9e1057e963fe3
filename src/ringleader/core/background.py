"""One call run on a thread of its own, its result collected later.

The entry point prepares a host's environment while sshd starts and the workers connect. A
ThreadPoolExecutor would do, but concurrent.futures imports logging, a cost every host of the
job pays at start for one call.
"""

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class BackgroundCall(Generic[T]):
    """`function()` started on a thread now; `result()` returns its value or raises what it
    raised."""

    def __init__(
        self, function: Callable[[], T], name: str, ended: threading.Event | None = None
    ) -> None:
        """`ended`, when given, is set once the call has ended (so one wait can also wake
        for something else)."""
        self._function = function
        self._ended = ended
        self._outcome: tuple[T] | BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._outcome = (self._function(),)
        except BaseException as error:  # handed to whoever asks for the result
            self._outcome = error
        finally:
            if self._ended is not None:
                self._ended.set()

    def ended(self) -> bool:
        return not self._thread.is_alive() or self._outcome is not None

    def wait(self) -> None:
        """Until the call has ended (it has no deadline of its own: the function's steps do)."""
        self._thread.join()

    def result(self) -> T:
        self.wait()
        outcome = self._outcome
        if isinstance(outcome, BaseException):
            raise outcome
        assert outcome is not None
        return outcome[0]
