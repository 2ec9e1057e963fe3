"""The report opened in a real headless Chromium (Debian's `chromium` package) and screenshotted.

This test fails, rather than skips, when chromium is missing: scripts/setup.sh installs it.
Set RINGLEADER_REPORT_SCREENSHOT=/some/file.png to keep the screenshot for a look.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from ringleader.tools import cli as ringleader_cli

pytestmark = pytest.mark.browser

FIXTURE = Path(__file__).parent / "fixtures" / "local-job"
WIDTH, HEIGHT = 1280, 2000
ROOT_CAUSE_RED = (0xC0, 0x39, 0x2B)  # the root-cause bar of ranks.png: the image loaded
FAILED_BANNER = (0xFB, 0xE6, 0xE4)  # the page's failure banner: the CSS applied
BROWSER_TIMEOUT = 90


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        pytest.fail(
            "no `chromium` on PATH: the browser test needs Debian's `chromium` package "
            "(apt-get install -y chromium)"
        )
    return found


def render(tmp_path: Path) -> Path:
    job = tmp_path / "local-job"
    shutil.copytree(FIXTURE, job)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert ringleader_cli.main(["report", str(job)]) == 0
    index = job / "report" / "index.html"
    assert index.is_file(), out.getvalue()
    return index


def headless(index: Path, tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """Headless chromium on the page, offline, with a profile of its own."""
    command = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}",
        *options,
        index.resolve().as_uri(),
    ]
    env = {**os.environ, "HOME": str(tmp_path)}
    return subprocess.run(
        command, capture_output=True, text=True, timeout=BROWSER_TIMEOUT, env=env, check=False
    )


def screenshot(index: Path, tmp_path: Path, height: int = HEIGHT) -> Path:
    png = tmp_path / "screenshot.png"
    result = headless(index, tmp_path, f"--screenshot={png}", f"--window-size={WIDTH},{height}")
    assert result.returncode == 0 and png.is_file(), (
        f"chromium exited {result.returncode} without a screenshot:\n{result.stderr[-3000:]}"
    )
    return png


def near(pixel: tuple[int, ...], color: tuple[int, int, int], tolerance: int = 12) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(pixel[:3], color, strict=True))


def test_the_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    png = screenshot(render(tmp_path), tmp_path)
    keep = os.environ.get("RINGLEADER_REPORT_SCREENSHOT")
    if keep:
        shutil.copyfile(png, keep)

    with Image.open(png) as image:
        assert image.format == "PNG"
        assert image.size == (WIDTH, HEIGHT)
        rgb = image.convert("RGB")
    colors = rgb.getcolors(maxcolors=WIDTH * HEIGHT)
    assert colors is not None
    by_count = sorted(colors, reverse=True)
    background_share = by_count[0][0] / (WIDTH * HEIGHT)
    assert len(colors) > 500, f"only {len(colors)} colours: a blank or broken page"
    assert background_share < 0.8, f"{background_share:.0%} of the page is one colour"
    red = sum(count for count, pixel in colors if near(pixel, ROOT_CAUSE_RED))
    banner = sum(count for count, pixel in colors if near(pixel, FAILED_BANNER, 3))
    assert red > 1000, f"the ranks chart did not load ({red} root-cause pixels)"
    assert banner > 5000, f"the failure banner is missing ({banner} pixels)"
