"""Delivery to S3 against moto (in-process; never AWS), with injected S3 errors.

Faults are botocore `before-send` handlers registered ahead of moto's own: for a chosen
operation they answer with an S3 error document instead of letting moto handle the request,
so botocore's retry logic, s3transfer's multipart abort and our outer retries all see what a
throttled or failing S3 would send.
"""

import hashlib
import io
import logging
import os
import subprocess
import tarfile
import threading
import time
import types

import boto3
import botocore.endpoint
import pytest
from botocore.awsrequest import AWSResponse
from moto import mock_aws
from moto.core.botocore_stubber import MockRawResponse

from ringleader.artifacts import (
    MANIFEST_NAME,
    TransferSettings,
    append_note,
    check_output_uri,
    collect,
    parse_output_uri,
    verify_archive,
)
from ringleader.core.errors import ConfigError
from ringleader.output import log as toolkit_log

REGION = "us-east-1"
BUCKET = "ringleader-artifacts"
MIB = 1024 * 1024
# Multipart from 1 MiB in 5 MiB parts (S3's minimum part size), no waiting between attempts.
FAST = TransferSettings(
    attempts=3,
    request_attempts=1,
    backoff_base=1.0,
    multipart_threshold=1 * MIB,
    multipart_chunksize=5 * MIB,
    timeout=60.0,
)
SECRETS = {
    "AWS_ACCESS_KEY_ID": "AKIAFAKESECRETKEYID99",
    "AWS_SECRET_ACCESS_KEY": "fake/Secret+Access/Key0123456789abcdefXYZ",
    "AWS_SESSION_TOKEN": "FakeSessionTokenThatMustNeverBePrinted",
}


class FakeTime:
    """A monotonic clock that only moves when sleep() is called."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Fault:
    """Refuse `operation` with an S3 error `times` times (None: always), before any request.

    A `before-call` handler: the call never reaches moto (no side effect) nor botocore's
    own retries, so each refusal is one failed attempt of the outer retry.
    """

    event = "before-call"

    def __init__(self, operation, status, code, message="injected", times=None):
        self.operation, self.status, self.code = operation, status, code
        self.message, self.times = message, times
        self.calls = 0
        self.lock = threading.Lock()

    def fire(self) -> bool:
        with self.lock:
            self.calls += 1
            return self.times is None or self.calls <= self.times

    def __call__(self, **_kwargs):
        if not self.fire():
            return None
        parsed = {
            "Error": {"Code": self.code, "Message": self.message},
            "ResponseMetadata": {"HTTPStatusCode": self.status, "HTTPHeaders": {}},
        }
        return AWSResponse(
            "https://s3.amazonaws.com/", self.status, {}, MockRawResponse(b"")
        ), parsed


class SendFault(Fault):
    """An error answer at the HTTP layer: botocore parses it and its retry logic sees it."""

    event = "before-send"

    def __call__(self, request, **_kwargs):
        if not self.fire():
            return None
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            f"<Error><Code>{self.code}</Code><Message>{self.message}</Message></Error>"
        )
        headers = {"Content-Type": "application/xml", "Content-Length": str(len(body))}
        return AWSResponse(request.url, self.status, headers, MockRawResponse(body))


class Stall(Fault):
    """A request of `operation` hangs for `seconds` before moto answers it."""

    event = "before-send"

    def __init__(self, operation, seconds, times=None):
        super().__init__(operation, 0, "", times=times)
        self.seconds = seconds

    def __call__(self, **_kwargs):
        if self.fire():
            time.sleep(self.seconds)


_shared = {}


def factory(*faults, fresh=False):
    """Clients with faults; one shared session (loading S3's model takes 0.2 s) unless fresh."""

    def make(config):
        if fresh:
            session = boto3.session.Session()  # credentials from the environment as it is now
        elif "session" in _shared:
            session = _shared["session"]
        else:
            session = _shared["session"] = boto3.session.Session()
        client = session.client("s3", region_name=REGION, config=config)
        for fault in faults:
            client.meta.events.register_first(f"{fault.event}.s3.{fault.operation}", fault)
        return client

    return make


@pytest.fixture
def s3(monkeypatch):
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
    with mock_aws():
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket=BUCKET)
        yield client


