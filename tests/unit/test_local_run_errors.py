"""`ringleader local` against a fake Docker client: API errors while waiting, log lines."""

import io
import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from ringleader.tools.local import run as run_module
from ringleader.tools.local.plan import LocalJobSpec
from ringleader.tools.local.run import LOST_HOST_EXIT_CODE, LocalJob, LocalJobResult, _line_batches

FINISHED_AT = "2026-11-22T05:04:07.123456789Z"


class FakeApi:
    """The low-level calls LocalJob makes; `wait` fails for the hosts in `failing`."""

    def __init__(
        self,
        codes: dict[str, int],
        failing: dict[str, Exception],
        logs: dict[str, list[bytes]],
    ) -> None:
        self.codes, self.failing, self.logs_by_host = codes, failing, logs
        self.hosts: dict[str, str] = {}  # container id -> host
        self.removed: list[str] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def create_endpoint_config(self, **kwargs: Any) -> dict[str, Any]:
        return kwargs

    def create_host_config(self, **kwargs: Any) -> dict[str, Any]:
        return kwargs

    def create_networking_config(self, config: dict[str, Any]) -> dict[str, Any]:
        return config

    def create_container(self, image: str, *, hostname: str, **_kwargs: Any) -> dict[str, str]:
        with self._lock:
            container = f"c{next(self._ids)}"
            self.hosts[container] = hostname
        return {"Id": container}

    def start(self, container: str) -> None:
        pass

    def logs(self, container: str, **_kwargs: Any) -> Iterator[bytes]:
        return iter(self.logs_by_host.get(self.hosts[container], []))

    def wait(self, container: str) -> dict[str, Any]:
        host = self.hosts[container]
        if host in self.failing:
            raise self.failing[host]
        return {"StatusCode": self.codes.get(host, 0)}

    def inspect_container(self, container: str) -> dict[str, Any]:
        return {"State": {"FinishedAt": FINISHED_AT}}

    def stop(self, container: str, timeout: int) -> None:
        pass

    def remove_container(self, container: str, force: bool) -> None:
        self.removed.append(self.hosts[container])


class FakeNetwork:
    def remove(self) -> None:
        pass


class FakeClient:
    def __init__(self, api: FakeApi) -> None:
        self.api = api
        self.images = self
        self.networks = self

    def get(self, image: str) -> object:  # images.get
        return object()

    def create(self, name: str, driver: str) -> FakeNetwork:  # networks.create
        return FakeNetwork()


def api_error(message: str = "500 Server Error: Internal Server Error") -> Exception:
    return docker.errors.APIError(message, explanation="connection to containerd lost")


@pytest.fixture
def spec(tmp_path: Path) -> LocalJobSpec:
    source = tmp_path / "code"
    source.mkdir()
    (source / "train.py").write_text("")
    return LocalJobSpec(
        hosts=3, source_dir=source, entry_point="train.py", output_dir=tmp_path / "out"
    )


