"""`ringleader image setup` and `image check`: the probe's parse, what each distribution
needs, the files setup writes (twice: idempotent), and the settings the entry point reads."""

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringleader.config.image import ImageSettings, load_image_settings
from ringleader.core.errors import ConfigError
from ringleader.launch.sshd import sshd_command
from ringleader.supervise.pid1 import FORWARDED, run_as_init
from ringleader.tools.cli import main as cli_main
from ringleader.tools.image import needs, setup
from ringleader.tools.image.cli import report_lines
from ringleader.tools.image.probe import ImageFacts, PythonFacts, parse_probe, probe_here

PROBED = """os_id=debian
os_like=
os_name=Debian GNU/Linux 13 (trixie)
user=0
tool:sshd=/usr/sbin/sshd
tool:ssh=/usr/bin/ssh
tool:ssh-keygen=/usr/bin/ssh-keygen
tool:mpirun=/usr/bin/mpirun
tool:ringleader-entrypoint=/usr/local/bin/ringleader-entrypoint
mpirun_version=mpirun (Open MPI) 5.0.7
settings=/etc/ringleader/image.json
settings_python=/opt/venv/bin/python
python:/opt/venv/bin/python=3.13.5|mpi4py,torch
python:/usr/bin/python3=3.13.5|
python:/opt/venv/bin/python=3.13.5|mpi4py,torch
"""


def facts(**changes: object) -> ImageFacts:
    base = parse_probe(PROBED)
    return ImageFacts(**{**base.__dict__, **changes})  # type: ignore[arg-type]


def test_the_probe_output_is_parsed_once_per_interpreter() -> None:
    found = parse_probe(PROBED)
    assert found.os_id == "debian" and found.os_name.endswith("(trixie)")
    assert found.tools["mpirun"] == "/usr/bin/mpirun"
    assert found.mpirun_version == "mpirun (Open MPI) 5.0.7"
    assert [python.path for python in found.pythons] == ["/opt/venv/bin/python", "/usr/bin/python3"]
    assert found.pythons[0] == PythonFacts(
        "/opt/venv/bin/python", (3, 13, 5), frozenset({"mpi4py", "torch"})
    )


def test_an_empty_tool_is_not_found_and_a_python_that_does_not_run_has_no_version() -> None:
    found = parse_probe("tool:sshd=\npython:/opt/x/python=\n")
    assert "sshd" not in found.tools
    assert found.pythons == (PythonFacts("/opt/x/python", None),)


def test_the_probe_runs_here_and_sees_this_interpreter() -> None:
    found = probe_here([sys.executable])
    here = found.python(sys.executable)
    assert here is not None and here.version == tuple(sys.version_info[:3])
    assert "ringleader" in here.modules
    assert found.tools.get("ssh-keygen", "").endswith("ssh-keygen")


def test_a_prepared_image_with_open_mpi_is_ready_for_mpi_and_torch() -> None:
    assert needs.missing_for("mpi", facts()) == []
    assert needs.missing_for("torch_distributed", facts()) == []


def test_missing_sshd_names_the_package_of_the_images_distribution() -> None:
    tools = {k: v for k, v in facts().tools.items() if k != "sshd"}
    (missing,) = needs.missing_for("mpi", facts(tools=tools))
    assert missing.what == "sshd"
    assert "apt-get install -y --no-install-recommends openssh-server" in missing.describe()
    rhel = facts(tools=tools, os_id="amzn", os_like=("fedora",))
    assert "dnf install -y openssh-server" in needs.missing_for("mpi", rhel)[0].fix
    unknown = facts(tools=tools, os_id="gentoo")
    assert "OpenSSH's server (sshd)" in needs.missing_for("mpi", unknown)[0].fix


def test_missing_mpirun_matters_for_mpi_only() -> None:
    tools = {k: v for k, v in facts().tools.items() if k != "mpirun"}
    (missing,) = needs.missing_for("mpi", facts(tools=tools))
    assert missing.what == "mpirun" and "openmpi-bin" in missing.fix
    assert needs.missing_for("torch_distributed", facts(tools=tools)) == []


def test_missing_ssh_keygen_matters_for_mpi_jobs_and_names_each_distributions_package(
    tmp_path: Path,
) -> None:
    tools = {k: v for k, v in facts().tools.items() if k != "ssh-keygen"}
    (missing,) = needs.missing_for("mpi", facts(tools=tools))
    assert missing.what == "ssh-keygen" and "when the job starts" in missing.why
    assert missing.fix.endswith("apt-get install -y --no-install-recommends openssh-client")
    rhel = needs.missing_for("mpi", facts(tools=tools, os_id="rocky", os_like=("rhel",)))
    assert rhel[0].fix == "RUN dnf install -y openssh"
    alpine = needs.missing_for("mpi", facts(tools=tools, os_id="alpine"))
    assert alpine[0].fix == "RUN apk add --no-cache openssh-keygen"
    assert needs.missing_for("torch_distributed", facts(tools=tools)) == []
    assert [item.what for item in setup.refusals(request(tmp_path), facts(tools=tools))] == [
        "ssh-keygen"
    ]
    lines = report_lines("img", facts(tools=tools))
    assert any(line.split() == ["mpi", "missing:"] for line in lines)
    assert any(line.strip().startswith("- ssh-keygen:") for line in lines)