@pytest.fixture
def job(tmp_path):
    """An output and a model directory on host algo-1; small archives (one PutObject each)."""
    output, model = tmp_path / "output", tmp_path / "model"
    (output / "data" / "algo-1").mkdir(parents=True)
    (output / "data" / "algo-1" / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n')
    (output / "failure").write_text("Rank 1 on host algo-1 exited with code 3.\n")
    model.mkdir()
    (model / "config.json").write_text('{"layers": 2}')
    return types.SimpleNamespace(output=output, model=model, work=tmp_path / "work")


@pytest.fixture
def big_job(job):
    """The same job with a model.tar.gz above 5 MiB: uploaded in two parts with FAST."""
    weights = os.urandom(6 * MIB)  # incompressible
    (job.model / "weights.bin").write_bytes(weights)
    job.weights_sha256 = hashlib.sha256(weights).hexdigest()
    return job


def run(
    job, uri="s3://ringleader-artifacts/runs/7", *faults, settings=FAST, clock=None, fresh=False
):
    clock = clock or FakeTime()
    lines: list[str] = []
    report = collect(
        job.output,
        job.model,
        parse_output_uri(uri),
        "algo-1",
        work_dir=job.work,
        settings=settings,
        client_factory=factory(*faults, fresh=fresh),
        sleep=clock.sleep,
        clock=clock.monotonic,
        log=lines.append,
    )
    return report, lines, clock


def keys(s3):
    return sorted(item["Key"] for item in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []))


def test_both_archives_go_to_prefix_host_name_and_model_in_parts(s3, big_job, tmp_path):
    job = big_job
    report, lines, _ = run(job)
    assert report.ok, report.summary_lines()
    assert keys(s3) == ["runs/7/algo-1/model.tar.gz", "runs/7/algo-1/output.tar.gz"]
    model = s3.head_object(Bucket=BUCKET, Key="runs/7/algo-1/model.tar.gz")
    output = s3.head_object(Bucket=BUCKET, Key="runs/7/algo-1/output.tar.gz")
    assert model["ETag"].endswith('-2"')  # a multipart upload of two parts
    assert "-" not in output["ETag"]  # small: one PutObject
    results = {result.name: result for result in report.results}
    assert model["ContentLength"] == results["model.tar.gz"].size
    assert model["Metadata"] == {"sha256": results["model.tar.gz"].sha256}
    assert [r.destination for r in report.results] == [
        f"s3://{BUCKET}/runs/7/algo-1/output.tar.gz",
        f"s3://{BUCKET}/runs/7/algo-1/model.tar.gz",
    ]
    assert not list(job.work.iterdir())  # delivered: nothing left locally
    assert lines == []  # no retries to report

    body = s3.get_object(Bucket=BUCKET, Key="runs/7/algo-1/model.tar.gz")["Body"].read()
    assert hashlib.sha256(body).hexdigest() == results["model.tar.gz"].sha256
    downloaded = tmp_path / "downloaded.tar.gz"
    downloaded.write_bytes(body)
    assert verify_archive(downloaded) == []
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        manifest = tar.extractfile(MANIFEST_NAME).read().decode()
        tar.extractall(tmp_path / "extracted", filter="tar")
    assert f"{job.weights_sha256}  weights.bin\n" in manifest
    check = subprocess.run(
        ["sha256sum", "-c", MANIFEST_NAME], cwd=tmp_path / "extracted", capture_output=True
    )
    assert check.returncode == 0 and check.stdout.count(b": OK") == 2


def test_bucket_without_prefix(s3, job):
    report, _, _ = run(job, f"s3://{BUCKET}")
    assert report.ok
    assert keys(s3) == ["algo-1/model.tar.gz", "algo-1/output.tar.gz"]


def test_missing_bucket_is_named_and_archives_are_kept(s3, job):
    report, _, clock = run(job, "s3://no-such-bucket-here/x")
    assert not report.ok
    for result in report.results:
        assert result.error == "bucket 'no-such-bucket-here' does not exist (HTTP 404 Not Found)"
        assert result.kept == job.work / result.name and verify_archive(result.kept) == []
        assert result.attempts == 1
    assert clock.sleeps == []  # a missing bucket is not retried
    note = report.failure_note()
    assert "bucket 'no-such-bucket-here' does not exist" in note
    assert str(job.work / "model.tar.gz") in note


def test_check_before_the_job_names_a_missing_bucket(s3):
    check_output_uri(parse_output_uri(f"s3://{BUCKET}/p"), client_factory=factory())
    with pytest.raises(ConfigError) as caught:
        check_output_uri(parse_output_uri("s3://missing-bucket/p"), client_factory=factory())
    assert str(caught.value) == (
        "Configuration error in ringleader_output_uri: s3://missing-bucket/p: "
        "bucket 'missing-bucket' does not exist (HTTP 404 Not Found)"
    )


