"""`python -m ringleader.tools.cluster.s3sync s3://bucket/prefix DIR` on a cluster host: the
objects under the prefix into DIR with this host's own credentials (instance role, environment
or ~/.aws), skipping files already there with the same size, so a re-run resumes."""

import os
import sys
from collections.abc import Iterable
from pathlib import Path

from ringleader.aws.uri import S3UriError, bucket_name_problem, split_s3_uri


def missing(objects: Iterable[tuple[str, int]], prefix: str, destination: Path) -> list[str]:
    """Keys under `prefix` whose file in `destination` is absent or of another size."""
    keys = []
    for key, size in objects:
        relative = key[len(prefix) :].lstrip("/")
        if not relative or key.endswith("/"):
            continue
        target = destination / relative
        if ".." in Path(relative).parts:
            raise ValueError(f"refusing key {key!r}: it leaves {destination}")
        if not target.is_file() or target.stat().st_size != size:
            keys.append(key)
    return keys


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m ringleader.tools.cluster.s3sync s3://BUCKET/PREFIX DIR")
        return 2
    from ringleader.aws.client import make_client, s3_endpoint

    try:
        bucket, prefix = split_s3_uri(argv[0])
    except S3UriError as error:
        print(f"error: {error}")
        return 2
    if (problem := bucket_name_problem(bucket)) is not None:
        print(f"error: bucket name {bucket!r}: {problem}")
        return 2
    destination = Path(argv[1]).expanduser()
    client = make_client("s3", endpoint_url=s3_endpoint())
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    objects = [
        (item["Key"], int(item["Size"])) for page in pages for item in page.get("Contents", [])
    ]
    keys = missing(objects, prefix, destination)
    print(f"{len(objects)} objects, {len(keys)} to copy", flush=True)
    for number, key in enumerate(keys, start=1):
        target = destination / key[len(prefix) :].lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".part")
        client.download_file(bucket, key, str(partial))
        os.replace(partial, target)
        print(f"{number}/{len(keys)} {100 * number // len(keys)}% {key}", flush=True)
    print(f"copied {len(keys)} of {len(objects)} objects into {destination}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