def test_a_framework_distribution_needs_its_framework_in_the_training_python() -> None:
    (missing,) = needs.missing_for("multi_worker_mirrored_strategy", facts())
    assert missing.what == "tensorflow" and "/opt/venv/bin/python" in missing.fix
    assert needs.missing_for("parameter_server", facts())[0].what == "tensorflow or mxnet"


def test_an_unprepared_image_and_an_old_python_are_named() -> None:
    old = (PythonFacts("/usr/bin/python3", (3, 9, 2)),)
    found = needs.missing_for(
        "none", facts(settings=None, settings_python=None, pythons=old, tools={})
    )
    assert [item.what for item in found] == ["ringleader", "/usr/bin/python3 (Python 3.9.2)"]
    assert "supports Python 3.10-3.13" in found[1].why


def test_the_check_report_lists_each_distribution() -> None:
    lines = report_lines("img", facts())
    assert lines[0] == "img: Debian GNU/Linux 13 (trixie)".replace("img:", "image img:")
    assert any(line.split() == ["mpi", "ready"] for line in lines)
    assert any(line.split()[:2] == ["multi_worker_mirrored_strategy", "missing:"] for line in lines)


def request(tmp_path: Path, with_mpi: bool = True) -> setup.SetupRequest:
    return setup.SetupRequest("/opt/venv/bin/python", sys.executable, with_mpi, tmp_path)


def test_setup_refuses_without_sshd_and_with_an_old_python(tmp_path: Path) -> None:
    tools = {k: v for k, v in facts().tools.items() if k != "sshd"}
    old = (PythonFacts("/opt/venv/bin/python", (3, 9, 18)),)
    refused = setup.refusals(request(tmp_path), facts(tools=tools, pythons=old))
    assert [item.what for item in refused] == ["/opt/venv/bin/python (Python 3.9.18)", "sshd"]
    assert setup.refusals(request(tmp_path, with_mpi=False), facts(tools=tools)) == []


ENVIRON = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LD_LIBRARY_PATH": "/opt/mpi/lib"}


