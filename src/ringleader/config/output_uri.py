"""The output URI (`ringleader_output_uri`): where archives go when the job runs outside SageMaker.

Pure: parsing and the destination of one host's archive. Part of the job's configuration;
whether the bucket exists or the directory can be made is checked before the job starts by
ringleader.artifacts (check_output_uri), which delivers the archives there at its end.
"""

import posixpath
import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

from ringleader.aws.uri import bucket_name_problem, split_s3_uri
from ringleader.core.errors import ConfigError

FIELD = "ringleader_output_uri"
EXPECTED = "s3://bucket[/prefix], file:///absolute/path or an absolute path"

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_UNSAFE_COMPONENT = re.compile(r"[^A-Za-z0-9._-]")
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@")


@dataclass(frozen=True)
class OutputUri:
    scheme: Literal["s3", "file"]
    bucket: str = ""  # s3 only
    prefix: str = ""  # s3 only: no leading or trailing "/", may be empty
    path: str = ""  # file only: absolute and normalized

    def __str__(self) -> str:
        if self.scheme == "s3":
            return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        return self.path

    def key(self, host: str, name: str) -> str:
        """The S3 key of one host's archive: `<prefix>/<host>/<name>`."""
        parts = [self.prefix] if self.prefix else []
        return "/".join([*parts, path_component(host), name])

    def destination(self, host: str, name: str) -> str:
        """Where one host's archive goes, as shown to the user (s3://... or a path)."""
        if self.scheme == "s3":
            return f"s3://{self.bucket}/{self.key(host, name)}"
        return posixpath.join(self.path, path_component(host), name)


def parse_output_uri(text: str) -> OutputUri:
    """`s3://bucket[/prefix]`, `file:///abs/path` or `/abs/path`; else ConfigError."""
    stripped = text.strip()
    shown = shown_uri(stripped)
    if not stripped:
        raise _error(f"empty; expected {EXPECTED}")
    if "\x00" in stripped:
        raise _error(f"contains a NUL character; expected {EXPECTED}")
    match = _SCHEME.match(stripped)
    if match is None:
        if stripped.startswith("/"):
            return OutputUri("file", path=_absolute(stripped))
        if ":" in stripped.split("/", 1)[0]:
            raise _error(f"{shown!r} is not a URI this toolkit knows; expected {EXPECTED}")
        raise _error(f"{shown!r} is a relative path; expected {EXPECTED}")
    scheme = match.group(1).lower()
    rest = stripped[match.end() :]
    if shown != stripped:  # user:password@ before the host
        raise _error(f"{shown!r}: credentials do not belong in the URI; expected {EXPECTED}")
    if scheme == "s3":
        return _parse_s3(stripped, rest)
    if scheme == "file":
        return _parse_file(stripped, rest)
    raise _error(f"unknown scheme {scheme!r} in {shown!r}; expected {EXPECTED}")


def _parse_s3(text: str, rest: str) -> OutputUri:
    bucket, prefix = split_s3_uri(text)
    if not bucket:
        raise _error(f"no bucket name in s3://{rest}; expected s3://bucket[/prefix]")
    problem = bucket_name_problem(bucket)
    if problem:
        raise _error(f"invalid S3 bucket name {bucket!r}: {problem}")
    return OutputUri("s3", bucket=bucket, prefix=prefix.strip("/"))


def _parse_file(text: str, rest: str) -> OutputUri:
    authority, slash, path = rest.partition("/")
    if authority not in ("", "localhost"):
        raise _error(
            f"{text!r} names the host {authority!r}; a file URI must be local: file:///absolute/path"
        )
    if not slash:
        raise _error(f"{text!r} has no path; expected file:///absolute/path")
    return OutputUri("file", path=_absolute("/" + unquote(path)))


def _absolute(path: str) -> str:
    return posixpath.normpath("/" + path.lstrip("/"))  # normpath keeps a leading "//"


def shown_uri(text: str) -> str:
    """`text` with any `user:password@` before the host masked, safe to show in messages."""
    return _USERINFO.sub(r"\1***@", text)


def _error(problem: str) -> ConfigError:
    return ConfigError(FIELD, problem)


def path_component(name: str) -> str:
    """`name` made safe as one path segment (host names already are: algo-1, algo-1-abcde)."""
    safe = _UNSAFE_COMPONENT.sub("_", name)
    return "_" + safe if safe in ("", ".", "..") else safe
