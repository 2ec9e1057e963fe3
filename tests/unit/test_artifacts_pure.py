"""The pure parts of ringleader.artifacts: output URI, manifest, report text.

Retry rules, error text and redaction are ringleader.aws's: see test_aws.py."""

import pytest

from ringleader.artifacts.archive import Skipped
from ringleader.artifacts.manifest import manifest_line, manifest_text, parse_manifest
from ringleader.artifacts.report import ArchiveResult, DeliveryReport, append_note
from ringleader.config.output_uri import OutputUri, parse_output_uri, path_component
from ringleader.core import exitcodes
from ringleader.core.errors import ConfigError

DIGEST_A = "a" * 64
DIGEST_B = "b" * 64


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("s3://bucket", OutputUri("s3", bucket="bucket")),
        ("s3://my.bucket-1/a/b/", OutputUri("s3", bucket="my.bucket-1", prefix="a/b")),
        ("S3://bucket//deep/prefix", OutputUri("s3", bucket="bucket", prefix="deep/prefix")),
        ("  s3://bucket/x  ", OutputUri("s3", bucket="bucket", prefix="x")),
        ("file:///tmp/out", OutputUri("file", path="/tmp/out")),
        ("file://localhost/tmp/out/", OutputUri("file", path="/tmp/out")),
        ("file:///tmp/my%20dir", OutputUri("file", path="/tmp/my dir")),
        ("/srv/out/../artifacts", OutputUri("file", path="/srv/artifacts")),
        ("//srv/out", OutputUri("file", path="/srv/out")),
    ],
)
def test_output_uri_accepted(text, expected):
    assert parse_output_uri(text) == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "empty"),
        ("gs://bucket/x", "unknown scheme 'gs'"),
        ("https://example.com/out", "unknown scheme 'https'"),
        ("hdfs://namenode/out", "unknown scheme 'hdfs'"),
        ("output/dir", "relative path"),
        ("~/out", "relative path"),
        ("C:\\out", "not a URI"),
        ("s3://", "no bucket name"),
        ("s3:///prefix", "no bucket name"),
        ("s3://ab", "3 to 63 characters"),
        ("s3://" + "b" * 64, "3 to 63 characters"),
        ("s3://My_Bucket/x", "lower-case"),
        ("s3://-bucket", "lower-case"),
        ("s3://a..b", "two dots"),
        ("s3://192.168.1.10/x", "IP address"),
        ("file://otherhost/tmp/x", "must be local"),
        ("file://", "no path"),
        ("/tmp/a\x00b", "NUL"),
    ],
)
def test_output_uri_rejected_with_what_was_expected(text, words):
    with pytest.raises(ConfigError) as caught:
        parse_output_uri(text)
    error = caught.value
    assert error.field == "ringleader_output_uri"
    assert error.exit_code == exitcodes.CONFIG_ERROR
    assert words in str(error)
    assert str(error).startswith("Configuration error in ringleader_output_uri: ")


def test_output_uri_with_credentials_is_rejected_without_showing_them():
    with pytest.raises(ConfigError) as caught:
        parse_output_uri("s3://AKIAEXAMPLE:wJalrSecret@bucket/prefix")
    message = str(caught.value)
    assert "credentials do not belong" in message
    assert "AKIAEXAMPLE" not in message and "wJalrSecret" not in message


def test_unknown_scheme_message_lists_the_accepted_forms():
    with pytest.raises(ConfigError) as caught:
        parse_output_uri("ftp://server/out")
    assert "s3://bucket[/prefix], file:///absolute/path or an absolute path" in str(caught.value)


def test_each_host_gets_its_own_key_and_path():
    s3 = parse_output_uri("s3://bucket/runs/7")
    assert s3.key("algo-1", "model.tar.gz") == "runs/7/algo-1/model.tar.gz"
    assert s3.destination("algo-2", "output.tar.gz") == "s3://bucket/runs/7/algo-2/output.tar.gz"
    assert parse_output_uri("s3://bucket").key("algo-1-x1y2z", "model.tar.gz") == (
        "algo-1-x1y2z/model.tar.gz"
    )
    local = parse_output_uri("/srv/out")
    assert local.destination("algo-3", "model.tar.gz") == "/srv/out/algo-3/model.tar.gz"
    hosts = [f"algo-{n}" for n in range(1, 5)]
    assert len({s3.key(host, "model.tar.gz") for host in hosts}) == len(hosts)
    assert str(s3) == "s3://bucket/runs/7" and str(local) == "/srv/out"


@pytest.mark.parametrize(
    ("name", "safe"),
    [("algo-1", "algo-1"), ("ip-10-0-0-1.ec2", "ip-10-0-0-1.ec2"), ("a/b", "a_b"), ("..", "_..")],
)
def test_host_names_are_single_path_segments(name, safe):
    assert path_component(name) == safe


