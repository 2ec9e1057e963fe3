"""S3 URIs and bucket names (pure)."""

import ipaddress
import re

SCHEME = "s3://"

# Bucket names as S3 accepts them since 2018: 3-63 characters, lower-case letters, digits,
# dots and hyphens, a letter or digit at each end, no "..", not an IPv4 address.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


class S3UriError(ValueError):
    """The text is not the S3 URI that was expected; the message says why."""


def split_s3_uri(uri: str) -> tuple[str, str]:
    """(bucket, rest) of `s3://bucket/rest`, the scheme in any case; either may be empty."""
    if uri[: len(SCHEME)].lower() != SCHEME:
        raise S3UriError(f"{uri!r} does not start with {SCHEME}")
    bucket, _, rest = uri[len(SCHEME) :].partition("/")
    return bucket, rest


def parse_s3_object_uri(uri: str, expected: str = "an object (s3://bucket/key)") -> tuple[str, str]:
    """(bucket, key) of an s3://bucket/key URI naming one object; S3UriError otherwise.

    `expected` says what the URI should name, in the message when it names no object."""
    bucket, key = split_s3_uri(uri)
    if not bucket:
        raise S3UriError(f"{uri!r} has no bucket name")
    if not key or key.endswith("/"):
        raise S3UriError(f"{uri!r} must name {expected}")
    return bucket, key


def bucket_name_problem(name: str) -> str | None:
    """Why `name` is not a valid S3 bucket name, or None when it is."""
    if not 3 <= len(name) <= 63:
        return f"must be 3 to 63 characters long, not {len(name)}"
    if not _BUCKET.fullmatch(name):
        return (
            "only lower-case letters, digits, dots and hyphens, "
            "starting and ending with a letter or digit"
        )
    if ".." in name:
        return "two dots in a row"
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return None
    return "looks like an IP address"
