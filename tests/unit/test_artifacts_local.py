"""Archives on disk and delivery to a local directory (no S3)."""

import errno
import gzip
import hashlib
import io
import os
import socket
import subprocess
import tarfile
from pathlib import Path

import pytest

from ringleader.artifacts import (
    MANIFEST_NAME,
    ArchiveError,
    build_archive,
    check_output_uri,
    collect,
    delivery,
    parse_output_uri,
    verify_archive,
)
from ringleader.artifacts import archive as archive_module
from ringleader.artifacts.manifest import parse_manifest
from ringleader.core.errors import ConfigError


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    return path


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def model_tree(root: Path) -> dict[str, bytes]:
    files = {
        "model.pth": b"weights" * 1000,
        "config/params.json": b'{"lr": 0.1}',
        "config/z-last.txt": b"z",
        "a-b.txt": b"dash",
    }
    for name, data in files.items():
        write(root / name, data)
    (root / "empty-dir").mkdir()
    return files


def members(archive: Path) -> list[tarfile.TarInfo]:
    with tarfile.open(archive, "r:gz") as tar:
        return tar.getmembers()


def manifest_of(archive: Path) -> dict[str, str]:
    with tarfile.open(archive, "r:gz") as tar:
        stream = tar.extractfile(MANIFEST_NAME)
        assert stream is not None
        return parse_manifest(stream.read().decode("utf-8", "surrogateescape"))


def no_partials(directory: Path) -> bool:
    return not [path for path in directory.rglob("*") if path.name.endswith(".partial")]


def test_manifest_is_first_and_matches_every_file(tmp_path):
    files = model_tree(tmp_path / "model")
    archive = build_archive(tmp_path / "model", "model.tar.gz", tmp_path / "work")
    assert archive.path == tmp_path / "work" / "model.tar.gz"
    infos = members(archive.path)
    assert infos[0].name == MANIFEST_NAME and infos[0].isfile()
    assert manifest_of(archive.path) == {name: sha256(data) for name, data in files.items()}
    assert archive.files == len(files)
    assert archive.size == archive.path.stat().st_size
    assert archive.sha256 == sha256(archive.path.read_bytes())
    assert verify_archive(archive.path) == []
    assert all(info.uid == 0 and info.gid == 0 and not info.uname for info in infos)
    assert "empty-dir" in [info.name for info in infos if info.isdir()]


def test_sha256sum_verifies_the_extracted_archive(tmp_path):
    model_tree(tmp_path / "model")
    write(tmp_path / "model" / "odd\\name\nwith newline", b"odd")
    write(tmp_path / "model" / os.fsdecode(b"caf\xe9-latin1.txt"), b"not utf-8 name")
    archive = build_archive(tmp_path / "model", "model.tar.gz", tmp_path / "work")
    out = tmp_path / "extracted"
    out.mkdir()
    with tarfile.open(archive.path, "r:gz") as tar:
        tar.extractall(out, filter="tar")
    check = subprocess.run(
        ["sha256sum", "--check", "--strict", MANIFEST_NAME],
        cwd=out,
        capture_output=True,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count(b": OK") == 6


def test_member_order_is_deterministic(tmp_path):
    names = ["b.txt", "a/2.txt", "a/1.txt", "c/d/e.txt", "a-b.txt"]
    for index, order in enumerate((names, list(reversed(names)))):
        for name in order:
            write(tmp_path / f"src{index}" / name, name)
    first = build_archive(tmp_path / "src0", "output.tar.gz", tmp_path / "w0")
    second = build_archive(tmp_path / "src1", "output.tar.gz", tmp_path / "w1")
    order = [info.name for info in members(first.path)]
    assert order == [info.name for info in members(second.path)]
    assert order == [
        MANIFEST_NAME,
        "a",
        "a/1.txt",
        "a/2.txt",
        "a-b.txt",
        "b.txt",
        "c",
        "c/d",
        "c/d/e.txt",
    ]


def test_symlinks_are_stored_as_links_and_never_followed(tmp_path):
    secret = write(tmp_path / "outside" / "secret.txt", "do not archive me")
    source = tmp_path / "model"
    write(source / "real.txt", "real")
    (source / "to-secret").symlink_to(secret)
    (source / "to-real").symlink_to("real.txt")
    (source / "to-dir").symlink_to(tmp_path / "outside", target_is_directory=True)
    archive = build_archive(source, "model.tar.gz", tmp_path / "work")
    links = {info.name: info.linkname for info in members(archive.path) if info.issym()}
    assert links == {"to-secret": str(secret), "to-real": "real.txt", "to-dir": str(secret.parent)}
    assert b"do not archive me" not in gunzip(archive.path)
    assert set(manifest_of(archive.path)) == {"real.txt"}


def gunzip(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes())


def test_sockets_and_fifos_are_left_out_and_listed(tmp_path):
    source = tmp_path / "o"
    write(source / "data" / "log.txt", "log")
    os.mkfifo(source / "data" / "pipe")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(source / "sock"))
        archive = build_archive(source, "output.tar.gz", tmp_path / "work")
    finally:
        listener.close()
    names = [info.name for info in members(archive.path)]
    assert names == [MANIFEST_NAME, "data", "data/log.txt"]
    assert {(item.path, item.reason) for item in archive.skipped} == {
        ("data/pipe", "FIFO"),
        ("sock", "socket"),
    }


