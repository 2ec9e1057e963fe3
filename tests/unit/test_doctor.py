"""`ringleader doctor`: this host's checks by hand (`ringleader-entrypoint doctor`), and the
table of every host's results, whatever each host answered."""

import json
import subprocess
from pathlib import Path

import pytest

from ringleader.core import exitcodes
from ringleader.core.health import FAILED, NOT_CHECKED, OK, CheckResult
from ringleader.supervise import entrypoint, selfcheck
from ringleader.tools import doctor
from ringleader.tools.cli import main as cli_main


def test_this_hosts_checks_print_a_table_and_exit_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = entrypoint.main(["doctor", "--host", "algo-1", "--ml-root", str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert lines[0].split() == ["host", "check", "status", "detail"]
    assert any(
        line.startswith("algo-1") and "/dev/shm" in line and " ok " in line for line in lines
    )
    assert any("GPUs" in line and "not checked" in line for line in lines)


def test_a_failed_check_exits_71_and_json_carries_every_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--host", "algo-2", "--ml-root", str(tmp_path), "--setting", "min_shm=100000g"]
    code = selfcheck.main([*argv, "--json"])
    parsed = selfcheck.parse_line(capsys.readouterr().out.strip())
    assert code == exitcodes.HEALTH_CHECK_FAILED
    assert parsed is not None and parsed[0] == "algo-2"
    shm = {result.name: result for result in parsed[1]}["/dev/shm"]
    assert shm.status == FAILED and shm.detail.endswith("(ringleader_min_shm)")


@pytest.mark.parametrize(
    ("setting", "problem"),
    [("min_shm", "--setting: expected NAME=VALUE"), ("min_shm=big", "ringleader_min_shm")],
)
def test_a_bad_setting_is_a_configuration_error(
    tmp_path: Path, setting: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = selfcheck.main(["--ml-root", str(tmp_path), "--setting", setting])
    assert code == exitcodes.CONFIG_ERROR
    assert problem in capsys.readouterr().err


def answer(report: list[CheckResult], host: str) -> "subprocess.CompletedProcess[str]":
    line = json.dumps({"host": host, "results": [result.to_json() for result in report]})
    return subprocess.CompletedProcess([], 0, f"noise\n{line}\n", "")


def test_every_hosts_answer_is_a_row_and_a_host_without_one_says_why() -> None:
    asked: list[list[str]] = []

    def ask(host: str, argv: list[str]) -> "subprocess.CompletedProcess[str]":
        asked.append([host, *argv])
        if host == "node2":
            return subprocess.CompletedProcess([], 127, "", "python3: No module named ringleader\n")
        if host == "node3":
            raise subprocess.TimeoutExpired("ssh", 120)
        return answer([CheckResult("/dev/shm", OK, "1.0 GiB in all")], host)

    reports = doctor.gather(["node1", "node2", "node3"], ask, ["--distribution=mpi"])
    assert reports["node1"] == (CheckResult("/dev/shm", OK, "1.0 GiB in all"),)
    assert reports["node2"] == (
        CheckResult(
            "doctor", FAILED, "no result (exit code 127): python3: No module named ringleader"
        ),
    )
    (timed_out,) = reports["node3"]
    assert timed_out.failed and timed_out.detail.startswith("could not run the checks: ")
    assert sorted(asked)[0] == [
        "node1",
        "--json",
        "--host=node1",
        "--hosts=node1,node2,node3",
        "--distribution=mpi",
    ]
    lines = selfcheck.table(reports)
    assert lines[1].startswith("node1  /dev/shm")
    assert selfcheck.verdict(reports) == exitcodes.HEALTH_CHECK_FAILED
    healthy = {"a": (CheckResult("GPUs", NOT_CHECKED, "no GPU on this host"),)}
    assert selfcheck.verdict(healthy) == 0


def test_slurm_outside_an_allocation_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    assert cli_main(["doctor", "slurm"]) == 2
    assert (
        "not inside a Slurm allocation (SLURM_JOB_NODELIST is not set)" in capsys.readouterr().err
    )
