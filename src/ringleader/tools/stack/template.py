"""Loading cfn/training-vpc.yaml and checking parameter values against it, before any AWS call."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TEMPLATE_FILE_NAME = "training-vpc.yaml"
# CreateStack takes a TemplateBody of at most 51,200 bytes; larger ones need TemplateURL.
MAX_TEMPLATE_BODY_BYTES = 51_200


class TemplateError(ValueError):
    """The template file is missing or malformed, or a value breaks its parameter rules."""


@dataclass(frozen=True)
class Template:
    path: Path
    body: str
    document: Mapping[str, Any]

    @property
    def parameters(self) -> Mapping[str, Mapping[str, Any]]:
        parameters: Mapping[str, Mapping[str, Any]] = self.document.get("Parameters", {})
        return parameters

    @property
    def output_names(self) -> frozenset[str]:
        return frozenset(self.document.get("Outputs", {}))


def default_template_path() -> Path:
    """cfn/training-vpc.yaml of the source tree this package runs from."""
    return Path(__file__).resolve().parents[4] / "cfn" / TEMPLATE_FILE_NAME


def parse_template(body: str, path: Path) -> Template:
    if len(body.encode()) > MAX_TEMPLATE_BODY_BYTES:
        raise TemplateError(
            f"{path} has {len(body.encode())} bytes; CreateStack accepts at most "
            f"{MAX_TEMPLATE_BODY_BYTES}"
        )
    import yaml  # PyYAML comes with ringleader[tools]; the training image goes without it

    try:
        document = yaml.safe_load(body)
    except yaml.YAMLError as error:
        raise TemplateError(f"{path} is not plain YAML (short tags like !Ref?): {error}") from None
    if not isinstance(document, dict) or not isinstance(document.get("Resources"), dict):
        raise TemplateError(f"{path} is not a CloudFormation template (no Resources)")
    parameters = document.get("Parameters", {})
    if not isinstance(parameters, dict) or not all(
        isinstance(spec, dict) for spec in parameters.values()
    ):
        raise TemplateError(f"{path}: Parameters must map names to definitions")
    return Template(path=path, body=body, document=document)


def load_template(path: Path | None = None) -> Template:
    path = path or default_template_path()
    try:
        body = path.read_text(encoding="utf-8")
    except OSError as error:
        raise TemplateError(f"cannot read the template {path}: {error.strerror}") from None
    return parse_template(body, path)


def check_parameters(template: Template, values: Mapping[str, str]) -> None:
    """Every value names a template parameter and satisfies its AllowedPattern/AllowedValues;
    every parameter without a Default has a value."""
    specs = template.parameters
    unknown = sorted(set(values) - set(specs))
    if unknown:
        raise TemplateError(f"{template.path} has no parameter(s) {', '.join(unknown)}")
    missing = sorted(
        name for name, spec in specs.items() if "Default" not in spec and name not in values
    )
    if missing:
        raise TemplateError(f"{template.path} needs value(s) for {', '.join(missing)}")
    for name, value in values.items():
        spec = specs[name]
        pattern = spec.get("AllowedPattern")
        if pattern is not None and re.fullmatch(str(pattern), value) is None:
            raise TemplateError(f"{name}={value!r} does not match the template's {pattern}")
        allowed = spec.get("AllowedValues")
        if allowed is not None and value not in [str(choice) for choice in allowed]:
            raise TemplateError(f"{name}={value!r} is not one of {allowed}")
