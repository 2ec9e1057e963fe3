"""The suite's time budget (docs/testing.md, "The time budget"): a test that takes longer than
SLOW_SECONDS says why in its docstring, in a paragraph that starts with "Slow:". The ones that do
not are listed at the end of the run, with their times (under pytest-xdist too: the mark travels
with the report).
The longest units of the container tests are handed out first (LONGEST_FIRST).
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

SLOW_SECONDS = 60.0
REASON = "Slow:"
UNEXPLAINED = "slow without a reason"


# pytest-xdist hands out tests and xdist groups in collection order: a long unit that comes last
# keeps one worker busy while the others have nothing left. These come first, longest first: the
# Slurm cluster's group (both files on one worker, about 5 minutes), the Horovod group, the SDK's
# jobs (collected after every container file), then the slowest single tests' files.
LONGEST_FIRST = (
    "tests/container/test_slurm",
    "tests/container/test_horovod.py",
    "tests/sdk/",
    "tests/container/test_tf_horovod.py",
    "tests/container/test_hang.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def position(item: pytest.Item) -> int:
        starts = [item.nodeid.startswith(prefix) for prefix in LONGEST_FIRST]
        return starts.index(True) if True in starts else len(LONGEST_FIRST)

    items.sort(key=position)  # stable: the rest keep their order


def slow_reason_missing(item: pytest.Item) -> bool:
    """Neither the test's docstring nor its module's says why it is slow."""
    docs = [getattr(getattr(item, "function", None), "__doc__", None)]
    module = getattr(item, "module", None)
    docs.append(getattr(module, "__doc__", None))
    return not any(REASON in doc for doc in docs if doc)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.duration > SLOW_SECONDS and slow_reason_missing(item):
        report.user_properties.append((UNEXPLAINED, round(report.duration)))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    unexplained = [
        (report.nodeid, seconds)
        for reports in terminalreporter.stats.values()
        for report in reports
        if isinstance(report, pytest.TestReport)
        for key, seconds in report.user_properties
        if key == UNEXPLAINED
    ]
    if not unexplained:
        return
    terminalreporter.section(f"tests over {SLOW_SECONDS:.0f} s with no '{REASON}' in a docstring")
    for nodeid, seconds in sorted(unexplained, key=lambda pair: -pair[1]):
        terminalreporter.write_line(f"{seconds:5d} s  {nodeid}")
