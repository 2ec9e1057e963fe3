"""User code as SageMaker delivers it: archive safety, entry point kinds, S3, pip, prepare()."""

import io
import json
import os
import stat
import sys
import tarfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from ringleader.config.job import DEFAULT_CODE_DIR, ConfigFiles, load_job_config, parse_job_config
from ringleader.config.topology import parse_topology
from ringleader.core import exitcodes
from ringleader.core.errors import ConfigError
from ringleader.source import usercode as sourcecode
from ringleader.source.usercode import EntryPointKind, Member, MemberKind, PreparationStopped

TOPOLOGY = parse_topology({}, {"hosts": ["algo-1", "algo-2"], "current_host": "algo-1"})
F, D, S, H, X = (
    MemberKind.FILE,
    MemberKind.DIRECTORY,
    MemberKind.SYMLINK,
    MemberKind.HARDLINK,
    MemberKind.OTHER,
)


def reasons(*members: Member) -> dict[str, str]:
    return dict(sourcecode.unsafe_members(list(members)))


# ----------------------------------------------------------------------------- member checks


def test_ordinary_members_are_safe():
    assert (
        reasons(
            Member(".", D),
            Member("./train.py", F),
            Member("pkg", D),
            Member("pkg/__init__.py", F),
            Member("pkg//mod.py", F),
            Member("pkg/link.py", S, "mod.py"),
            Member("pkg/up.py", S, "../train.py"),
            Member("pkg/same", S, "."),
            Member("hard.py", H, "pkg/__init__.py"),
        )
        == {}
    )


@pytest.mark.parametrize(
    ("member", "reason"),
    [
        (Member("/etc/cron.d/x", F), "is an absolute path"),
        (Member("../evil.py", F), "has a '..' component"),
        (Member("a/../../evil.py", F), "has a '..' component"),
        (Member("a/../b.py", F), "has a '..' component"),
        (Member("", F), "has an empty name"),
        (Member("dev", X), "is a device file or FIFO"),
        (Member("abs", S, "/etc/passwd"), "is a symlink to the absolute path /etc/passwd"),
        (Member("up", S, ".."), "is a symlink to .., outside the code"),
        (Member("a/b/up", S, "../../../x"), "is a symlink to ../../../x, outside the code"),
        (Member("h", H, "/etc/shadow"), "is a hard link to /etc/shadow, not a file of the code"),
        (Member("h", H, "../x"), "is a hard link to ../x, not a file of the code"),
        (Member("h", H, "missing.py"), "is a hard link to missing.py, not a file of the code"),
    ],
)
def test_unsafe_member_is_named_with_its_reason(member, reason):
    assert reasons(Member("ok.py", F), member) == {member.name: reason}


def test_nothing_may_be_extracted_through_a_symlink_even_one_pointing_inside():
    # d/l1 -> .. is the root (inside), but d/l1/l2 -> .. would then be the root's parent.
    found = reasons(
        Member("d", D), Member("d/l1", S, ".."), Member("d/l1/l2", S, ".."), Member("d/l1/f", F)
    )
    assert found == {
        "d/l1/l2": "lies under the symlink d/l1",
        "d/l1/f": "lies under the symlink d/l1",
    }


def test_a_link_declared_after_the_member_below_it_still_counts():
    assert reasons(Member("x/f.py", F), Member("x", S, "sub")) == {
        "x/f.py": "lies under the symlink x"
    }


def test_hard_link_to_a_directory_or_symlink_is_refused():
    found = reasons(Member("d", D), Member("s", S, "d"), Member("h1", H, "d"), Member("h2", H, "s"))
    assert set(found) == {"h1", "h2"}


# ------------------------------------------------------------------------ entry point kinds


