"""The ssh keys of one job, made when it starts: no key is baked into the image, so having the
image is not enough to log in to a running job (issue 26).

Every host makes a fresh host key for its own sshd before that sshd starts and sends the public
half to the leader; the leader makes a fresh client key pair and hands its public half to every
worker. Workers authorize only that key; the leader pins each worker's host key under the
worker's name. Both public keys come from another host, so they are checked before anything is
written. All files live in the image's ssh directory (ImageSettings.ssh_dir), where the
sshd_config and ssh_config that `ringleader image setup` wrote look for them.
"""

import base64
import binascii
import os
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ringleader.core.errors import ConfigError, JobError

# The names sshd_config (HostKey, AuthorizedKeysFile) and ssh_config (IdentityFile,
# UserKnownHostsFile) give; `image setup` renders them from these.
HOST_KEY_NAME = "ssh_host_ed25519_key"
CLIENT_KEY_NAME = "id_ed25519"
AUTHORIZED_KEYS_NAME = "authorized_keys"
KNOWN_HOSTS_NAME = "known_hosts"
# What images prepared by older versions had baked in (`image setup` removes them).
BAKED_FILES = (
    CLIENT_KEY_NAME,
    f"{CLIENT_KEY_NAME}.pub",
    AUTHORIZED_KEYS_NAME,
    HOST_KEY_NAME,
    f"{HOST_KEY_NAME}.pub",
    KNOWN_HOSTS_NAME,
)

KEY_TYPE = "ssh-ed25519"  # every ringleader host makes ed25519 keys: nothing else is accepted
_ED25519_LENGTH = 32  # bytes of an ed25519 public key
_MAX_LINE = 1024  # far above an ed25519 line (~100 characters plus the comment)
# A host name as mpirun and the leader's checks pass it to ssh: letters, digits, dots, dashes,
# underscores and IPv6 colons. Nothing that known_hosts reads as a pattern (* ? ! ,), a marker
# (@), a hashed name (|) or a [host]:port form.
_HOST_NAME = re.compile(r"[A-Za-z0-9:][A-Za-z0-9._:-]{0,252}")
KEYGEN_TIMEOUT = 30.0  # ssh-keygen takes milliseconds; this only bounds a stuck one


class KeygenError(JobError):
    """ssh-keygen ran and failed (the image's ssh directory or ssh-keygen itself is broken)."""


def checked_public_key(text: str) -> str:
    """`text` as one public key line, "ssh-ed25519 BASE64 [comment]", normalized (one space
    apart, no newline); ValueError naming what is wrong otherwise. It comes over the network."""
    if not isinstance(text, str):
        raise ValueError(f"a public key must be a string, not {type(text).__name__}")
    line = text.removesuffix("\n")
    if not line:
        raise ValueError("the public key is empty")
    if len(line) > _MAX_LINE:
        raise ValueError(f"the public key is {len(line)} characters long (at most {_MAX_LINE})")
    if not all(" " <= char <= "~" for char in line):
        raise ValueError("a public key must be one line of printable ASCII")
    kind, _, rest = line.partition(" ")
    if kind != KEY_TYPE:
        raise ValueError(f"the key type {kind[:40]!r} is not {KEY_TYPE}")
    body, _, comment = rest.partition(" ")
    _check_blob(body)
    comment = comment.strip()
    return f"{kind} {body} {comment}" if comment else f"{kind} {body}"


def _check_blob(body: str) -> None:
    """The base64 body must decode to exactly an ed25519 key in ssh's wire format: the
    length-prefixed type name, then the length-prefixed 32-byte key."""
    if not body:
        raise ValueError("the public key has no base64 body after its type (one space apart)")
    try:
        blob = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the public key's body is not base64") from None
    name = KEY_TYPE.encode()
    expected = struct.pack(">I", len(name)) + name + struct.pack(">I", _ED25519_LENGTH)
    if len(blob) != len(expected) + _ED25519_LENGTH or not blob.startswith(expected):
        raise ValueError(f"the public key's body is not an {KEY_TYPE} key")


