"""ringleader.aws: S3 URIs and bucket names, redaction, retry rules and error text, clients."""

import boto3
import pytest
from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
)
from moto import mock_aws

from ringleader.aws import client as aws_client
from ringleader.aws.errors import backoff_delay, error_text, is_retryable
from ringleader.aws.redact import redact, secret_values
from ringleader.aws.uri import (
    S3UriError,
    bucket_name_problem,
    parse_s3_object_uri,
    split_s3_uri,
)

# ---------------------------------------------------------------------------- URIs, buckets


def test_split_s3_uri():
    assert split_s3_uri("s3://b/p/k") == ("b", "p/k")
    assert split_s3_uri("S3://b") == ("b", "")
    assert split_s3_uri("s3:///k") == ("", "k")
    with pytest.raises(S3UriError, match="does not start with s3://"):
        split_s3_uri("b/k")


def test_parse_s3_object_uri():
    assert parse_s3_object_uri("s3://b/p/sourcedir.tar.gz") == ("b", "p/sourcedir.tar.gz")
    for bad, text in [
        ("s3:///key", "has no bucket name"),
        ("s3://bucket", "must name an object"),
        ("s3://bucket/prefix/", "must name an object"),
    ]:
        with pytest.raises(S3UriError, match=text):
            parse_s3_object_uri(bad)
    with pytest.raises(S3UriError, match="must name a tarball"):
        parse_s3_object_uri("s3://bucket", "a tarball")


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("my-bucket.1", None),
        ("ab", "must be 3 to 63 characters long, not 2"),
        ("a" * 64, "must be 3 to 63 characters long, not 64"),
        ("My_Bucket", "only lower-case letters"),
        ("-bucket", "only lower-case letters"),
        ("a..b", "two dots in a row"),
        ("192.168.1.1", "looks like an IP address"),
    ],
)
def test_bucket_name_rules(name, problem):
    found = bucket_name_problem(name)
    assert found == problem if problem is None else found is not None and problem in found


# ---------------------------------------------------------------------- errors and redaction


def client_error(code, status, message="msg"):
    return ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "PutObject",
    )


@pytest.mark.parametrize(
    ("error", "retry"),
    [
        (client_error("SlowDown", 503), True),
        (client_error("Throttling", 400), True),
        (client_error("InternalError", 500), True),
        (client_error("ServiceUnavailable", 503), True),
        (client_error("BadGateway", 502), True),
        (client_error("RequestTimeout", 400), True),
        (client_error("BadDigest", 400), True),
        (client_error("TooManyRequests", 429), True),
        (client_error("AccessDenied", 403), False),
        (client_error("NoSuchBucket", 404), False),
        (client_error("InvalidAccessKeyId", 403), False),
        (EndpointConnectionError(endpoint_url="https://s3.amazonaws.com"), True),
        (ConnectTimeoutError(endpoint_url="https://s3.amazonaws.com"), True),
        (NoCredentialsError(), False),
        (ParamValidationError(report="bad"), False),
        (FileNotFoundError(2, "No such file or directory"), False),
    ],
)
def test_which_errors_are_retried(error, retry):
    assert is_retryable(error) is retry


def test_backoff_doubles_up_to_the_cap():
    assert [backoff_delay(n, 1.0, 10.0) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    assert backoff_delay(1, 0.25, 30.0) == 0.25


def test_error_text_is_short_and_names_the_code():
    assert error_text(client_error("SlowDown", 503, "Please reduce your request rate.")) == (
        "SlowDown: Please reduce your request rate. (HTTP 503)"
    )
    assert error_text(client_error("404", 404, "Not Found")) == "HTTP 404 Not Found"
    assert "no usable AWS credentials" in error_text(NoCredentialsError())
    assert error_text(PermissionError(13, "Permission denied", "/x")) == "Permission denied (/x)"


def test_redaction_masks_every_credential_variable():
    environ = {
        "AWS_ACCESS_KEY_ID": "AKIAFAKE",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t/value",
        "AWS_SESSION_TOKEN": "tok",  # too short to redact without damaging ordinary text
        "HOME": "/root",
    }
    secrets = secret_values(environ)
    assert set(secrets) == {"AKIAFAKE", "s3cr3t/value"}
    assert redact("key AKIAFAKE secret s3cr3t/value home /root", secrets) == (
        "key *** secret *** home /root"
    )


# ------------------------------------------------------------------------------- clients


def test_s3_endpoint_prefers_boto3s_own_variables():
    assert aws_client.s3_endpoint({}) is None
    assert aws_client.s3_endpoint({"S3_ENDPOINT_URL": "http://a"}) == "http://a"
    both = {"S3_ENDPOINT_URL": "http://a", "AWS_ENDPOINT_URL_S3": "http://b"}
    assert aws_client.s3_endpoint(both) is None  # boto3 reads AWS_ENDPOINT_URL_S3 itself
    assert aws_client.s3_endpoint({"S3_ENDPOINT_URL": "http://a", "AWS_ENDPOINT_URL": "x"}) is None


def test_client_config_is_botocores_standard_mode():
    config = aws_client.client_config(total_attempts=4, connect_timeout=1.0, read_timeout=2.0)
    assert config.retries == {"mode": "standard", "total_max_attempts": 4}
    assert (config.connect_timeout, config.read_timeout) == (1.0, 2.0)
    assert config.max_pool_connections == 10


@pytest.fixture
def credentials(monkeypatch):
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")


def test_make_client_uses_the_default_session_unless_asked(credentials, monkeypatch):
    made = []

    def record(self, service, **kwargs):
        made.append((self is boto3.DEFAULT_SESSION, service, kwargs["region_name"]))
        return object()

    boto3.setup_default_session()
    monkeypatch.setattr(boto3.session.Session, "client", record)
    aws_client.make_client("cloudformation", region="eu-west-1")
    aws_client.make_client("s3", new_session=True)
    assert made == [(True, "cloudformation", "eu-west-1"), (False, "s3", None)]


def test_make_client_endpoint_and_config(credentials):
    config = aws_client.client_config(total_attempts=2, connect_timeout=1.0, read_timeout=1.0)
    with mock_aws():
        client = aws_client.make_client("s3", config, endpoint_url="http://127.0.0.1:9")
    assert client.meta.endpoint_url == "http://127.0.0.1:9"
    assert client.meta.region_name == "us-west-2"
    assert client.meta.config.retries["total_max_attempts"] == 2
