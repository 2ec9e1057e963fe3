"""`ringleader image check IMAGE`: run the probe in a container of IMAGE (no network, removed
afterwards) and report, for each distribution, what the image lacks."""

import subprocess
from collections.abc import Sequence

from ringleader.tools.image.probe import ImageFacts, ProbeError, parse_probe, probe_script


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
    try:
        result = subprocess.run(
            command,
            input=probe_script(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ProbeError(
            f"the probe in a container of {image} did not finish within {timeout:g} s (--timeout)"
        ) from None
    if result.returncode != 0:
        raise ProbeError(
            f"the probe could not run in {image} (exit code {result.returncode}): "
            f"{result.stderr.strip() or 'no output'} (the image needs /bin/sh)"
        )
    return parse_probe(result.stdout)
