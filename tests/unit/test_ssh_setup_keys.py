"""Issue 26: an mpi job's ssh keys are its own: the leader makes the client pair and hands its
public key over the control channel, each worker lets in only that key, and the leader pins
each worker's host key from its hello before it ssh-es there (real ssh-keygen in tmp_path)."""

from pathlib import Path

import pytest

from ringleader.config.image import ImageSettings
from ringleader.core.errors import StartupError
from ringleader.launch import jobkeys
from ringleader.launch.mpirun_strategy import SshSetup


class CheckedHosts:
    """The masters' check: which hosts it was asked to reach."""

    def __init__(self) -> None:
        self.hosts: list[str] = []

    def check(self, host: str, timeout: float) -> str | None:
        self.hosts.append(host)
        return None


def image(ssh_dir: Path) -> ImageSettings:
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    return ImageSettings(
        "/usr/bin/python3", "/usr/bin/python3", "0", "/usr/sbin/sshd", str(ssh_dir)
    )


def leader_setup(ssh_dir: Path) -> tuple[SshSetup, CheckedHosts]:
    masters = CheckedHosts()
    return SshSetup(True, masters, image(ssh_dir)), masters  # type: ignore[arg-type]


def test_the_leader_makes_the_jobs_key_and_lets_only_it_in(tmp_path: Path) -> None:
    setup, _ = leader_setup(tmp_path / "ssh")
    (tmp_path / "ssh" / "authorized_keys").write_text("ssh-ed25519 AAAA a-key-baked-long-ago\n")
    public = setup.client_key("job-7")
    assert public is not None and public.startswith("ssh-ed25519 ")
    assert "job-7" in public
    assert (tmp_path / "ssh" / "authorized_keys").read_text().split() == public.split()
    assert (tmp_path / "ssh" / "id_ed25519").stat().st_mode & 0o777 == 0o600


def test_a_worker_lets_in_the_key_its_leader_handed_over(tmp_path: Path) -> None:
    leader, _ = leader_setup(tmp_path / "leader")
    public = leader.client_key("job-7")
    worker = SshSetup(True, None, image(tmp_path / "worker"))
    worker.authorize(public)
    assert (tmp_path / "worker" / "authorized_keys").read_text().split() == (public or "").split()


def test_a_worker_refuses_a_bad_key(tmp_path: Path) -> None:
    worker = SshSetup(True, None, image(tmp_path / "ssh"))
    with pytest.raises(StartupError, match="ssh keys of this job"):
        worker.authorize('command="sh" ssh-ed25519 AAAA')
    assert not (tmp_path / "ssh" / "authorized_keys").exists()


def test_a_worker_without_a_key_lets_no_one_in(tmp_path: Path) -> None:
    """A leader that only tells the job's result hands over no key: nothing is authorized."""
    worker = SshSetup(True, None, image(tmp_path / "ssh"))
    worker.authorize(None)
    assert not (tmp_path / "ssh" / "authorized_keys").exists()


def test_the_leader_pins_each_workers_host_key_before_its_check(tmp_path: Path) -> None:
    setup, masters = leader_setup(tmp_path / "leader")
    keys = {}
    for host in ("algo-2", "algo-3"):
        keys[host] = jobkeys.make_host_key(Path(image(tmp_path / host).ssh_dir))
    assert setup.check_worker is not None
    for host, key in keys.items():
        assert setup.check_worker(host, key, 5.0) is None
    pinned = (tmp_path / "leader" / "known_hosts").read_text().splitlines()
    assert sorted(line.split()[0] for line in pinned) == ["algo-2", "algo-3"]
    for line in pinned:
        host, *key = line.split()
        assert key == keys[host].split()[:2]
    assert masters.hosts == ["algo-2", "algo-3"]


def test_a_hello_without_a_host_key_fails_the_check(tmp_path: Path) -> None:
    setup, masters = leader_setup(tmp_path / "ssh")
    assert setup.check_worker is not None
    assert setup.check_worker("algo-2", None, 5.0) == "algo-2: its hello carried no ssh host key"
    assert masters.hosts == []


def test_a_cluster_machine_keeps_its_own_keys(tmp_path: Path) -> None:
    masters = CheckedHosts()
    setup = SshSetup(False, masters, None)  # type: ignore[arg-type]
    assert setup.client_key("job-7") is None
    setup.authorize(None)
    assert setup.check_worker is not None
    assert setup.check_worker("node-2", None, 5.0) is None
    assert masters.hosts == ["node-2"]
    assert list(tmp_path.iterdir()) == []
