"""Everything under an S3 prefix into a directory, resumably: a file already there with the
object's size is kept, and each download goes to a `.part` file renamed when complete. Used by
`ringleader cluster sync s3://...` on each host and `ringleader local --input NAME=s3://...`."""

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from ringleader.aws.client import Client

Progress = Callable[[int, int, str], None]  # (done, to copy, key)


def missing(objects: Iterable[tuple[str, int]], prefix: str, destination: Path) -> list[str]:
    """Keys under `prefix` whose file in `destination` is absent or of another size."""
    keys = []
    for key, size in objects:
        relative = key[len(prefix) :].lstrip("/")
        if not relative or key.endswith("/"):
            continue
        if ".." in Path(relative).parts:
            raise ValueError(f"refusing key {key!r}: it leaves {destination}")
        target = destination / relative
        if not target.is_file() or target.stat().st_size != size:
            keys.append(key)
    return keys


def download_prefix(
    client: Client, bucket: str, prefix: str, destination: Path, progress: Progress
) -> tuple[int, int]:
    """(objects copied, objects under the prefix)."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    objects = [
        (item["Key"], int(item["Size"])) for page in pages for item in page.get("Contents", [])
    ]
    keys = missing(objects, prefix, destination)
    for number, key in enumerate(keys, start=1):
        target = destination / key[len(prefix) :].lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".part")
        client.download_file(bucket, key, str(partial))
        os.replace(partial, target)
        progress(number, len(keys), key)
    return len(keys), len(objects)