@pytest.mark.parametrize(
    ("program", "names", "pyproject", "kind"),
    [
        ("train.py", {"train.py"}, None, EntryPointKind.PYTHON_SCRIPT),
        ("train.py", {"train.py", "setup.py"}, None, EntryPointKind.PYTHON_PACKAGE),
        ("train.py", {"train.py", "pyproject.toml"}, "[project]\nname='x'\n", "package"),
        ("train.py", {"train.py", "pyproject.toml"}, "[build-system]\nrequires=[]\n", "package"),
        ("train.py", {"train.py", "pyproject.toml"}, "[tool.ruff]\n", EntryPointKind.PYTHON_SCRIPT),
        ("train.py", {"train.py", "pyproject.toml"}, "not toml [", EntryPointKind.PYTHON_SCRIPT),
        ("run.sh", {"run.sh", "setup.py"}, None, EntryPointKind.SHELL_SCRIPT),
        ("train", {"train"}, None, EntryPointKind.EXECUTABLE),
        ("train", {"train", "setup.py"}, None, EntryPointKind.PYTHON_PACKAGE),
    ],
)
def test_entry_point_kind_follows_sagemaker_training(program, names, pyproject, kind):
    if kind == "package":
        kind = EntryPointKind.PYTHON_PACKAGE
    package = sourcecode.is_python_package(names, pyproject)
    assert sourcecode.entry_point_kind(program, package) is kind


@pytest.mark.parametrize(
    ("program", "problem"),
    [
        ("train.py", None),
        ("src/train.py", None),
        ("./train.py", None),
        ("../train.py", "'../train.py' has a '..' component"),
        ("/usr/bin/python3", "'/usr/bin/python3' is an absolute path"),
        (".", "'.' names the code directory itself"),
    ],
)
def test_program_must_be_inside_the_code_directory(program, problem):
    found = sourcecode.program_problem(program)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert found.startswith(problem)