def test_slowdown_twice_then_success_with_outer_retries(s3, big_job):
    fault = Fault(
        "CreateMultipartUpload", 503, "SlowDown", "Please reduce your request rate.", times=2
    )
    report, lines, clock = run(big_job, "s3://ringleader-artifacts/runs/7", fault)
    assert report.ok, report.summary_lines()
    model = report.results[1]
    assert model.attempts == 3 and report.results[0].attempts == 1
    assert clock.sleeps == [1.0, 2.0]
    assert lines == [
        "artifacts: upload of model.tar.gz failed (SlowDown: Please reduce your request rate. "
        f"(HTTP 503)); attempt {n} of 3, retrying in {delay} s"
        for n, delay in ((1, 1), (2, 2))
    ]
    assert "after 3 attempts" in report.summary_lines()[1]
    assert s3.head_object(Bucket=BUCKET, Key="runs/7/algo-1/model.tar.gz")["ETag"].endswith('-2"')
    assert s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []


def test_retries_go_to_the_toolkit_log_by_default(s3, job, capsys, monkeypatch):
    """As the entry point calls it (`log=` the toolkit's log): each retry is a
    `[ringleader <host>]` line."""
    monkeypatch.setattr("ringleader.output.log._host", "algo-1")
    fault = SendFault("PutObject", 503, "SlowDown", "Please reduce your request rate.", times=1)
    clock = FakeTime()
    report = collect(
        job.output,
        job.model,
        parse_output_uri("s3://ringleader-artifacts/runs/7"),
        "algo-1",
        work_dir=job.work,
        settings=FAST,  # request_attempts=1: botocore does not retry, the outer retry does
        client_factory=factory(fault),
        sleep=clock.sleep,
        clock=clock.monotonic,
        log=toolkit_log.log,
    )
    assert report.ok, report.summary_lines()
    assert [result.attempts for result in report.results] == [2, 1]
    assert clock.sleeps == [1.0]
    logged = [line for line in capsys.readouterr().out.splitlines() if "artifacts:" in line]
    assert len(logged) == 1, logged
    assert logged[0].startswith("[ringleader algo-1] ")
    assert logged[0].endswith(
        "artifacts: upload of output.tar.gz failed (SlowDown: Please reduce your request rate. "
        "(HTTP 503)); attempt 1 of 3, retrying in 1 s"
    )


def test_botocore_retries_each_request_itself(s3, job, monkeypatch):
    """With botocore's standard mode on, two 503s on one PUT never reach the outer retry."""
    botocore_sleeps: list[float] = []
    monkeypatch.setattr(
        botocore.endpoint, "time", types.SimpleNamespace(sleep=botocore_sleeps.append)
    )
    fault = SendFault("PutObject", 503, "SlowDown", times=2)
    settings = TransferSettings(attempts=1, request_attempts=3)
    report, lines, clock = run(job, "s3://ringleader-artifacts/runs/7", fault, settings=settings)
    assert report.ok, report.summary_lines()
    assert fault.calls == 4  # output: 2 failures + 1 success; model: 1 success
    assert len(botocore_sleeps) == 2 and clock.sleeps == [] and lines == []
    assert [result.attempts for result in report.results] == [1, 1]


def test_botocore_attempts_are_total_attempts(s3, job, monkeypatch):
    """request_attempts=2 means two HTTP requests in all (botocore's total_max_attempts)."""
    monkeypatch.setattr(botocore.endpoint, "time", types.SimpleNamespace(sleep=lambda _s: None))
    fault = SendFault("PutObject", 503, "SlowDown", "reduce", times=2)
    settings = TransferSettings(attempts=1, request_attempts=2)
    report, _, _ = run(job, "s3://ringleader-artifacts/runs/7", fault, settings=settings)
    output, model = report.results
    assert output.error == "SlowDown: reduce (HTTP 503)" and output.attempts == 1
    assert model.delivered
    assert fault.calls == 3


def test_always_failing_upload_is_reported_and_keeps_the_archive(s3, big_job):
    job = big_job
    fault = Fault("UploadPart", 500, "InternalError", "We encountered an internal error.")
    report, lines, clock = run(job, "s3://ringleader-artifacts/runs/7", fault)
    output, model = report.results
    assert output.delivered and not model.delivered
    assert model.error == (
        "InternalError: We encountered an internal error. (HTTP 500) (after 3 attempts)"
    )
    assert model.attempts == 3 and clock.sleeps == [1.0, 2.0] and len(lines) == 2
    assert model.kept == job.work / "model.tar.gz" and verify_archive(model.kept) == []
    assert keys(s3) == ["runs/7/algo-1/output.tar.gz"]  # no partial object
    assert s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []  # aborted
    assert sorted(path.name for path in job.work.iterdir()) == ["model.tar.gz"]


