"""The one way this project makes a boto3 client.

Credentials come from boto3's default chain (environment, shared credentials file, container
or instance role); region and endpoint from the environment as boto3 reads them
(AWS_REGION / AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL) unless given.
`s3_endpoint` adds S3_ENDPOINT_URL, which sagemaker-training reads. Retries per request are
botocore's "standard" mode (throttling, 5xx, connection errors, with jittered backoff).
Imports boto3 (slow): import this module only where a client is made.
"""

import os
from collections.abc import Mapping
from typing import Any

import boto3
import botocore.config

Client = Any  # a boto3 client (the mypy_boto3_* stubs are not a runtime dependency)
DEFAULT_POOL = 10  # botocore's own default of max_pool_connections


def client_config(
    *,
    total_attempts: int,
    connect_timeout: float,
    read_timeout: float,
    max_pool_connections: int = DEFAULT_POOL,
) -> botocore.config.Config:
    """botocore's configuration: `total_attempts` tries of each request in "standard" mode."""
    return botocore.config.Config(
        retries={"mode": "standard", "total_max_attempts": total_attempts},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        max_pool_connections=max_pool_connections,
    )


def make_client(
    service: str,
    config: botocore.config.Config | None = None,
    *,
    region: str | None = None,
    endpoint_url: str | None = None,
    new_session: bool = False,
) -> Client:
    """A client of `service`; None for region or endpoint lets boto3 choose from its settings.

    By default the client comes from boto3's default session (what `boto3.client` uses).
    `new_session` makes it in a session of its own, which reads the credentials from the
    environment as it is now and is safe to use beside clients made on other threads.
    """
    # Any: boto3-stubs type `client` by literal service names only.
    factory: Any = boto3.session.Session().client if new_session else boto3.client
    return factory(service, region_name=region, endpoint_url=endpoint_url, config=config)


def s3_endpoint(environ: Mapping[str, str] = os.environ) -> str | None:
    """An S3 endpoint to pass to boto3 explicitly, or None to let boto3 choose.

    boto3 itself honours AWS_ENDPOINT_URL_S3 and AWS_ENDPOINT_URL (the SDK's v2 local mode sets
    the former); S3_ENDPOINT_URL is what sagemaker-training reads, used only when neither is set.
    """
    if environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL"):
        return None
    return environ.get("S3_ENDPOINT_URL") or None