def test_setup_writes_the_jobs_ssh_files_settings_and_entry_script(tmp_path: Path) -> None:
    said: list[str] = []
    changed = setup.apply(request(tmp_path), facts(), ENVIRON, said.append)
    assert changed == said and changed
    ssh = tmp_path / "etc/ringleader/ssh"
    assert stat.S_IMODE(ssh.stat().st_mode) == 0o700
    sshd_config = (ssh / "sshd_config").read_text()
    assert "HostKey /etc/ringleader/ssh/ssh_host_ed25519_key" in sshd_config
    assert "AuthorizedKeysFile /etc/ringleader/ssh/authorized_keys" in sshd_config
    path = f"{Path(sys.executable).parent}:/opt/venv/bin:/usr/local/bin:/usr/bin:/bin"
    assert f'"PATH={path}"' in sshd_config
    assert '"LD_LIBRARY_PATH=/opt/mpi/lib"' in sshd_config
    assert '"OMPI_ALLOW_RUN_AS_ROOT=1"' in sshd_config
    ssh_config = (ssh / "ssh_config").read_text()
    assert "IdentityFile /etc/ringleader/ssh/id_ed25519" in ssh_config
    assert "UserKnownHostsFile /etc/ringleader/ssh/known_hosts" in ssh_config
    assert "StrictHostKeyChecking yes" in ssh_config
    # ssh itself reads the file as the job's connections will (-G: resolve, do not connect)
    resolved = subprocess.run(
        ["ssh", "-G", "-F", str(ssh / "ssh_config"), "algo-2"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.splitlines()
    assert "identityfile /etc/ringleader/ssh/id_ed25519" in resolved
    assert "userknownhostsfile /etc/ringleader/ssh/known_hosts" in resolved
    assert "stricthostkeychecking true" in resolved
    # no key in the image: every job makes its own (launch/jobkeys.py)
    assert sorted(path.name for path in ssh.iterdir()) == ["ssh_config", "sshd_config"]
    settings = load_image_settings(tmp_path / "etc/ringleader")
    assert settings == ImageSettings(
        "/opt/venv/bin/python",
        sys.executable,
        settings.ringleader_version if settings else "",
        "/usr/sbin/sshd",
        "/etc/ringleader/ssh",
    )
    script = tmp_path / "usr/local/bin/ringleader-entrypoint"
    assert os.access(script, os.X_OK)
    assert f"exec {sys.executable} -m ringleader.supervise.entrypoint" in script.read_text()
    assert (tmp_path / "opt/ml/output/data").is_dir() and (tmp_path / "run/sshd").is_dir()


def test_setup_run_twice_changes_nothing(tmp_path: Path) -> None:
    setup.apply(request(tmp_path), facts(), ENVIRON, lambda _: None)
    assert setup.apply(request(tmp_path), facts(), ENVIRON, lambda _: None) == []


@pytest.mark.parametrize("with_mpi", [True, False])
def test_setup_over_an_older_image_removes_the_keys_it_baked(
    tmp_path: Path, with_mpi: bool
) -> None:
    ssh = tmp_path / "etc/ringleader/ssh"
    ssh.mkdir(parents=True)
    baked = [
        "id_ed25519",
        "id_ed25519.pub",
        "authorized_keys",
        "ssh_host_ed25519_key",
        "ssh_host_ed25519_key.pub",
        "known_hosts",
    ]
    for name in baked:
        (ssh / name).write_text("baked by an older version\n")
    said: list[str] = []
    setup.apply(request(tmp_path, with_mpi), facts(), ENVIRON, said.append)
    assert [line for line in said if line.startswith("removed ")] == [
        f"removed /etc/ringleader/ssh/{name} (each job makes its own keys)" for name in baked
    ]
    assert not any((ssh / name).exists() for name in baked)
    assert setup.apply(request(tmp_path, with_mpi), facts(), ENVIRON, lambda _: None) == []


def test_setup_without_mpi_writes_no_ssh_files(tmp_path: Path) -> None:
    setup.apply(request(tmp_path, with_mpi=False), facts(), ENVIRON, lambda _: None)
    assert not (tmp_path / "etc/ringleader/ssh").exists()
    settings = load_image_settings(tmp_path / "etc/ringleader")
    assert settings is not None and settings.sshd is None


def test_the_setup_command_prepares_a_root_and_says_so_the_second_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli_main(["image", "setup", "--without-mpi", "--root", str(tmp_path)])
    assert code == 0, capsys.readouterr()
    assert "ringleader image setup: prepared" in capsys.readouterr().out
    assert cli_main(["image", "setup", "--without-mpi", "--root", str(tmp_path)]) == 0
    assert "already prepared; nothing changed" in capsys.readouterr().out


def test_the_setup_command_refuses_a_python_that_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["image", "setup", "--without-mpi", "--root", str(tmp_path), "--python", "/no/python"]
    assert cli_main(args) == 1
    error = capsys.readouterr().err
    assert "Python at /no/python: it does not run in this image" in error
    assert not (tmp_path / "etc").exists()


def test_the_settings_file_is_checked() -> None:
    source = Path("/etc/ringleader/image.json")
    with pytest.raises(ConfigError, match="not JSON"):
        ImageSettings.from_json("{", source)
    with pytest.raises(ConfigError, match="'python' is missing"):
        ImageSettings.from_json(json.dumps({"ssh_dir": "/x"}), source)


def test_an_mpi_job_in_an_unprepared_image_or_one_without_sshd_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="ringleader image setup"):
        sshd_command(None)
    without = ImageSettings("/p", "/p", "0", None, "/etc/ringleader/ssh")
    with pytest.raises(ConfigError, match="--without-mpi"):
        sshd_command(without)
    gone = ImageSettings("/p", "/p", "0", "/nowhere/sshd", "/etc/ringleader/ssh")
    with pytest.raises(ConfigError, match="has no /nowhere/sshd"):
        sshd_command(gone)


# pytest runs threads; the entry point forks before it starts any (3.12+ warns on the former).
FORK_IN_THREADS = "ignore:.*use of fork\\(\\) may lead to deadlocks:DeprecationWarning"


@pytest.mark.filterwarnings(FORK_IN_THREADS)
def test_pid_one_returns_the_entry_points_code() -> None:
    handlers = {signum: signal.getsignal(signum) for signum in FORWARDED}
    try:
        assert run_as_init(lambda: 7) == 7
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def test_pid_one_passes_sigterm_on_and_reports_the_childs_end() -> None:
    """In a process of its own, single-threaded as the entry point is when it forks: in
    pytest's, a thread of an earlier test may take the signal while the main thread waits in
    wait() (ci23, Python 3.10: the child slept its 30 s)."""
    code = (
        "import os, signal, sys, time\n"
        "from ringleader.supervise.pid1 import run_as_init\n"
        "def entry_point():\n"
        "    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))\n"
        "    os.kill(os.getppid(), signal.SIGTERM)  # as `docker stop` signals PID 1\n"
        "    time.sleep(30)  # ends by the forwarded signal long before this\n"
        "    return 0\n"
        "sys.exit(run_as_init(entry_point))\n"
    )
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], timeout=60, check=False)
    assert done.returncode == 143
    assert time.monotonic() - started < 20


def test_the_setup_command_refuses_a_python_below_the_supported_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / "python3.9"  # answers the probe as Python 3.9 would
    old.write_text("#!/bin/sh\nprintf '3.9.18|'\n")
    old.chmod(0o755)
    args = ["image", "setup", "--without-mpi", "--root", str(tmp_path / "root")]
    assert cli_main([*args, "--python", str(old)]) == 1
    error = capsys.readouterr().err
    assert f"{old} (Python 3.9.18): ringleader supports Python 3.10-3.13" in error
    assert not (tmp_path / "root").exists()