def test_manifest_lines_are_sorted_in_sha256sum_format():
    text = manifest_text([("b/x.bin", DIGEST_B), ("a.txt", DIGEST_A)])
    assert text == f"{DIGEST_A}  a.txt\n{DIGEST_B}  b/x.bin\n"
    assert manifest_text([]) == ""


def test_manifest_escapes_names_like_gnu_sha256sum():
    assert manifest_line("a\\b", DIGEST_A) == f"\\{DIGEST_A}  a\\\\b\n"
    assert manifest_line("new\nline", DIGEST_A) == f"\\{DIGEST_A}  new\\nline\n"
    assert manifest_line("cr\rhere", DIGEST_A) == f"\\{DIGEST_A}  cr\\rhere\n"


def test_manifest_parses_back():
    entries = {"plain.txt": DIGEST_A, "odd\\name\nwith\rall": DIGEST_B, "sp ace": DIGEST_A}
    assert parse_manifest(manifest_text(entries.items())) == entries
    with pytest.raises(ValueError, match="line 1"):
        parse_manifest("not a manifest line\n")


def result(name, error=None, **fields):
    defaults = {
        "destination": f"s3://b/p/algo-1/{name}",
        "size": 3 * 1024 * 1024,
        "sha256": DIGEST_A,
        "files": 2,
        "attempts": 1,
    }
    defaults.update(fields)
    return ArchiveResult(name=name, error=error, **defaults)


def test_summary_names_destination_size_and_digest():
    report = DeliveryReport(
        "s3://b/p",
        "algo-1",
        (result("output.tar.gz", files=1), result("model.tar.gz", attempts=3)),
    )
    assert report.ok
    assert report.summary_lines() == [
        f"artifacts: output.tar.gz (1 file, 3.0 MiB, sha256 {DIGEST_A}) -> "
        "s3://b/p/algo-1/output.tar.gz",
        f"artifacts: model.tar.gz (2 files, 3.0 MiB, sha256 {DIGEST_A}) -> "
        "s3://b/p/algo-1/model.tar.gz after 3 attempts",
    ]
    assert report.failure_note() == ""


SLOW_DOWN_AFTER_4 = "SlowDown: reduce (HTTP 503) (after 4 attempts)"


def test_summary_and_note_name_the_error_and_the_kept_archive(tmp_path):
    kept = tmp_path / "model.tar.gz"
    report = DeliveryReport(
        "s3://b/p",
        "algo-2",
        (
            result("output.tar.gz", skipped=tuple(Skipped(f"s{n}", "socket") for n in range(7))),
            result(
                "model.tar.gz", error="SlowDown: reduce (HTTP 503) (after 4 attempts)", kept=kept
            ),
        ),
    )
    assert not report.ok
    lines = report.summary_lines()
    assert lines[1] == (
        "artifacts: output.tar.gz left out s0 (socket), s1 (socket), s2 (socket), "
        "s3 (socket), s4 (socket) and 2 more"
    )
    assert lines[2] == (
        "artifacts: model.tar.gz NOT delivered to s3://b/p/algo-1/model.tar.gz: "
        f"SlowDown: reduce (HTTP 503) (after 4 attempts); kept at {kept}"
    )
    note = report.failure_note()
    assert note == (
        "Artifacts of host algo-2 were not delivered to s3://b/p (the job's exit code is "
        "unchanged). model.tar.gz: SlowDown: reduce (HTTP 503) (after 4 attempts). "
        f"Kept at {kept}.\n"
    )


def test_same_error_is_said_once_for_both_archives():
    report = DeliveryReport(
        "s3://nope",
        "algo-1",
        tuple(
            result(name, error="bucket 'nope' does not exist (HTTP 404 Not Found)", kept=None)
            for name in ("output.tar.gz", "model.tar.gz")
        ),
    )
    note = report.failure_note()
    assert note.count("does not exist") == 1
    assert "output.tar.gz and model.tar.gz: bucket 'nope' does not exist" in note
    assert len(note.encode()) < 400


def test_note_goes_after_the_jobs_own_failure_text(tmp_path):
    failure = tmp_path / "failure"
    failure.write_text("Rank 3 on host algo-2 exited with code 3.\nlast stderr line")
    append_note(failure, "Artifacts of host algo-1 were not delivered.\n")
    assert failure.read_text() == (
        "Rank 3 on host algo-2 exited with code 3.\nlast stderr line\n"
        "Artifacts of host algo-1 were not delivered.\n"
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["failure"]


def test_a_job_that_succeeded_gets_no_failure_file_beside_success(tmp_path):
    """Issue 23: the note of a failed delivery never creates `failure` next to `success`."""
    (tmp_path / "success").write_text("")
    assert append_note(tmp_path / "failure", "") is False
    assert append_note(tmp_path / "failure", "Artifacts ...\n") is False
    assert sorted(path.name for path in tmp_path.iterdir()) == ["success"]
