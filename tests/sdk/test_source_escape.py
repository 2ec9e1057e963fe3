"""A sourcedir tarball that escapes the code directory, run as a user ran it: SDK local mode,
3 hosts, the tarball on (moto's) S3, so /opt/ml/code is the image's own writable directory
and /opt/ml/output each host's mounted output. Before the fix every host wrote
/opt/ml/output/victim.txt and the job exited 0; now every host refuses the tarball before
writing anything (exit 78) and its failure file names the members.
"""

import tarfile

import pytest

from tests.sdk.conftest import assert_hosts_agree, sourcedir_tarball
from tests.sdk.test_sdk_bad_input import BUCKET, member

pytestmark = [pytest.mark.sdk, pytest.mark.container]

# code/x/b leads to code itself, so x/b/.. is /opt/ml, whatever the text of the path says; f
# is then written through the symlink f, and h, a hard link made through f, is written too.
ESCAPING = [
    member("x", tarfile.DIRTYPE),
    member("x/b", tarfile.SYMTYPE, ".."),
    member("f", tarfile.SYMTYPE, "x/b/../output/victim.txt"),
    member("f"),
    member("h", tarfile.LNKTYPE, "f"),
    member("h"),
]


def test_an_escaping_tarball_fails_every_host_with_78_and_writes_nothing_outside(s3_job, code_dir):
    uri = f"s3://{BUCKET}/jobs/escape/sourcedir.tar.gz"
    job = s3_job(uri, sourcedir_tarball(code_dir(), ESCAPING), rounds=1)

    assert isinstance(job.error, RuntimeError), job.error
    assert str(job.error).endswith("Process exited with code: 78")
    assert_hosts_agree(job, 78, "Configuration error in sagemaker_submit_directory: ")
    for host in job.hosts:
        files = job.snapshots[host].files
        assert "victim.txt" not in files, f"{host} wrote outside its code: {sorted(files)}"
        failure = job.snapshots[host].text("failure")
        for text in (
            f"{uri} has unsafe members, nothing was extracted: ",
            "'f' is a symlink to x/b/../output/victim.txt, outside the code through the "
            "symlink x/b",
            "'f' is a file with the same name as an earlier symlink",
            "'h' is a hard link to the symlink f",
        ):
            assert text in failure, f"{host}: {failure}"
    assert "victim.txt" not in job.output_tar()
