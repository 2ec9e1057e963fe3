"""The comparison page opened in a real headless Chromium: it renders, the scaling chart
loaded, and the table the browser built has the CSV's rows, cell for cell.

Like test_report_browser.py this fails, rather than skips, when chromium is missing.
"""

from __future__ import annotations

import csv
import os
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image

from ringleader.tools.report.charts import ACCENT, BAR
from tests.report.compare_runs import FakeRun, ringleader, write_study
from tests.report.test_report_browser import WIDTH, headless, near, screenshot

pytestmark = pytest.mark.browser

HEIGHT = 1400


def rgb(color: str) -> tuple[int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


class TableRows(HTMLParser):
    """The cells of the table inside #compare-table, header included, as the DOM has them."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._inside, self._cell = False, None  # type: bool, list[str] | None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "div" and ("id", "compare-table") in attrs:
            self._inside = True
        elif self._inside and tag == "tr":
            self.rows.append([])
        elif self._inside and tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._inside = False
        elif self._inside and tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def compare_page(tmp_path: Path) -> Path:
    runs = write_study(
        tmp_path / "runs",
        {
            "one": FakeRun(1, 2, 100.0),
            "two": FakeRun(2, 2, 92.0),
            "three": FakeRun(3, 2, 85.0),
            "failed": FakeRun(4, 2, 80.0, exit_code=3),
        },
    )
    out_dir = tmp_path / "compare"
    code, _, err = ringleader(
        "report",
        "--compare",
        *map(str, runs),
        "--throughput",
        "images_per_sec",
        "--instance-type",
        "p3.16xlarge",
        "--out",
        str(out_dir),
    )
    assert code == 3, err  # the failed run is left out
    return out_dir / "index.html"


def test_the_compare_page_renders_with_its_chart_and_the_csvs_rows(tmp_path: Path) -> None:
    index = compare_page(tmp_path)
    dom = headless(index, tmp_path, "--dump-dom", f"--window-size={WIDTH},{HEIGHT}")
    assert dom.returncode == 0, dom.stderr[-3000:]
    parser = TableRows()
    parser.feed(dom.stdout)
    with (index.parent / "compare.csv").open(newline="") as file:
        expected = list(csv.reader(file))
    assert len(expected) == 5  # the header and four runs
    assert parser.rows == expected
    assert parser.rows[4][expected[0].index("status")] == "left out: failed with exit code 3"

    png = screenshot(index, tmp_path, HEIGHT)
    keep = os.environ.get("RINGLEADER_REPORT_SCREENSHOT")
    if keep:
        shutil.copyfile(png, keep)
    with Image.open(png) as image:
        assert image.size == (WIDTH, HEIGHT)
        colors = image.convert("RGB").getcolors(maxcolors=WIDTH * HEIGHT)
    assert colors is not None and len(colors) > 300, "a blank or broken page"
    throughput = sum(count for count, pixel in colors if near(pixel, rgb(BAR)))
    efficiency = sum(count for count, pixel in colors if near(pixel, rgb(ACCENT)))
    assert throughput > 300, f"the throughput line is missing ({throughput} pixels)"
    assert efficiency > 300, f"the efficiency line is missing ({efficiency} pixels)"
