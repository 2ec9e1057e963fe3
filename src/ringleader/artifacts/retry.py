"""Which S3 errors are worth another attempt, how long to wait, and how errors read.

botocore's "standard" retry mode already retries each request a few times (throttling, 5xx,
connection errors). This is the outer layer: it retries a whole call (HeadBucket, one
archive's upload) when botocore gave up on a transient error, or on errors botocore does not
retry (a checksum mismatch on the way, an incomplete read).
"""

from collections.abc import Iterable, Mapping

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    PartialCredentialsError,
)

THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "RequestThrottled",
        "SlowDown",
        "PriorRequestNotComplete",
    }
)
TRANSIENT_CODES = frozenset(
    {
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
        "BadDigest",  # the body was damaged on the way
        "XAmzContentSHA256Mismatch",
    }
)
# Environment variables whose values must never appear in a message or a log line.
CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
)
REDACTED = "***"


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def http_status(error: ClientError) -> int:
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return status if isinstance(status, int) else 0


def is_retryable(error: BaseException) -> bool:
    if isinstance(error, ClientError):
        code = error_code(error)
        status = http_status(error)
        return code in THROTTLING_CODES or code in TRANSIENT_CODES or status >= 500 or status == 429
    return isinstance(error, ConnectionError | HTTPClientError | IncompleteReadError)


def backoff_delay(failures: int, base: float, cap: float) -> float:
    """Seconds to wait after the `failures`-th failed attempt: base, 2 base, 4 base ... cap."""
    return float(min(cap, base * 2 ** max(failures - 1, 0)))


def error_text(error: BaseException) -> str:
    """A short description of an S3 or file error, without request details."""
    if isinstance(error, ClientError):
        info = error.response.get("Error", {})
        code = error_code(error) or "Error"
        message = str(info.get("Message") or "").strip()
        status = http_status(error)
        if code.isdigit():  # HEAD requests have no body: only the status
            return f"HTTP {code} {message}".rstrip()
        parts = [f"{code}: {message}" if message else code]
        if status:
            parts.append(f"(HTTP {status})")
        return " ".join(parts)
    if isinstance(error, NoCredentialsError | PartialCredentialsError):
        return (
            "no usable AWS credentials (environment, shared credentials file, "
            "container or instance role)"
        )
    if isinstance(error, TimeoutError) and not error.strerror:
        return str(error) or "timed out"
    if isinstance(error, BotoCoreError):
        return f"{type(error).__name__}: {error}"
    if isinstance(error, OSError) and error.strerror:
        where = f" ({error.filename})" if error.filename else ""
        return f"{error.strerror}{where}"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def secret_values(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The credential values present in `environ`, to be redacted from any text shown."""
    return tuple(value for name in CREDENTIAL_VARIABLES if len(value := environ.get(name, "")) >= 4)


def redact(text: str, secrets: Iterable[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, REDACTED)
    return text