def run_bounded(job: LocalJob, timeout: float = 30.0) -> LocalJobResult:
    """job.run() in a thread: a hang fails the test instead of blocking it forever."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = job.run()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"job.run() did not return within {timeout} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def test_api_error_while_waiting_for_a_worker_is_reported_and_fails_the_job(spec):
    api = FakeApi(codes={}, failing={"algo-2": api_error()}, logs={})
    out = io.StringIO()
    result = run_bounded(LocalJob(spec, out, client=FakeClient(api)))

    assert result.exit_code == LOST_HOST_EXIT_CODE == 1  # the leader exited 0
    rows = {host.name: host for host in result.hosts}
    assert rows["algo-1"].exit_code == 0 and rows["algo-1"].error is None
    assert rows["algo-3"].exit_code == 0 and rows["algo-3"].error is None
    assert rows["algo-2"].exit_code is None
    assert rows["algo-2"].error is not None
    assert rows["algo-2"].error.startswith("APIError: 500 Server Error")
    text = out.getvalue()
    assert "error: host algo-2: waiting for its container failed" in text
    assert "connection to containerd lost" in text
    (row,) = [line for line in text.splitlines() if line.startswith("  algo-2 ")]
    assert row.split()[:2] == ["algo-2", "-"] and "APIError" in row
    assert "job exit code 1" in text
    assert sorted(api.removed) == ["algo-1", "algo-2", "algo-3"]  # cleaned up all the same


def test_leader_exit_code_is_kept_when_a_worker_is_lost(spec):
    api = FakeApi(codes={"algo-1": 3}, failing={"algo-3": api_error()}, logs={})
    result = run_bounded(LocalJob(spec, io.StringIO(), client=FakeClient(api)))
    assert result.exit_code == 3


def test_any_exception_of_a_waiter_is_a_result(spec):
    failing = {
        "algo-1": ConnectionError("Connection aborted."),
        "algo-2": api_error(),
        "algo-3": KeyError("StatusCode"),
    }
    out = io.StringIO()
    result = run_bounded(
        LocalJob(spec, out, client=FakeClient(FakeApi(codes={}, failing=failing, logs={})))
    )
    assert result.exit_code == 1
    assert [host.exit_code for host in result.hosts] == [None, None, None]
    for host in ("algo-1", "algo-2", "algo-3"):
        assert f"error: host {host}: waiting for its container failed" in out.getvalue()


def test_success_prints_no_error(spec):
    logs = {"algo-1": [b"hello wor", b"ld\r\n", b"epoch 1\rep", b"och 2\n", b"tail"]}
    out = io.StringIO()
    result = run_bounded(
        LocalJob(spec, out, client=FakeClient(FakeApi(codes={}, failing={}, logs=logs)))
    )
    assert result.exit_code == 0
    assert all(host.error is None for host in result.hosts)
    assert all(host.finished_at > 0 for host in result.hosts)
    text = out.getvalue()
    assert "error: host" not in text
    assert [line for line in text.splitlines() if line.startswith("algo-1 | ")] == [
        "algo-1 | hello world",
        "algo-1 | epoch 1",
        "algo-1 | epoch 2",
        "algo-1 | tail",
    ]


@pytest.mark.parametrize(
    ("chunks", "lines"),
    [
        ([b"a\nb\n"], ["a", "b"]),
        ([b"a", b"b\n", b"c"], ["ab", "c"]),
        ([b"a\r\n", b"\n"], ["a", ""]),
        ([b"a\r", b"\nb\r\n"], ["a", "b"]),  # \r\n split across chunks: one line end
        ([b"caf\xc3", b"\xa9\n"], ["caf\u00e9"]),  # a character split across chunks
        ([b"bad \xff\n"], ["bad \ufffd"]),
        ([b"10%\r50%\r100%\n"], ["10%", "50%", "100%"]),  # a progress bar: one line each
        ([], []),
    ],
)
def test_docker_log_chunks_become_lines(chunks, lines):
    assert [line for batch in _line_batches(chunks) for line in batch] == lines


def test_logs_are_read_to_the_end_while_lines_keep_coming(spec, monkeypatch):
    """A job that printed faster than Docker hands logs over is still being read after its
    containers exited: every line is shown as long as they keep coming, however long."""
    monkeypatch.setattr(run_module, "LOG_STALL_SECONDS", 0.3)
    monkeypatch.setattr(run_module, "_LOG_CHECK_SECONDS", 0.05)

    def slow() -> Iterator[bytes]:
        for n in range(12):  # 1.2 s in all, four times the stall limit
            time.sleep(0.1)
            yield f"line {n}\n".encode()

    out = io.StringIO()
    logs = {"algo-1": slow()}
    run_bounded(LocalJob(spec, out, client=FakeClient(FakeApi(codes={}, failing={}, logs=logs))))
    shown = [line for line in out.getvalue().splitlines() if line.startswith("algo-1 | line")]
    assert len(shown) == 12
    assert "warning" not in out.getvalue()


def test_a_log_stream_that_stalls_is_given_up_with_a_warning(spec, monkeypatch):
    monkeypatch.setattr(run_module, "LOG_STALL_SECONDS", 0.3)
    monkeypatch.setattr(run_module, "_LOG_CHECK_SECONDS", 0.05)
    stalled = threading.Event()

    def stuck() -> Iterator[bytes]:
        yield b"only line\n"
        stalled.wait(30)  # Docker never sends the rest
        yield b"too late\n"

    out = io.StringIO()
    logs = {"algo-2": stuck()}
    try:
        run_bounded(
            LocalJob(spec, out, client=FakeClient(FakeApi(codes={}, failing={}, logs=logs))),
            timeout=10,
        )
    finally:
        stalled.set()
    text = out.getvalue()
    assert "algo-2 | only line" in text and "too late" not in text
    assert "warning: no log line for 0.3 s from 1 stream(s) still open" in text
    assert text.index("warning: no log line") < text.index("job exit code 0")


def test_a_crowded_machine_is_told_its_longer_leader_timeout(spec, monkeypatch):
    monkeypatch.setattr(run_module.os, "cpu_count", lambda: 2)
    crowded = LocalJobSpec(
        hosts=32,
        processes_per_host=8,
        source_dir=spec.source_dir,
        entry_point="train.py",
        output_dir=spec.output_dir,
    )
    out = io.StringIO()
    job = LocalJob(crowded, out, client=FakeClient(FakeApi(codes={}, failing={}, logs={})))
    assert "32 host(s) x 8 rank(s) on 2 core(s): ringleader_leader_timeout 171 s" in out.getvalue()
    assert all(host.hyperparameters["ringleader_leader_timeout"] == "171" for host in job.hosts)
    # the user's own timeout: no note, and theirs is what the hosts get
    out = io.StringIO()
    chosen = LocalJob(
        LocalJobSpec(**{**crowded.__dict__, "settings": {"leader_timeout": "20"}}),
        out,
        client=FakeClient(FakeApi(codes={}, failing={}, logs={})),
    )
    assert "ringleader_leader_timeout" not in out.getvalue()
    assert all(host.hyperparameters["ringleader_leader_timeout"] == '"20"' for host in chosen.hosts)