def test_failure_note_goes_to_the_failure_file_after_the_cause(s3, job):
    fault = Fault("PutObject", 403, "AccessDenied", "Access Denied")
    report, _, clock = run(job, "s3://ringleader-artifacts/runs/7", fault)
    assert clock.sleeps == []  # AccessDenied is not retried
    assert report.results[0].error == "AccessDenied: Access Denied (HTTP 403)"
    failure = job.output / "failure"
    append_note(failure, report.failure_note())
    text = failure.read_text()
    assert text.startswith("Rank 1 on host algo-1 exited with code 3.\nArtifacts of host algo-1")
    assert "output.tar.gz and model.tar.gz: AccessDenied: Access Denied (HTTP 403)." in text
    assert f"Kept at {job.work / 'output.tar.gz'}, {job.work / 'model.tar.gz'}." in text


def test_head_bucket_throttled_then_answers(s3, job):
    fault = Fault("HeadBucket", 503, "SlowDown", times=2)
    report, _, clock = run(job, "s3://ringleader-artifacts/runs/7", fault)
    assert report.ok and clock.sleeps == [1.0, 2.0]


def test_no_new_attempt_after_the_deadline(s3, job):
    fault = Fault("PutObject", 503, "SlowDown")
    settings = TransferSettings(attempts=10, request_attempts=1, backoff_base=4.0, timeout=10.0)
    report, _, clock = run(job, "s3://ringleader-artifacts/runs/7", fault, settings=settings)
    # output: fails at 0 s, waits 4 s, fails; 8 s more would pass the 10 s. model: fails at
    # 4 s, waits 4 s, fails; no time for another.
    assert clock.sleeps == [4.0, 4.0] and clock.now - 1000.0 <= 10.0
    for result in report.results:
        assert not result.delivered and result.attempts == 2
        assert result.error == (
            "SlowDown: injected (HTTP 503) (after 2 attempts; no time left for another within 10 s)"
        )


def test_a_stalled_upload_is_abandoned_at_the_deadline(s3, job):
    stall = Stall("PutObject", 4.0, times=1)  # the first PUT hangs for 4 s
    # The fake clock does not move, so the model's upload has the whole 2 s of real time: a
    # shorter deadline failed it on a loaded machine (2 cores busy with image builds).
    settings = TransferSettings(attempts=3, request_attempts=1, timeout=2.0)
    started = time.monotonic()
    report, _, clock = run(job, "s3://ringleader-artifacts/runs/7", stall, settings=settings)
    assert time.monotonic() - started < 10
    output, model = report.results
    assert not output.delivered and output.attempts == 1 and clock.sleeps == []
    assert output.error == "not finished within the 2 s of the delivery"
    assert output.kept is not None and verify_archive(output.kept) == []
    assert model.delivered  # the fake clock did not move: time was left for it


def test_credentials_never_appear_in_messages_or_logs(s3, job, monkeypatch, caplog, capsys):
    os.environ.update(SECRETS)  # mock_aws put its own keys in; restored when it exits
    caplog.set_level(logging.INFO)
    leaky = f"The AWS Access Key Id {SECRETS['AWS_ACCESS_KEY_ID']} is not allowed"
    texts: list[str] = []
    scenarios = [
        ("s3://no-such-bucket-here/p", ()),
        ("s3://ringleader-artifacts/p", (Fault("PutObject", 403, "InvalidAccessKeyId", leaky),)),
        ("s3://ringleader-artifacts/p", (SendFault("PutObject", 503, "SlowDown", leaky),)),
        (
            "s3://ringleader-artifacts/p",
            (Fault("HeadBucket", 400, "SignatureDoesNotMatch", leaky),),
        ),
    ]
    for uri, faults in scenarios:
        report, lines, _ = run(job, uri, *faults, fresh=True)  # signs with the fake secrets
        assert not report.ok
        texts += [*lines, *report.summary_lines(), report.failure_note()]
        texts += [result.error or "" for result in report.results]
    with pytest.raises(ConfigError) as caught:
        check_output_uri(
            parse_output_uri("s3://ringleader-artifacts/p"),
            client_factory=factory(
                Fault("HeadBucket", 403, "InvalidAccessKeyId", leaky), fresh=True
            ),
        )
    texts.append(str(caught.value))
    captured = capsys.readouterr()
    texts += [captured.out, captured.err, caplog.text]
    texts += [record.getMessage() for record in caplog.records]
    joined = "\n".join(texts)
    assert "InvalidAccessKeyId" in joined and "***" in joined  # the leaky text was seen
    for name, secret in SECRETS.items():
        assert secret not in joined, name