def test_missing_directory_gives_an_archive_with_an_empty_manifest(tmp_path):
    archive = build_archive(tmp_path / "no-model", "model.tar.gz", tmp_path / "work")
    assert [info.name for info in members(archive.path)] == [MANIFEST_NAME]
    assert manifest_of(archive.path) == {}
    assert archive.files == 0


def test_work_dir_inside_the_source_is_not_archived(tmp_path):
    source = tmp_path / "output"
    write(source / "data" / "x.txt", "x")
    write(source / "work" / "old.tar.gz", "previous archive")
    archive = build_archive(source, "output.tar.gz", source / "work")
    assert [info.name for info in members(archive.path)] == [MANIFEST_NAME, "data", "data/x.txt"]


def test_a_failed_write_leaves_no_partial_file_and_keeps_the_old_archive(tmp_path, monkeypatch):
    model_tree(tmp_path / "model")
    work = write(tmp_path / "work" / "model.tar.gz", b"archive of an earlier run").parent
    real_add = archive_module._add
    calls = []

    def add_then_fail(tar, source, entry, digests):
        calls.append(entry.path)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_add(tar, source, entry, digests)

    monkeypatch.setattr(archive_module, "_add", add_then_fail)
    with pytest.raises(ArchiveError, match="No space left on device"):
        build_archive(tmp_path / "model", "model.tar.gz", work)
    assert len(calls) == 3
    assert (work / "model.tar.gz").read_bytes() == b"archive of an earlier run"
    assert sorted(path.name for path in work.iterdir()) == ["model.tar.gz"]


def test_a_file_rewritten_while_archiving_fails_the_archive(tmp_path, monkeypatch):
    source = tmp_path / "model"
    target = write(source / "weights.bin", b"version 1")
    real_hash = archive_module.sha256_of_file

    def hash_then_rewrite(path):
        result = real_hash(path)
        if path == target:
            target.write_bytes(b"VERSION 2")  # same size, other bytes
        return result

    monkeypatch.setattr(archive_module, "sha256_of_file", hash_then_rewrite)
    with pytest.raises(ArchiveError, match="changed while it was being archived"):
        build_archive(source, "model.tar.gz", tmp_path / "work")
    assert list((tmp_path / "work").iterdir()) == []


def test_a_file_truncated_while_archiving_fails_the_archive(tmp_path, monkeypatch):
    source = tmp_path / "model"
    target = write(source / "weights.bin", b"x" * 10_000)
    real_hash = archive_module.sha256_of_file

    def hash_then_truncate(path):
        result = real_hash(path)
        if path == target:
            target.write_bytes(b"x" * 10)
        return result

    monkeypatch.setattr(archive_module, "sha256_of_file", hash_then_truncate)
    with pytest.raises(ArchiveError, match=r"weights\.bin shrank while it was being archived"):
        build_archive(source, "model.tar.gz", tmp_path / "work")
    assert list((tmp_path / "work").iterdir()) == []


def test_a_file_that_grows_while_archiving_is_stored_as_hashed(tmp_path, monkeypatch):
    source = tmp_path / "output"
    log = write(source / "data" / "algo-1" / "ringleader.output.log", b"line 1\n")
    real_hash = archive_module.sha256_of_file

    def hash_then_append(path):
        result = real_hash(path)
        if path == log:
            with log.open("ab") as stream:
                stream.write(b"line 2\n")
        return result

    monkeypatch.setattr(archive_module, "sha256_of_file", hash_then_append)
    archive = build_archive(source, "output.tar.gz", tmp_path / "work")
    assert verify_archive(archive.path) == []
    with tarfile.open(archive.path, "r:gz") as tar:
        stream = tar.extractfile("data/algo-1/ringleader.output.log")
        assert stream is not None and stream.read() == b"line 1\n"


def test_verify_finds_a_tampered_archive(tmp_path):
    write(tmp_path / "model" / "w.bin", b"original")
    archive = build_archive(tmp_path / "model", "model.tar.gz", tmp_path / "work")
    tampered = tmp_path / "tampered.tar.gz"
    with tarfile.open(archive.path, "r:gz") as source, tarfile.open(tampered, "w:gz") as out:
        for info in source.getmembers():
            data = source.extractfile(info).read() if info.isfile() else None
            if info.name == "w.bin":
                data = b"modified"
            if data is not None:
                info.size = len(data)
            out.addfile(info, io.BytesIO(data) if data is not None else None)
        extra = tarfile.TarInfo("added.txt")
        out.addfile(extra, io.BytesIO(b""))
    assert verify_archive(tampered) == [
        "w.bin does not match its sha256",
        "added.txt is not in the manifest",
    ]


