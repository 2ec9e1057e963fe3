"""`python -m ringleader.tools.cluster.s3sync s3://bucket/prefix DIR` on a cluster host: the
objects under the prefix into DIR with this host's own credentials (instance role, environment
or ~/.aws), skipping files already there with the same size, so a re-run resumes."""

import sys
from pathlib import Path

from ringleader.aws.uri import S3UriError, bucket_name_problem, split_s3_uri


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m ringleader.tools.cluster.s3sync s3://BUCKET/PREFIX DIR")
        return 2
    try:
        bucket, prefix = split_s3_uri(argv[0])
    except S3UriError as error:
        print(f"error: {error}")
        return 2
    if (problem := bucket_name_problem(bucket)) is not None:
        print(f"error: bucket name {bucket!r}: {problem}")
        return 2
    from ringleader.aws.client import make_client, s3_endpoint
    from ringleader.aws.download import download_prefix

    destination = Path(argv[1]).expanduser()

    def show(done: int, total: int, key: str) -> None:
        print(f"{done}/{total} {100 * done // total}% {key}", flush=True)

    client = make_client("s3", endpoint_url=s3_endpoint())
    copied, total = download_prefix(client, bucket, prefix, destination, show)
    print(f"copied {copied} of {total} objects into {destination}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
