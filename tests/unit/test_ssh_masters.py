"""The ssh master connections the leader's checks leave for mpirun, with a stand-in `ssh` on
PATH that records its arguments (the real ssh and sshd run in the container tests)."""

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ringleader.launch import sshd
from ringleader.launch.sshd import SshMasters

STAND_IN = """#!/bin/sh
echo "$@" >> "{calls}"
case "$*" in *unreachable*) echo "ssh: connect to host unreachable: refused" >&2; exit 255;; esac
case "$*" in *"-O exit slow"*) exec sleep 30;; esac
exit 0
"""


@pytest.fixture
def calls(tmp_path, monkeypatch) -> Path:
    record = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ssh = bin_dir / "ssh"
    ssh.write_text(STAND_IN.format(calls=record))
    ssh.chmod(ssh.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return record


def test_a_check_becomes_the_master_mpirun_reuses_and_close_ends_it(tmp_path, calls):
    masters = SshMasters(tmp_path)
    control_path = masters.control_path
    assert control_path.startswith(str(tmp_path)) and control_path.endswith("/%C")
    assert masters.reuse_options() == ("-o", f"ControlPath={control_path}")
    assert masters.check("algo-2", 10) is None
    check = calls.read_text().split()
    assert check[-2:] == ["algo-2", "true"]
    assert f"ControlPath={control_path}" in check
    assert "ControlMaster=auto" in check
    assert f"ControlPersist={sshd.MASTER_PERSIST_SECONDS}" in check
    logged: list[str] = []
    masters.close(logged.append)
    assert calls.read_text().splitlines()[-1] == f"-o ControlPath={control_path} -O exit algo-2"
    assert logged == []
    assert not Path(control_path).parent.exists()  # the sockets' directory is gone


def test_a_failed_check_names_the_host_and_what_ssh_said(tmp_path, calls):
    problem = SshMasters(tmp_path).check("unreachable", 10)
    assert problem == "unreachable: ssh: connect to host unreachable: refused"


def test_a_master_that_does_not_exit_in_time_is_named(tmp_path, calls, monkeypatch):
    monkeypatch.setattr(sshd, "MASTER_EXIT_SECONDS", 0.5)
    masters = SshMasters(tmp_path)
    for host in ("algo-2", "slow"):
        assert masters.check(host, 10) is None
    logged: list[str] = []
    masters.close(logged.append)
    assert logged == ["ssh master connections to slow did not exit within 0.5 s"]


def test_end_sessions_kills_this_jobs_masters_only(tmp_path):
    """Masters hold mpirun's output pipes (handed over by its ssh): killing mpirun ends them."""
    masters, other = SshMasters(tmp_path), SshMasters(tmp_path)

    def fake_master(owner: SshMasters) -> subprocess.Popen[bytes]:
        title = f"ssh: {owner.control_path.removesuffix('%C')}0123abcd [mux]"
        return subprocess.Popen([title, "60"], executable="sleep")  # titled from its start

    mine, theirs = fake_master(masters), fake_master(other)
    # what a killed master leaves behind: its socket, which the next mpirun must not try
    stale = Path(masters.control_path.removesuffix("%C")) / "0123abcd"
    stale.touch()
    kept = Path(other.control_path.removesuffix("%C")) / "4567ef01"
    kept.touch()
    try:
        masters.end_sessions()
        assert mine.wait(timeout=30) == -signal.SIGKILL
        assert theirs.poll() is None
        assert not stale.exists() and kept.exists()
    finally:
        for process in (mine, theirs):
            process.kill()
            process.wait()


def test_close_ends_every_ssh_still_running_through_the_masters(tmp_path, calls, monkeypatch):
    """An ssh through a master (mpirun's) that outlives the masters' exit is killed by close,
    not left for the host's sweep to call a leftover of the job."""
    monkeypatch.setattr(sshd, "MASTER_EXIT_SECONDS", 0.5)
    masters = SshMasters(tmp_path)
    assert masters.check("algo-2", 10) is None
    through = subprocess.Popen(  # its command line names the masters' directory, as ssh's does
        [sys.executable, "-c", "import time; time.sleep(60)", f"ControlPath={masters.control_path}"]
    )
    try:
        logged: list[str] = []
        masters.close(logged.append)
        assert through.wait(timeout=30) == -signal.SIGKILL
        assert logged == [
            "ssh master connections to the job's hosts did not exit within 0.5 s; "
            "killed 1 ssh process(es) still running"
        ]
    finally:
        through.kill()
        through.wait()
