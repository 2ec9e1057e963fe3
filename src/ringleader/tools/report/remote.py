"""A run given as s3://: its output.tar.gz (a key ending in .tar.gz, .tgz or .tar) or
everything under a prefix, fetched into a temporary folder and read like a local one.

Endpoint and credentials are boto3's (AWS_ENDPOINT_URL, AWS_PROFILE, ...; ringleader.aws.client).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from ringleader.tools.report.load import ARCHIVE_SUFFIXES, Source, SourceError, open_source

S3_SCHEME = "s3://"


def is_s3(text: str) -> bool:
    return text[: len(S3_SCHEME)].lower() == S3_SCHEME


@contextmanager
def open_run(text: str) -> Iterator[Source]:
    """A run's output, local (a folder or an archive) or on S3; SourceError when it cannot be
    read."""
    if not is_s3(text):
        with open_source(Path(text)) as source:
            yield source
        return
    with tempfile.TemporaryDirectory(prefix="ringleader-compare-") as folder:
        local = _fetch(text, Path(folder))
        with open_source(local) as source:
            yield Source(source.root, archive=True)


def _fetch(uri: str, folder: Path) -> Path:
    from botocore.exceptions import BotoCoreError, ClientError  # boto3 loads only for s3://

    from ringleader.aws.client import make_client, s3_endpoint
    from ringleader.aws.download import download_prefix
    from ringleader.aws.uri import S3UriError, split_s3_uri

    try:
        bucket, key = split_s3_uri(uri)
    except S3UriError as error:
        raise SourceError(str(error)) from None
    if not bucket:
        raise SourceError(f"{uri} has no bucket name (expected s3://bucket/prefix)")
    try:
        client = make_client("s3", endpoint_url=s3_endpoint())
        if key.endswith(ARCHIVE_SUFFIXES):
            target = folder / PurePosixPath(key).name
            client.download_file(bucket, key, str(target))
            return target
        target = folder / "run"
        target.mkdir()
        _, found = download_prefix(client, bucket, key, target, lambda *_: None)
    except (BotoCoreError, ClientError) as error:
        raise SourceError(f"{uri}: cannot download: {error}") from None
    if not found:
        raise SourceError(f"{uri}: no objects under this prefix")
    return target
