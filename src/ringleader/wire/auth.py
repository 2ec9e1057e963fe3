"""How the two ends of a control connection prove that they belong to the same job (pure).

A launcher that can hand every host a secret (`ringleader local`, `ringleader cluster`) puts it
in the entry point's environment (JOB_SECRET_VARIABLE); the entry point takes it out before it
starts anything else. Each side then proves it knows the secret with an HMAC-SHA256 over the
job, the worker's name, the connection's purpose and a fresh nonce from each side: a recorded
handshake cannot be replayed on another connection, and neither side ever sends the secret.
"""

import hashlib
import hmac
import os

JOB_SECRET_VARIABLE = "RINGLEADER_JOB_SECRET"  # noqa: S105 (its name, not a secret)
SECRET_BYTES = 32
NONCE_BYTES = 16


class BadSecret(ValueError):
    """The job secret in the environment is not one a launcher of ours made."""


def new_secret() -> str:
    """A fresh job secret, as its launcher hands it to every host (hex)."""
    return os.urandom(SECRET_BYTES).hex()


def read_secret(text: str | None) -> bytes | None:
    """The job's secret from its environment value; None when the launcher gave none."""
    if not text:
        return None
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        raise BadSecret(f"{JOB_SECRET_VARIABLE} must be hexadecimal") from None
    if len(secret) < SECRET_BYTES // 2:
        raise BadSecret(f"{JOB_SECRET_VARIABLE} must hold at least {SECRET_BYTES // 2} bytes")
    return secret


def new_nonce() -> str:
    return os.urandom(NONCE_BYTES).hex()


def join_proof(secret: bytes, job: str, host: str, link: str, leader_nonce: str, nonce: str) -> str:
    """The worker's proof, for the leader's greeting on this connection."""
    return _mac(secret, "join", job, host, link, leader_nonce, nonce)


def welcome_proof(
    secret: bytes, job: str, host: str, link: str, worker_nonce: str, nonce: str, ssh_key: str
) -> str:
    """The leader's proof, for the worker's join on this connection; it covers the ssh key it
    hands over, so no one between them can swap it."""
    return _mac(secret, "welcome", job, host, link, worker_nonce, nonce, ssh_key)


def proofs_match(expected: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())


def _mac(secret: bytes, *fields: str) -> str:
    # Each field's length goes first: no two different field lists give the same input.
    message = b"".join(len(f.encode()).to_bytes(4, "big") + f.encode() for f in fields)
    return hmac.new(secret, message, hashlib.sha256).hexdigest()
