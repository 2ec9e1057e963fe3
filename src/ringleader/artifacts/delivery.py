"""Copy one host's archives to the output URI: a local directory or S3 through boto3.

Every archive goes to `<uri>/<host>/<name>`, so hosts never overwrite each other. A local copy
is written under a temporary name and renamed. S3 uploads use s3transfer's manager (what
boto3's upload_file runs on), multipart above a threshold, botocore's standard retries per
request and a bounded outer retry with exponential backoff per call; the whole delivery stops
starting attempts at a deadline. Retries and failures go to `log`, which the caller gives:
the entry point passes the toolkit's own log (`ringleader.output.log.log`); a test passes a
list's append, or `lambda _line: None` drops them.
"""

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import botocore.config
from boto3.s3.transfer import TransferConfig, create_transfer_manager
from botocore.exceptions import ClientError
from s3transfer.subscribers import BaseSubscriber

from ringleader.artifacts.archive import PARTIAL_SUFFIX, Archive
from ringleader.artifacts.report import ArchiveResult, DeliveryReport
from ringleader.aws.client import Client, client_config, make_client, s3_endpoint
from ringleader.aws.errors import backoff_delay, error_code, error_text, http_status, is_retryable
from ringleader.aws.redact import redact, secret_values
from ringleader.config.output_uri import FIELD, OutputUri
from ringleader.core.errors import ConfigError
from ringleader.core.files import atomic_output

MIB = 1024 * 1024
ClientFactory = Callable[[botocore.config.Config], Client]
Log = Callable[[str], None]


@dataclass(frozen=True)
class TransferSettings:
    attempts: int = 4  # outer attempts per call (HeadBucket, each archive's upload)
    request_attempts: int = 5  # botocore "standard" mode: attempts per HTTP request
    backoff_base: float = 1.0  # seconds before the 2nd outer attempt; doubles each time
    backoff_cap: float = 30.0
    multipart_threshold: int = 64 * MIB  # larger archives go up in parts
    multipart_chunksize: int = 16 * MIB  # S3 needs >= 5 MiB; s3transfer raises it as needed
    max_concurrency: int = 4  # parts in flight
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    timeout: float = 600.0  # no attempt or wait starts later than this after delivery began

    def botocore_config(self) -> botocore.config.Config:
        return client_config(
            total_attempts=self.request_attempts,
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
            max_pool_connections=max(10, self.max_concurrency),
        )

    def transfer_config(self) -> TransferConfig:
        return TransferConfig(
            multipart_threshold=self.multipart_threshold,
            multipart_chunksize=self.multipart_chunksize,
            max_concurrency=self.max_concurrency,
            use_threads=True,
            preferred_transfer_client="classic",  # the CRT client ignores this configuration
        )


def make_s3_client(config: botocore.config.Config) -> Client:
    """An S3 client in a session of its own (see ringleader.aws.client.make_client), at the
    same endpoint the sourcedir download uses."""
    return make_client("s3", config, new_session=True, endpoint_url=s3_endpoint())


@dataclass(frozen=True)
class _Context:
    settings: TransferSettings
    deadline: float
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    log: Log
    secrets: tuple[str, ...]

    def text(self, error: BaseException) -> str:
        return redact(error_text(error), self.secrets)


class _Failed(Exception):
    def __init__(self, message: str, attempts: int) -> None:
        super().__init__(message)
        self.message, self.attempts = message, attempts


def deliver(
    archives: Sequence[Archive],
    uri: OutputUri,
    host: str,
    *,
    settings: TransferSettings | None = None,
    client_factory: ClientFactory = make_s3_client,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    log: Log,
    secrets: Iterable[str] | None = None,
    keep_local: bool = False,
) -> DeliveryReport:
    """Deliver each archive to `uri/<host>/<name>`; never raises for a delivery problem.

    A delivered archive is removed from the work directory unless `keep_local`; one that
    failed stays there and the report names its path. `secrets` (default: the AWS credential
    variables of the environment) are masked in every message. Each retry and failure is a
    line of `log`.
    """
    settings = settings or TransferSettings()
    context = _Context(
        settings,
        clock() + settings.timeout,
        clock,
        sleep,
        log,
        tuple(secrets) if secrets is not None else secret_values(os.environ),
    )
    results: list[ArchiveResult] = []
    if uri.scheme == "file":
        for archive in archives:
            results.append(_deliver_local(archive, uri, host, context, keep_local))
    else:
        results.extend(_deliver_s3(archives, uri, host, context, client_factory, keep_local))
    return DeliveryReport(str(uri), host, tuple(results))


def _result(archive: Archive, destination: str, **changes: Any) -> ArchiveResult:
    base = ArchiveResult(
        name=archive.name,
        destination=destination,
        size=archive.size,
        sha256=archive.sha256,
        files=archive.files,
        skipped=archive.skipped,
    )
    return replace(base, **changes)


def _deliver_local(
    archive: Archive, uri: OutputUri, host: str, context: _Context, keep_local: bool
) -> ArchiveResult:
    destination = Path(uri.destination(host, archive.name))
    try:
        same = destination.exists() and os.path.samefile(destination, archive.path)
        if not same:
            copy_atomically(archive.path, destination)
    except OSError as error:
        message = context.text(error)
        context.log(f"artifacts: copying {archive.name} to {destination} failed: {message}")
        return _result(archive, str(destination), error=message, kept=archive.path, attempts=1)
    if not keep_local and not same:
        with contextlib.suppress(OSError):
            archive.path.unlink()
    return _result(archive, str(destination), attempts=1)


