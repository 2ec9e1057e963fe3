"""Everything under an S3 prefix into a directory, resumably: a file already there is kept only
when it is the object's current version (its size and the ETag recorded when it was downloaded
match the listing), and each download goes to a `.part` file renamed when complete. Used by
`ringleader cluster sync s3://...` on each host and `ringleader local --input NAME=s3://...`."""

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from ringleader.aws.client import Client
from ringleader.core.files import write_atomically

Progress = Callable[[int, int, str], None]  # (done, to copy, key)
RECORD_SUFFIX = ".ringleader-etags.json"  # beside the destination: relative path -> ETag
RECORD_EVERY_SECONDS = 5.0  # how often a long sync saves its record meanwhile


def missing(
    objects: Iterable[tuple[str, int, str]],
    prefix: str,
    destination: Path,
    recorded: Mapping[str, str],
) -> list[str]:
    """Keys under `prefix` whose file in `destination` is absent, of another size, or not the
    version listed (an object replaced by another of the same size has another ETag)."""
    keys = []
    for key, size, etag in objects:
        relative = _relative(key, prefix, destination)
        if relative is None:
            continue
        target = destination / relative
        current = target.is_file() and target.stat().st_size == size
        if not current or recorded.get(relative) != etag:
            keys.append(key)
    return keys


def _relative(key: str, prefix: str, destination: Path) -> str | None:
    relative = key[len(prefix) :].lstrip("/")
    if not relative or key.endswith("/"):
        return None
    if ".." in Path(relative).parts:
        raise ValueError(f"refusing key {key!r}: it leaves {destination}")
    return relative


def record_path(destination: Path) -> Path:
    """Where the ETags downloaded into `destination` are kept: beside it, so the directory
    holds only the objects (a job's channel shows exactly what S3 has)."""
    return destination.with_name(destination.name + RECORD_SUFFIX)


def read_record(destination: Path) -> dict[str, str]:
    try:
        value = json.loads(record_path(destination).read_text())
    except (OSError, ValueError):
        return {}  # no record (or a damaged one): every file is fetched again
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def download_prefix(
    client: Client, bucket: str, prefix: str, destination: Path, progress: Progress
) -> tuple[int, int]:
    """(objects copied, objects under the prefix)."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    objects = [
        (item["Key"], int(item["Size"]), str(item.get("ETag", "")))
        for page in pages
        for item in page.get("Contents", [])
    ]
    recorded = read_record(destination)
    etags = {key: etag for key, _, etag in objects}
    keys = missing(objects, prefix, destination, recorded)
    saved_at = time.monotonic()
    try:
        for number, key in enumerate(keys, start=1):
            relative = key[len(prefix) :].lstrip("/")
            target = destination / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(target.name + ".part")
            client.download_file(bucket, key, str(partial))
            os.replace(partial, target)
            recorded[relative] = etags[key]
            if time.monotonic() - saved_at >= RECORD_EVERY_SECONDS:  # not once per object
                write_atomically(record_path(destination), json.dumps(recorded))
                saved_at = time.monotonic()
            progress(number, len(keys), key)
    finally:  # an interrupted sync keeps what it fetched: the next one resumes from there
        if keys:
            write_atomically(record_path(destination), json.dumps(recorded))
    return len(keys), len(objects)
