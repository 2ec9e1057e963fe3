"""cfn-lint over cfn/training-vpc.yaml: no errors, warnings or informational findings."""

from __future__ import annotations

from pathlib import Path

from cfnlint.api import ManualArgs, lint, lint_file

TEMPLATE_PATH = Path(__file__).resolve().parents[2] / "cfn" / "training-vpc.yaml"
REGIONS = ["us-east-1", "us-west-2", "eu-west-1", "ap-northeast-1"]


def _describe(matches: list[object]) -> str:
    return "\n".join(str(match) for match in matches)


def test_template_is_lint_clean_in_several_regions() -> None:
    matches = lint_file(TEMPLATE_PATH, config=ManualArgs(regions=REGIONS, include_checks=["I"]))
    assert matches == [], _describe(list(matches))


def test_the_linter_does_find_errors() -> None:
    """The check above can fail: a broken copy of the template is reported."""
    broken = TEMPLATE_PATH.read_text().replace("IpProtocol: tcp", "IpProtocol: teapot", 1)
    assert broken != TEMPLATE_PATH.read_text()
    matches = lint(broken, regions=["us-east-1"])
    assert any("teapot" in str(match) for match in matches), _describe(list(matches))