def make_host_key(ssh_dir: Path) -> str:
    """A fresh host key for this host's sshd (replacing any there); its public line."""
    return _make_key_pair(ssh_dir, HOST_KEY_NAME, "ringleader host")


def make_client_key(ssh_dir: Path, job: str) -> str:
    """On the leader: a fresh client key pair for the job's ssh; its public line."""
    # the comment only names the key for a person reading authorized_keys
    safe_job = re.sub(r"[^A-Za-z0-9._-]", "_", job)[:64]
    return _make_key_pair(ssh_dir, CLIENT_KEY_NAME, f"ringleader job {safe_job}")


def authorize(ssh_dir: Path, public_key: str) -> None:
    """authorized_keys holding only `public_key` (checked first: it comes from the leader)."""
    line = checked_public_key(public_key)
    _write_private(_existing(ssh_dir) / AUTHORIZED_KEYS_NAME, line + "\n")


def pin_hosts(ssh_dir: Path, host_keys: Mapping[str, str]) -> None:
    """known_hosts with one line per host, its name and its public host key (each checked:
    they come from the workers), and nothing else."""
    lines = []
    for host, public_key in host_keys.items():
        if not isinstance(host, str) or not _HOST_NAME.fullmatch(host):
            raise ValueError(f"{str(host)[:80]!r} is not a host name known_hosts can pin")
        try:
            kind, body = checked_public_key(public_key).split(" ")[:2]
        except ValueError as error:
            raise ValueError(f"the host key of {host}: {error}") from None
        # the comment stays out: ssh ignores it here
        lines.append(f"{host} {kind} {body}\n")
    _write_private(_existing(ssh_dir) / KNOWN_HOSTS_NAME, "".join(lines))


def _existing(ssh_dir: Path) -> Path:
    if not ssh_dir.is_dir():
        raise ConfigError(
            "image",
            f"the job's ssh directory {ssh_dir} does not exist: an mpi job needs an image "
            "prepared by `ringleader image setup` (without --without-mpi)",
        )
    return ssh_dir


def _write_private(path: Path, content: str) -> None:
    """Replace `path` at once (sshd may read authorized_keys at any moment), mode 0600 (what
    mkstemp creates; sshd refuses files others can write)."""
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as file:
            file.write(content)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _make_key_pair(ssh_dir: Path, name: str, comment: str) -> str:
    """A fresh ed25519 pair at ssh_dir/name (and name.pub), replacing any; the public line.

    ssh-keygen will not overwrite a key without asking, so it writes into a new directory
    beside the target and the pair is moved into place."""
    work = Path(tempfile.mkdtemp(dir=_existing(ssh_dir), prefix=".keygen-"))
    try:
        private = work / name
        keygen(private, comment)
        public = checked_public_key(private.with_name(f"{name}.pub").read_text(encoding="ascii"))
        os.replace(private.with_name(f"{name}.pub"), ssh_dir / f"{name}.pub")
        os.replace(private, ssh_dir / name)
        return public
    finally:
        shutil.rmtree(work, ignore_errors=True)


def keygen(path: Path, comment: str) -> None:
    """`ssh-keygen` makes an ed25519 pair without passphrase at `path` (which must not exist)."""
    try:
        made = subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=KEYGEN_TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        raise ConfigError(
            "image",
            "an mpi job makes its ssh keys with ssh-keygen, and this image has none on PATH: "
            "install OpenSSH's client (Debian/Ubuntu: openssh-client; RHEL: openssh; Alpine: "
            "openssh-keygen); `ringleader image check IMAGE` lists what each distribution needs",
        ) from None
    except subprocess.TimeoutExpired:
        raise KeygenError(
            f"ssh-keygen for {path} did not finish within {KEYGEN_TIMEOUT:g} s"
        ) from None
    except OSError as error:
        raise KeygenError(f"ssh-keygen for {path} could not run: {error}") from None
    if made.returncode != 0:
        problem = made.stderr.strip() or f"exit code {made.returncode}"
        raise KeygenError(f"ssh-keygen for {path} failed: {problem}")
