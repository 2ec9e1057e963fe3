"""Credentials never appear in a message or a log line: which values to mask, and masking (pure).

Messages are made from error codes and texts, never from requests; this is the second guard.
"""

from collections.abc import Iterable, Mapping

# Environment variables whose values must never appear in a message or a log line.
CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
)
REDACTED = "***"
MIN_SECRET_LENGTH = 4  # shorter values would mask ordinary words


def secret_values(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The credential values present in `environ`, to be redacted from any text shown."""
    return tuple(
        value
        for name in CREDENTIAL_VARIABLES
        if len(value := environ.get(name, "")) >= MIN_SECRET_LENGTH
    )


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret replaced by ***, the longest first."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, REDACTED)
    return text
