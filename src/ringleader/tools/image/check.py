"""`ringleader image check IMAGE`: run the probe in a container of IMAGE (no network, removed
afterwards) and report, for each distribution, what the image lacks."""

import subprocess
from collections.abc import Sequence

from ringleader.tools.image.probe import ImageFacts, ProbeError, run_probe


class ImageNotFound(Exception):
    pass


def probe_image(image: str, pythons: Sequence[str], timeout: float) -> ImageFacts:
    try:
        found = subprocess.run(
            ["docker", "image", "inspect", "--format", "{{.Id}}", image],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise ProbeError("the docker command is not installed") from None
    except subprocess.TimeoutExpired:
        raise ProbeError(f"docker did not answer within {timeout:g} s (--timeout)") from None
    if found.returncode != 0:
        error = found.stderr.strip()
        if "No such image" in error or "No such object" in error:
            raise ImageNotFound(
                f"image {image!r} does not exist here (docker image inspect): build it, or "
                "pull it, first"
            )
        raise ProbeError(f"docker image inspect {image} failed: {error}")
    command = [
        "docker",
        "run",
        "--rm",
        "-i",
        "--network",
        "none",
        "--entrypoint",
        "/bin/sh",
        image,
        "-s",
        "--",
        *pythons,
    ]
    where = f"in a container of {image} (it needs /bin/sh; --timeout)"
    return run_probe(command, timeout, where)