def copy_atomically(source: Path, destination: Path) -> None:
    """Copy to a temporary name next to `destination`, then rename: no partial final file."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    with (
        source.open("rb") as stream,
        atomic_output(destination, suffix=PARTIAL_SUFFIX, mode=0o644) as target,
    ):
        shutil.copyfileobj(stream, target, 4 * MIB)


def _deliver_s3(
    archives: Sequence[Archive],
    uri: OutputUri,
    host: str,
    context: _Context,
    client_factory: ClientFactory,
    keep_local: bool,
) -> list[ArchiveResult]:
    def failed_all(message: str, attempts: int) -> list[ArchiveResult]:
        return [
            _result(
                archive,
                uri.destination(host, archive.name),
                error=message,
                kept=archive.path,
                attempts=attempts,
            )
            for archive in archives
        ]

    try:
        client = client_factory(context.settings.botocore_config())
    except Exception as error:
        return failed_all(f"cannot create an S3 client: {context.text(error)}", 0)
    try:
        _retrying(
            lambda _remaining: client.head_bucket(Bucket=uri.bucket),
            f"checking bucket {uri.bucket!r}",
            context,
            lambda error: bucket_error_text(error, uri.bucket, context.secrets),
        )
    except _Failed as failure:
        return failed_all(failure.message, failure.attempts)
    results = []
    for archive in archives:
        destination = uri.destination(host, archive.name)
        key = uri.key(host, archive.name)
        try:
            attempts = _retrying(
                _uploader(client, archive, uri.bucket, key, context),
                f"upload of {archive.name}",
                context,
                context.text,
            )
        except _Failed as failure:
            results.append(
                _result(
                    archive,
                    destination,
                    error=failure.message,
                    kept=archive.path,
                    attempts=failure.attempts,
                )
            )
            continue
        if not keep_local:
            with contextlib.suppress(OSError):
                archive.path.unlink()
        results.append(_result(archive, destination, attempts=attempts))
    return results


def _retrying(
    action: Callable[[float], object],
    what: str,
    context: _Context,
    describe: Callable[[BaseException], str],
) -> int:
    """Run `action(seconds left)` until it succeeds; return the attempts, or raise _Failed."""
    settings = context.settings
    attempt = 0
    while True:
        attempt += 1
        remaining = context.deadline - context.clock()
        try:
            if remaining <= 0:
                raise TimeoutError(f"no time left ({settings.timeout:g} s for the delivery)")
            action(remaining)
            return attempt
        except Exception as error:
            message = describe(error)
            if not is_retryable(error) or attempt >= settings.attempts:
                tries = f" (after {attempt} attempts)" if attempt > 1 else ""
                raise _Failed(message + tries, attempt) from None
            delay = backoff_delay(attempt, settings.backoff_base, settings.backoff_cap)
            if context.clock() + delay >= context.deadline:
                raise _Failed(
                    f"{message} (after {attempt} attempts; no time left for another within "
                    f"{settings.timeout:g} s)",
                    attempt,
                ) from None
            context.log(
                f"artifacts: {what} failed ({message}); attempt {attempt} of "
                f"{settings.attempts}, retrying in {delay:g} s"
            )
            context.sleep(delay)


def bucket_error_text(error: BaseException, bucket: str, secrets: Iterable[str]) -> str:
    """What HeadBucket's failure means, naming the bucket."""
    text = redact(error_text(error), secrets)
    if isinstance(error, ClientError):
        code, status = error_code(error), http_status(error)
        if code in ("404", "NoSuchBucket") or status == 404:
            return f"bucket {bucket!r} does not exist ({text})"
        if code in ("403", "AccessDenied") or status == 403:
            return f"access to bucket {bucket!r} is denied ({text}); check the permissions"
    return text


class _Done(BaseSubscriber):
    def __init__(self, done: threading.Event) -> None:
        self._done = done

    def on_done(self, future: object, **kwargs: object) -> None:
        self._done.set()


def _uploader(
    client: Client, archive: Archive, bucket: str, key: str, context: _Context
) -> Callable[[float], None]:
    return lambda remaining: _upload(client, archive, bucket, key, context, remaining)


def _upload(
    client: Client,
    archive: Archive,
    bucket: str,
    key: str,
    context: _Context,
    remaining: float,
) -> None:
    """One attempt: a single PUT or a multipart upload; s3transfer aborts a failed multipart."""
    done = threading.Event()
    manager = create_transfer_manager(client, context.settings.transfer_config())
    cancelled = False
    try:
        future = manager.upload(
            str(archive.path),
            bucket,
            key,
            extra_args={"ContentType": "application/gzip", "Metadata": {"sha256": archive.sha256}},
            subscribers=[_Done(done)],
        )
        if not done.wait(remaining):
            cancelled = True
            future.cancel()
            raise TimeoutError(
                f"not finished within the {context.settings.timeout:g} s of the delivery"
            )
        future.result()
    finally:
        manager.shutdown(cancel=cancelled)


def check_output_uri(
    uri: OutputUri,
    *,
    settings: TransferSettings | None = None,
    client_factory: ClientFactory = make_s3_client,
    secrets: Iterable[str] | None = None,
) -> None:
    """Before the job starts: the bucket exists and answers, or the directory can be made.

    Raises ConfigError(ringleader_output_uri, ...) naming the bucket or directory.
    """
    if uri.scheme == "file":
        problem = directory_problem(Path(uri.path))
        if problem:
            raise ConfigError(FIELD, f"{uri.path}: {problem}")
        return
    shown = tuple(secrets) if secrets is not None else secret_values(os.environ)
    settings = settings or TransferSettings(attempts=1)
    try:
        client = client_factory(settings.botocore_config())
        client.head_bucket(Bucket=uri.bucket)
    except Exception as error:
        raise ConfigError(FIELD, f"{uri}: {bucket_error_text(error, uri.bucket, shown)}") from None


def directory_problem(path: Path) -> str | None:
    """Why archives could not be written under `path`, or None."""
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None
