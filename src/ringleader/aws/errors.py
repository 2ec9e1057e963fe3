"""What an AWS error means: worth another attempt or not, how long to wait, how it reads.

botocore's "standard" retry mode (see `client.client_config`) already retries each request a
few times (throttling, 5xx, connection errors). `is_retryable` and `backoff_delay` are for an
outer layer that retries a whole call (a HeadBucket, one file's upload) when botocore gave up
on a transient error, or on errors botocore does not retry (a checksum mismatch on the way, an
incomplete read). `error_text` describes an error from its code, message and HTTP status,
never from the request, so no credential or signature can leak into it.
"""

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


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def http_status(error: ClientError) -> int:
    """The response's HTTP status, or 0 when there is none."""
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
    """A short description of an AWS or file error, without request details."""
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
