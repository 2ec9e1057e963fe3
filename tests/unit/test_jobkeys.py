"""A job's own ssh keys (launch/jobkeys.py), made with the real ssh-keygen in a temporary ssh
directory: the pairs match, the files have the modes sshd and ssh demand, and what another host
sends is checked before anything is written."""

import base64
import stat
import struct
import subprocess
from pathlib import Path

import pytest

from ringleader.core.errors import ConfigError
from ringleader.launch import jobkeys


@pytest.fixture
def ssh_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "ssh"
    directory.mkdir(mode=0o700)
    return directory


def public_of(private: Path) -> str:
    """What ssh-keygen derives from the private key: type and body (no comment)."""
    derived = subprocess.run(
        ["ssh-keygen", "-y", "-f", str(private)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return " ".join(derived.stdout.split()[:2])


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def blob(name: bytes, key: bytes) -> str:
    packed = struct.pack(">I", len(name)) + name + struct.pack(">I", len(key)) + key
    return base64.b64encode(packed).decode()


def test_a_host_key_is_a_matching_pair_replacing_the_one_there(ssh_dir: Path) -> None:
    first = jobkeys.make_host_key(ssh_dir)
    private = ssh_dir / "ssh_host_ed25519_key"
    assert first.startswith("ssh-ed25519 AAAA") and first.endswith(" ringleader host")
    assert public_of(private) == " ".join(first.split()[:2])
    assert (ssh_dir / "ssh_host_ed25519_key.pub").read_text() == first + "\n"
    assert mode(private) == 0o600
    second = jobkeys.make_host_key(ssh_dir)
    assert second != first and public_of(private) == " ".join(second.split()[:2])
    # the work directory ssh-keygen wrote into is gone; only the pair is left
    assert sorted(path.name for path in ssh_dir.iterdir()) == [
        "ssh_host_ed25519_key",
        "ssh_host_ed25519_key.pub",
    ]


def test_a_client_key_is_a_matching_pair_named_after_the_job(ssh_dir: Path) -> None:
    public = jobkeys.make_client_key(ssh_dir, "train job/1")
    private = ssh_dir / "id_ed25519"
    assert public_of(private) == " ".join(public.split()[:2])
    assert public.endswith(" ringleader job train_job_1")
    assert mode(private) == 0o600
    assert jobkeys.make_client_key(ssh_dir, "train") != public


def test_authorize_keeps_only_the_given_key(ssh_dir: Path) -> None:
    (ssh_dir / "authorized_keys").write_text("ssh-ed25519 AAAAbaked old\n")
    public = jobkeys.make_client_key(ssh_dir, "job")
    jobkeys.authorize(ssh_dir, public + "\n")
    assert (ssh_dir / "authorized_keys").read_text() == public + "\n"
    assert mode(ssh_dir / "authorized_keys") == 0o600
    assert sorted(path.name for path in ssh_dir.iterdir()) == [
        "authorized_keys",
        "id_ed25519",
        "id_ed25519.pub",
    ]


def test_pin_hosts_writes_one_line_per_host_and_nothing_else(ssh_dir: Path) -> None:
    (ssh_dir / "known_hosts").write_text("* ssh-ed25519 AAAAbaked\n")
    keys = {"algo-1": jobkeys.make_host_key(ssh_dir), "10.0.0.2": jobkeys.make_host_key(ssh_dir)}
    jobkeys.pin_hosts(ssh_dir, keys)
    lines = (ssh_dir / "known_hosts").read_text().splitlines()
    assert lines == [f"{host} {' '.join(key.split()[:2])}" for host, key in keys.items()]
    assert mode(ssh_dir / "known_hosts") == 0o600
    # ssh-keygen itself finds each host under its own key and no other host
    found = subprocess.run(
        ["ssh-keygen", "-F", "algo-1", "-f", str(ssh_dir / "known_hosts")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert found.returncode == 0 and keys["algo-1"].split()[1] in found.stdout
    assert keys["10.0.0.2"].split()[1] not in found.stdout
    missing = subprocess.run(
        ["ssh-keygen", "-F", "algo-3", "-f", str(ssh_dir / "known_hosts")],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert missing.returncode == 1
    jobkeys.pin_hosts(ssh_dir, {})
    assert (ssh_dir / "known_hosts").read_text() == ""


GOOD = blob(b"ssh-ed25519", bytes(range(32)))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty"),
        (f"ssh-ed25519 {GOOD}\nssh-ed25519 {GOOD}", "one line"),
        (f"ssh-ed25519 {GOOD} a\rb", "one line"),
        (f"ssh-ed25519 {GOOD} caf\u00e9", "printable ASCII"),
        (f'command="sh" ssh-ed25519 {GOOD}', "key type"),
        (f"ssh-rsa {GOOD}", "key type"),
        (f" ssh-ed25519 {GOOD}", "key type"),
        ("ssh-ed25519 not*base64", "not base64"),
        ("ssh-ed25519", "no base64 body"),
        (f"ssh-ed25519  {GOOD}", "no base64 body"),
        (f"ssh-ed25519 {blob(b'ssh-rsa', bytes(32))}", f"not an {jobkeys.KEY_TYPE} key"),
        (f"ssh-ed25519 {blob(b'ssh-ed25519', bytes(31))}", "not an ssh-ed25519 key"),
        (f"ssh-ed25519 {GOOD}{'A' * 2000}", "characters long"),
    ],
)
def test_a_bad_public_key_is_refused_and_nothing_is_written(
    ssh_dir: Path, text: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        jobkeys.authorize(ssh_dir, text)
    with pytest.raises(ValueError, match=f"the host key of algo-2: .*{problem}"):
        jobkeys.pin_hosts(ssh_dir, {"algo-1": f"ssh-ed25519 {GOOD}", "algo-2": text})
    assert list(ssh_dir.iterdir()) == []


def test_a_good_public_key_is_normalized() -> None:
    assert jobkeys.checked_public_key(f"ssh-ed25519 {GOOD}\n") == f"ssh-ed25519 {GOOD}"
    assert jobkeys.checked_public_key(f"ssh-ed25519 {GOOD} a b ") == f"ssh-ed25519 {GOOD} a b"


@pytest.mark.parametrize(
    "host", ["*", "algo-*", "a,b", "!algo-1", "@revoked", "|1|x", "[h]:22", "a b", ""]
)
def test_a_host_name_known_hosts_would_read_as_a_pattern_is_refused(
    ssh_dir: Path, host: str
) -> None:
    with pytest.raises(ValueError, match="not a host name"):
        jobkeys.pin_hosts(ssh_dir, {host: f"ssh-ed25519 {GOOD}"})
    assert list(ssh_dir.iterdir()) == []


def test_a_missing_ssh_directory_names_image_setup(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="ringleader image setup"):
        jobkeys.make_host_key(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="ringleader image setup"):
        jobkeys.authorize(tmp_path / "nowhere", f"ssh-ed25519 {GOOD}")


def test_without_ssh_keygen_the_error_names_the_package(
    ssh_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(ssh_dir))  # a PATH with no ssh-keygen on it
    with pytest.raises(ConfigError, match="openssh-client") as error:
        jobkeys.make_host_key(ssh_dir)
    assert error.value.exit_code == 78
    assert list(ssh_dir.iterdir()) == []


def test_a_failing_ssh_keygen_says_what_it_said(ssh_dir: Path) -> None:
    # a path in a directory that does not exist: ssh-keygen itself fails
    with pytest.raises(jobkeys.KeygenError, match=r"ssh-keygen for .* failed: .+"):
        jobkeys.keygen(ssh_dir / "no" / "key", "comment")