def test_pip_command_lines():
    py = "/venv/bin/python"
    base = [py, "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    base += ["--progress-bar", "off"]
    assert sourcecode.pip_install_argv(py, requirements=False, package_dir=None) is None
    assert sourcecode.pip_install_argv(py, True, None) == [*base, "-r", "requirements.txt"]
    assert sourcecode.pip_install_argv(py, False, "/tmp/p") == [*base, "/tmp/p"]
    assert sourcecode.pip_install_argv(py, True, "/tmp/p") == [
        *base,
        "/tmp/p",
        "-r",
        "requirements.txt",
    ]


# ------------------------------------------------------------------------------- S3 URIs


def test_a_uri_that_names_no_object_is_a_config_error(tmp_path):
    """Found before any client is made (ringleader.aws.uri has the rules: test_aws.py)."""
    for bad, text in [
        ("s3:///key", "has no bucket name"),
        ("s3://bucket", "must name a sourcedir tarball object"),
        ("s3://bucket/prefix/", "must name a sourcedir tarball object"),
    ]:
        with pytest.raises(ConfigError) as caught:
            sourcecode.download_s3(bad, tmp_path / "a", 60, sourcecode.Stop())
        assert caught.value.field == "sagemaker_submit_directory"
        assert text in caught.value.problem


# ------------------------------------------------------------------------------ archives


def make_tarball(path: Path, entries: list[tuple[str, str, object]], mode: str = "w:gz") -> Path:
    """entries: (kind, name, content): kind file (str content), exec, dir, symlink, hardlink."""
    with tarfile.open(path, mode) as tar:
        for kind, name, content in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 1_700_000_000
            info.uid, info.gid, info.uname, info.gname = 4242, 4242, "someone", "someone"
            data = None
            if kind in ("file", "exec", "setuid"):
                data = str(content).encode()
                info.size = len(data)
                info.mode = {"file": 0o664, "exec": 0o775, "setuid": 0o4777}[kind]
            elif kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o777
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, str(content)
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, str(content)
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def test_extract_safe_archive_keeps_exec_bits_and_drops_setuid(tmp_path):
    archive = make_tarball(
        tmp_path / "sourcedir.tar.gz",
        [
            ("dir", "./pkg", None),
            ("file", "./pkg/mod.py", "X = 1\n"),
            ("exec", "./run", "#!/bin/sh\n"),
            ("setuid", "./suid", "x"),
            ("symlink", "./pkg/alias.py", "mod.py"),
            ("hardlink", "./copy.py", "./pkg/mod.py"),
        ],
    )
    code = tmp_path / "code"
    sourcecode.extract(archive, "s3://b/sourcedir.tar.gz", code)
    assert (code / "pkg" / "mod.py").read_text() == "X = 1\n"
    assert (code / "pkg" / "alias.py").read_text() == "X = 1\n"
    assert (code / "copy.py").read_text() == "X = 1\n"
    assert os.access(code / "run", os.X_OK)
    assert stat.S_IMODE((code / "suid").stat().st_mode) == 0o755
    assert stat.S_IMODE((code / "pkg").stat().st_mode) == 0o755
    assert stat.S_IMODE((code / "pkg" / "mod.py").stat().st_mode) == 0o644
    assert (code / "run").stat().st_uid == os.getuid()


@pytest.mark.parametrize(
    ("entries", "named"),
    [
        ([("file", "../evil.py", "x")], "'../evil.py' has a '..' component"),
        ([("file", "/tmp/evil.py", "x")], "'/tmp/evil.py' is an absolute path"),
        ([("symlink", "l", "/etc")], "'l' is a symlink to the absolute path /etc"),
        ([("symlink", "l", "../..")], "'l' is a symlink to ../.., outside the code"),
        (
            [("symlink", "l", "."), ("file", "l/x.py", "x")],
            "'l/x.py' lies under the symlink l",
        ),
        ([("fifo", "pipe", None)], "'pipe' is a device file or FIFO"),
    ],
)
def test_unsafe_archive_extracts_nothing_and_names_the_member(tmp_path, entries, named):
    archive = make_tarball(tmp_path / "s.tar.gz", [("file", "train.py", "x"), *entries])
    code = tmp_path / "code"
    with pytest.raises(ConfigError) as caught:
        sourcecode.extract(archive, "s3://b/k/s.tar.gz", code)
    assert caught.value.field == "sagemaker_submit_directory"
    assert "s3://b/k/s.tar.gz has unsafe members, nothing was extracted" in caught.value.problem
    assert named in caught.value.problem
    assert not code.exists()
    assert not (tmp_path / "evil.py").exists()


def test_many_unsafe_members_are_summarised(tmp_path):
    entries = [("file", f"../e{n}.py", "x") for n in range(5)]
    archive = make_tarball(tmp_path / "s.tar.gz", entries)
    with pytest.raises(ConfigError) as caught:
        sourcecode.extract(archive, "src", tmp_path / "code")
    assert "(and 2 more)" in caught.value.problem


@pytest.mark.parametrize("corruption", ["garbage", "truncated", "empty"])
def test_corrupt_archive_is_a_clear_error(tmp_path, corruption):
    archive = make_tarball(tmp_path / "s.tar.gz", [("file", "train.py", "x" * 100_000)])
    data = archive.read_bytes()
    archive.write_bytes(
        {
            "garbage": b"not a tarball at all" * 10,
            "truncated": data[: len(data) // 2],
            "empty": b"",
        }[corruption]
    )
    with pytest.raises(ConfigError) as caught:
        sourcecode.extract(archive, "s3://b/s.tar.gz", tmp_path / "code")
    assert caught.value.field == "sagemaker_submit_directory"
    assert "s3://b/s.tar.gz is not a valid (gzip-compressed) tar archive" in caught.value.problem


def test_plain_tar_is_accepted(tmp_path):
    archive = make_tarball(tmp_path / "s.tar", [("file", "train.py", "x")], mode="w")
    sourcecode.extract(archive, "s.tar", tmp_path / "code")
    assert (tmp_path / "code" / "train.py").is_file()


# ------------------------------------------------------------------------------------- S3


@pytest.fixture
def s3(monkeypatch):
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "S3_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    with mock_aws():
        client = boto3.client("s3", region_name="us-west-2")
        client.create_bucket(
            Bucket="code-bucket", CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
        )
        yield client


def test_download_from_s3(s3, tmp_path):
    s3.put_object(Bucket="code-bucket", Key="job/sourcedir.tar.gz", Body=b"x" * 3_000_000)
    size = sourcecode.download_s3(
        "s3://code-bucket/job/sourcedir.tar.gz", tmp_path / "a", 60, sourcecode.Stop()
    )
    assert size == 3_000_000
    assert (tmp_path / "a").read_bytes() == b"x" * 3_000_000


@pytest.mark.parametrize(
    ("uri", "text"),
    [
        ("s3://no-such-bucket/sourcedir.tar.gz", "the bucket 'no-such-bucket' does not exist"),
        ("s3://code-bucket/missing.tar.gz", "no object 'missing.tar.gz' in the bucket"),
    ],
)
def test_missing_bucket_or_key_is_named(s3, tmp_path, uri, text):
    with pytest.raises(ConfigError) as caught:
        sourcecode.download_s3(uri, tmp_path / "a", 60, sourcecode.Stop())
    assert caught.value.field == "sagemaker_submit_directory"
    assert caught.value.problem.startswith(f"{uri}: {text}")
    assert "S3 endpoint" in caught.value.problem


def test_download_timeout_is_named(s3, tmp_path):
    s3.put_object(Bucket="code-bucket", Key="big.tar.gz", Body=b"x" * 3_000_000)
    with pytest.raises(ConfigError) as caught:
        sourcecode.download_s3("s3://code-bucket/big.tar.gz", tmp_path / "a", 0, sourcecode.Stop())
    assert "did not finish within 0 s (download timeout)" in caught.value.problem


def sigterm(grace: float) -> sourcecode.Stop:
    event = threading.Event()
    event.set()
    return sourcecode.Stop(event, grace)


def test_sigterm_during_download_exits_143_after_the_grace_period(s3, tmp_path):
    s3.put_object(Bucket="code-bucket", Key="big.tar.gz", Body=b"x" * 3_000_000)
    with pytest.raises(PreparationStopped) as caught:
        sourcecode.download_s3("s3://code-bucket/big.tar.gz", tmp_path / "a", 60, sigterm(0))
    assert caught.value.exit_code == exitcodes.SIGTERM_EXIT
    assert str(caught.value).startswith("Stopped by SIGTERM while downloading s3://code-bucket/")


def test_download_that_ends_within_the_grace_period_completes(s3, tmp_path):
    # Under docker compose, SIGTERM mostly means another host exited: finish and report too.
    s3.put_object(Bucket="code-bucket", Key="big.tar.gz", Body=b"x" * 3_000_000)
    size = sourcecode.download_s3("s3://code-bucket/big.tar.gz", tmp_path / "a", 60, sigterm(30))
    assert size == 3_000_000


def test_unreachable_endpoint_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")  # discard port: refused
    monkeypatch.setattr(sourcecode, "S3_CONNECT_TIMEOUT", 1.0)
    with pytest.raises(ConfigError) as caught:
        sourcecode.download_s3("s3://b/s.tar.gz", tmp_path / "a", 30, sourcecode.Stop())
    assert caught.value.problem.startswith("cannot download s3://b/s.tar.gz: ")
    assert "(S3 endpoint http://127.0.0.1:9)" in caught.value.problem


# -------------------------------------------------------------------------- bounded commands


def test_run_bounded_returns_code_and_output(tmp_path):
    code, output = sourcecode.run_bounded(
        [sys.executable, "-c", "import os; print(os.getcwd()); raise SystemExit(3)"],
        tmp_path,
        30,
        sourcecode.Stop(),
        "requirements.txt",
        "testing",
    )
    assert (code, output.strip()) == (3, str(tmp_path))


def test_run_bounded_timeout_kills_the_process_group_and_is_named(tmp_path):
    marker = tmp_path / "child-alive"
    script = (
        "import subprocess, sys, time; print('working', flush=True); "
        f"subprocess.Popen(['sh', '-c', 'sleep 3; touch {marker}']); time.sleep(30)"
    )
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        sourcecode.run_bounded(
            [sys.executable, "-c", script],
            tmp_path,
            1.0,
            sourcecode.Stop(),
            "requirements.txt",
            "installing requirements.txt",
        )
    assert time.monotonic() - started < 5
    assert caught.value.field == "requirements.txt"
    assert "installing requirements.txt did not finish within 1 s (install timeout)" in str(
        caught.value
    )
    assert "working" in caught.value.problem
    time.sleep(3.5)
    assert not marker.exists(), "the grandchild survived the timeout"


def test_run_bounded_stops_after_sigterm_and_the_grace_period(tmp_path):
    event = threading.Event()
    sigterm_at: list[float] = []

    def sigterm() -> None:
        sigterm_at.append(time.monotonic())
        event.set()

    threading.Timer(0.3, sigterm).start()
    # Stopped, not ended: the command ends by itself only after 30 s, and would return its code.
    with pytest.raises(PreparationStopped) as caught:
        sourcecode.run_bounded(
            [sys.executable, "-c", "import time; time.sleep(30)"],
            tmp_path,
            60,
            sourcecode.Stop(event, 0.5),
            "requirements.txt",
            "installing requirements.txt",
        )
    # The grace counts from the SIGTERM itself. Measured from a time taken after starting the
    # timer, whose 0.3 s may have begun well before it, it came out short when this thread
    # lost the CPU in between and a later poll woke late (0.76 s < 0.8 s, each 0.15 s). No
    # budget for the whole run: a starved machine can exceed any.
    assert time.monotonic() - sigterm_at[0] >= 0.5
    assert caught.value.exit_code == 143
    assert str(caught.value) == (
        "Stopped by SIGTERM while installing requirements.txt (requirements.txt)."
    )


def test_run_bounded_lets_a_command_finish_within_the_grace_period(tmp_path):
    code, _ = sourcecode.run_bounded(
        [sys.executable, "-c", "import time; time.sleep(0.5); raise SystemExit(4)"],
        tmp_path,
        60,
        sigterm(10),
        "requirements.txt",
        "installing requirements.txt",
    )
    assert code == 4


# ------------------------------------------------------------------------------- prepare()


def job_config(code_dir: Path, program: str = "train.py", submit: str | None = None):
    """The job's source settings, as the entry point hands them to prepare()."""
    values = {"sagemaker_program": program, "sagemaker_submit_directory": submit or str(code_dir)}
    source = parse_job_config(TOPOLOGY, values, {}).source
    if source.code_archive is not None:  # extract into the test's directory, not /opt/ml/code
        source = replace(source, code_dir=str(code_dir))
    return source


@pytest.fixture
def fake_python(tmp_path):
    """An interpreter stand-in that records pip's argv and working directory."""
    record = tmp_path / "pip-call.json"
    script = tmp_path / "fake-python"
    script.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'cwd': os.getcwd(), "
        f"'listing': sorted(os.listdir(sys.argv[-1])) if os.path.isdir(sys.argv[-1]) else []}}, "
        f"open({str(record)!r}, 'w'))\n"
    )
    script.chmod(0o755)
    return script, record


def test_config_accepts_s3_and_local_tarballs():
    s3 = parse_job_config(
        TOPOLOGY,
        {"sagemaker_program": "t.py", "sagemaker_submit_directory": '"s3://b/p/sourcedir.tar.gz"'},
        {},
    )
    assert (s3.source.code_dir, s3.source.code_archive) == (
        DEFAULT_CODE_DIR,
        "s3://b/p/sourcedir.tar.gz",
    )
    local = parse_job_config(
        TOPOLOGY, {"sagemaker_program": "t.py", "sagemaker_submit_directory": "file:///x/s.tgz"}, {}
    )
    assert (local.source.code_dir, local.source.code_archive) == (DEFAULT_CODE_DIR, "/x/s.tgz")
    plain = parse_job_config(
        TOPOLOGY, {"sagemaker_program": "t.py", "sagemaker_submit_directory": "/opt/ml/code"}, {}
    )
    assert (plain.source.code_dir, plain.source.code_archive) == ("/opt/ml/code", None)


def test_load_job_config_leaves_archives_to_prepare(tmp_path):
    files = ConfigFiles(tmp_path)
    files.hyperparameters.write_text(
        json.dumps(
            {
                "sagemaker_program": '"train.py"',
                "sagemaker_submit_directory": '"s3://b/sourcedir.tar.gz"',
            }
        )
    )
    config = load_job_config(TOPOLOGY, {}, files)  # no code yet: no error
    assert config.source.code_archive == "s3://b/sourcedir.tar.gz"


def test_prepare_extracts_from_s3_and_installs_requirements(s3, tmp_path, fake_python):
    python, record = fake_python
    archive = make_tarball(
        tmp_path / "s.tar.gz",
        [("file", "train.py", "print(1)\n"), ("file", "requirements.txt", "nothing-real\n")],
    )
    s3.put_object(Bucket="code-bucket", Key="j/sourcedir.tar.gz", Body=archive.read_bytes())
    code = tmp_path / "code"
    sourcecode.prepare(
        job_config(code, submit="s3://code-bucket/j/sourcedir.tar.gz"), python=str(python)
    )
    assert (code / "train.py").read_text() == "print(1)\n"
    call = json.loads(record.read_text())
    assert call["argv"][:3] == ["-m", "pip", "install"]
    assert call["argv"][-2:] == ["-r", "requirements.txt"]
    assert call["cwd"] == str(code)


def test_prepare_installs_a_package_from_a_copy(tmp_path, fake_python):
    python, record = fake_python
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("")
    (code / "setup.py").write_text("")
    code.chmod(0o555)  # a read-only mount: pip must build elsewhere
    try:
        sourcecode.prepare(job_config(code), python=str(python))
    finally:
        code.chmod(0o755)
    call = json.loads(record.read_text())
    package_dir = call["argv"][-1]
    assert package_dir != str(code)
    assert call["listing"] == ["setup.py", "train.py"]
    assert not Path(package_dir).exists(), "the copy is removed afterwards"


def test_prepare_without_requirements_runs_no_pip(tmp_path, fake_python):
    python, record = fake_python
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("")
    sourcecode.prepare(job_config(code), python=str(python))
    assert not record.exists()


def test_uninstallable_requirements_fail_naming_the_requirement(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("")
    (code / "requirements.txt").write_text("--no-index\nringleader-no-such-package==1.0\n")
    with pytest.raises(ConfigError) as caught:
        sourcecode.prepare(job_config(code))  # real pip, offline: fails without installing
    assert caught.value.field == "requirements.txt"
    assert caught.value.problem.startswith("pip could not install requirements.txt (exit code 1)")
    assert "ringleader-no-such-package" in caught.value.problem


@pytest.mark.parametrize(
    ("program", "text"),
    [
        ("missing.py", "'missing.py' not found in the code directory"),
        ("../etc/passwd", "'../etc/passwd' has a '..' component"),
    ],
)
def test_entry_point_not_in_the_code_is_named(tmp_path, program, text):
    archive = make_tarball(tmp_path / "s.tar.gz", [("file", "train.py", ""), ("dir", "lib", "")])
    code = tmp_path / "code"
    with pytest.raises(ConfigError) as caught:
        sourcecode.prepare(job_config(code, program, submit=str(archive)))
    assert caught.value.field == "sagemaker_program"
    assert text in caught.value.problem
    if program == "missing.py":
        assert f"(extracted from {archive}); it holds: lib/, train.py" in caught.value.problem


def test_missing_local_tarball_is_named(tmp_path):
    with pytest.raises(ConfigError) as caught:
        sourcecode.prepare(job_config(tmp_path / "code", submit=str(tmp_path / "nope.tar.gz")))
    assert caught.value.field == "sagemaker_submit_directory"
    assert "nope.tar.gz': no such file" in caught.value.problem


def test_extracted_executable_entry_point_is_made_executable(tmp_path):
    archive = make_tarball(tmp_path / "s.tar.gz", [("file", "train", "#!/bin/sh\n")])
    code = tmp_path / "code"
    sourcecode.prepare(job_config(code, "train", submit=str(archive)))
    assert os.access(code / "train", os.X_OK)