def test_collect_to_a_local_directory(tmp_path):
    output, model, work = tmp_path / "output", tmp_path / "model", tmp_path / "work"
    write(output / "data" / "algo-2" / "metrics.jsonl", '{"loss": 1}\n')
    write(output / "failure", "Rank 2 failed")
    files = model_tree(model)
    uri = parse_output_uri(f"file://{tmp_path}/delivered")
    report = collect(output, model, uri, "algo-2", work_dir=work, log=print)
    assert report.ok, report.summary_lines()
    host_dir = tmp_path / "delivered" / "algo-2"
    assert sorted(path.name for path in host_dir.iterdir()) == ["model.tar.gz", "output.tar.gz"]
    assert manifest_of(host_dir / "model.tar.gz") == {n: sha256(d) for n, d in files.items()}
    assert set(manifest_of(host_dir / "output.tar.gz")) == {"data/algo-2/metrics.jsonl", "failure"}
    assert [result.destination for result in report.results] == [
        str(host_dir / "output.tar.gz"),
        str(host_dir / "model.tar.gz"),
    ]
    assert report.results[1].sha256 == sha256((host_dir / "model.tar.gz").read_bytes())
    assert list(work.iterdir()) == []  # delivered archives do not stay behind
    assert report.failure_note() == ""


def test_hosts_never_clash_in_the_output_directory(tmp_path):
    uri = parse_output_uri(str(tmp_path / "out"))
    for host in ("algo-1", "algo-2"):
        write(tmp_path / host / "model" / "rank.txt", host)
        report = collect(
            tmp_path / host / "output",
            tmp_path / host / "model",
            uri,
            host,
            work_dir=tmp_path / host / "work",
            log=print,
        )
        assert report.ok
    for host in ("algo-1", "algo-2"):
        with tarfile.open(tmp_path / "out" / host / "model.tar.gz", "r:gz") as tar:
            stream = tar.extractfile("rank.txt")
            assert stream is not None and stream.read() == host.encode()


def test_a_failed_copy_leaves_no_partial_file_and_keeps_the_archive(tmp_path, monkeypatch):
    write(tmp_path / "model" / "w.bin", os.urandom(64 * 1024))
    destination = write(tmp_path / "out" / "algo-1" / "model.tar.gz", b"earlier run")

    def copy_half_then_fail(source, target, length=0):
        target.write(source.read(1000))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(delivery.shutil, "copyfileobj", copy_half_then_fail)
    report = collect(
        tmp_path / "output",
        tmp_path / "model",
        parse_output_uri(str(tmp_path / "out")),
        "algo-1",
        work_dir=tmp_path / "work",
        log=print,
    )
    assert not report.ok
    assert destination.read_bytes() == b"earlier run"
    assert no_partials(tmp_path / "out")
    assert sorted(path.name for path in (tmp_path / "out" / "algo-1").iterdir()) == ["model.tar.gz"]
    for result in report.results:
        assert result.error == "No space left on device"
        assert result.kept is not None and verify_archive(result.kept) == []
    assert f"Kept at {tmp_path / 'work' / 'output.tar.gz'}" in report.failure_note()


def test_an_archive_that_cannot_be_built_does_not_stop_the_other(tmp_path):
    write(tmp_path / "output" / "data" / "x.txt", "x")
    write(tmp_path / "model", "a file where the model directory should be")
    report = collect(
        tmp_path / "output",
        tmp_path / "model",
        parse_output_uri(str(tmp_path / "out")),
        "algo-1",
        work_dir=tmp_path / "work",
        log=print,
    )
    output, model = report.results
    assert output.delivered and (tmp_path / "out" / "algo-1" / "output.tar.gz").is_file()
    assert not model.delivered and "is not a directory" in (model.error or "")
    assert model.kept is None


def test_check_output_directory(tmp_path):
    check_output_uri(parse_output_uri(str(tmp_path / "new" / "deeper")))
    blocker = write(tmp_path / "file", "x")
    with pytest.raises(ConfigError, match="is not a directory") as caught:
        check_output_uri(parse_output_uri(str(blocker / "sub")))
    assert caught.value.field == "ringleader_output_uri"


def test_build_is_repeatable_after_an_earlier_kept_archive(tmp_path):
    write(tmp_path / "model" / "w.bin", b"1")
    first = build_archive(tmp_path / "model", "model.tar.gz", tmp_path / "work")
    write(tmp_path / "model" / "w.bin", b"2")
    second = build_archive(tmp_path / "model", "model.tar.gz", tmp_path / "work")
    assert first.path == second.path and first.sha256 != second.sha256
    assert manifest_of(second.path) == {"w.bin": sha256(b"2")}
    assert sorted(path.name for path in (tmp_path / "work").iterdir()) == ["model.tar.gz"]
