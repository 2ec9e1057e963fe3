"""Bad user code through the SDK's local mode: one clear failure file naming the problem on
every host, exit code 78 everywhere, and fit() raises.

The code is an s3:// sourcedir tarball on moto's S3 server (reached by the containers through
the Docker gateway), the way a generic Estimator passes sagemaker_submit_directory.
"""

import re
import tarfile

import pytest

from tests.sdk.conftest import assert_hosts_agree, sourcedir_tarball

pytestmark = [pytest.mark.sdk, pytest.mark.container]

BUCKET = "ringleader-code"


def member(name: str, kind: bytes = tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    info.size = 1 if kind == tarfile.REGTYPE else 0
    return info


def corrupt(data: bytes) -> bytes:
    return data[: len(data) // 2]


# case: (bucket/key or None for the default, tarball recipe, program, field, expected text)
CASES = {
    "missing bucket": (
        "ringleader-no-such-bucket/jobs/sourcedir.tar.gz",
        None,
        "train.py",
        "sagemaker_submit_directory",
        "s3://ringleader-no-such-bucket/jobs/sourcedir.tar.gz: the bucket "
        "'ringleader-no-such-bucket' does not exist",
    ),
    "missing key": (
        f"{BUCKET}/jobs/never-uploaded/sourcedir.tar.gz",
        None,
        "train.py",
        "sagemaker_submit_directory",
        f"s3://{BUCKET}/jobs/never-uploaded/sourcedir.tar.gz: no object "
        f"'jobs/never-uploaded/sourcedir.tar.gz' in the bucket '{BUCKET}'",
    ),
    "path traversal": (
        None,
        {"extra": [member("../../escape.py")]},
        "train.py",
        "sagemaker_submit_directory",
        "has unsafe members, nothing was extracted: '../../escape.py' has a '..' component",
    ),
    "absolute path": (
        None,
        {"extra": [member("/etc/cron.d/ringleader")]},
        "train.py",
        "sagemaker_submit_directory",
        "'/etc/cron.d/ringleader' is an absolute path",
    ),
    "symlink out of the code": (
        None,
        {"extra": [member("data", tarfile.SYMTYPE, "../../../etc")]},
        "train.py",
        "sagemaker_submit_directory",
        "'data' is a symlink to ../../../etc, outside the code",
    ),
    "corrupt tarball": (
        None,
        {"corrupt": True},
        "train.py",
        "sagemaker_submit_directory",
        "is not a valid (gzip-compressed) tar archive",
    ),
    "requirements.txt cannot be installed": (
        None,
        {"requirements": "--no-index\nringleader-no-such-package==9.9\n"},
        "train.py",
        "requirements.txt",
        "pip could not install requirements.txt (exit code 1); pip said:",
    ),
    "entry point not in the code": (
        None,
        {},
        "nope.py",
        "sagemaker_program",
        "'nope.py' not found in the code directory /opt/ml/code (extracted from s3://",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_code_fails_every_host_with_78_naming_it(s3_job, code_dir, case):
    location, recipe, program, field, text = CASES[case]
    slug = re.sub(r"[^a-z0-9]+", "-", case)
    uri = f"s3://{location or f'{BUCKET}/jobs/{slug}/sourcedir.tar.gz'}"
    tarball = None
    if recipe is not None:
        code = code_dir(requirements=recipe.get("requirements"))
        tarball = sourcedir_tarball(code, recipe.get("extra"))
        if recipe.get("corrupt"):
            tarball = corrupt(tarball)

    job = s3_job(uri, tarball, program=program, rounds=1)

    assert isinstance(job.error, RuntimeError), job.error
    assert str(job.error).endswith("Process exited with code: 78")
    assert_hosts_agree(job, 78, f"Configuration error in {field}: ")
    for host in job.hosts:
        failure = job.snapshots[host].text("failure")
        assert text in failure, f"{host}: {failure}"
        assert failure.startswith("Host algo-"), failure
    failure = job.output_tar()["failure"].decode()
    assert f"Configuration error in {field}: " in failure and text in failure
    if case == "requirements.txt cannot be installed":
        assert "ringleader-no-such-package" in failure
