"""What `ringleader local` gives each host beyond its configuration: data channels as
SageMaker lays them out, environment variables, GPUs, shared memory, CPU and memory limits.
Pure, apart from counting the machine's GPUs."""

import argparse
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ringleader.config.hyperparameters import as_count, as_seconds, as_size
from ringleader.core import exitcodes
from ringleader.core.errors import ConfigError
from ringleader.core.restart_policy import parse_restart_on
from ringleader.tools.local.errors import UsageError

_T = TypeVar("_T")

DATA_DIR = "/opt/ml/input/data"
FILE_MODE, PIPE_MODE = "file", "pipe"
REPLICATED, BY_HOST = "replicated", "by-host"
# SageMaker's ChannelName: 1-64 of letters, digits, '.', '-' and '_'.
_CHANNEL = re.compile(r"[A-Za-z0-9._-]{1,64}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DEFAULT_SHM = "1g"  # Docker's 64 MB /dev/shm breaks PyTorch DataLoader workers and NCCL


@dataclass(frozen=True)
class Channel:
    name: str
    source: str  # a directory or file on this machine, or s3://bucket/prefix
    mode: str = FILE_MODE
    sharding: str = REPLICATED
    content_type: str | None = None

    @property
    def from_s3(self) -> bool:
        return self.source.lower().startswith("s3://")


def parse_channels(
    inputs: Sequence[str],
    modes: Sequence[str] = (),
    shardings: Sequence[str] = (),
    content_types: Sequence[str] = (),
) -> tuple[Channel, ...]:
    """`--input NAME=SOURCE` (repeatable) with `--input-mode NAME=pipe`,
    `--input-sharding NAME=by-host` and `--content-type NAME=TYPE` for some of them."""
    sources: dict[str, str] = {}
    for item in inputs:
        name, sep, source = item.partition("=")
        if not sep or not source:
            raise UsageError(
                f"--input: expected NAME=PATH or NAME=s3://bucket/prefix, got {item!r}"
            )
        if not _CHANNEL.fullmatch(name):
            raise UsageError(
                f"--input: channel name {name!r}: SageMaker allows 1-64 letters, digits, "
                "'.', '-' and '_'"
            )
        if name in sources:
            raise UsageError(f"--input: channel {name!r} is given twice")
        sources[name] = source
    mode = _per_channel("--input-mode", modes, sources, (FILE_MODE, PIPE_MODE))
    sharding = _per_channel("--input-sharding", shardings, sources, (REPLICATED, BY_HOST))
    types = _per_channel("--content-type", content_types, sources, None)
    return tuple(
        Channel(
            name,
            source,
            mode.get(name, FILE_MODE),
            sharding.get(name, REPLICATED),
            types.get(name),
        )
        for name, source in sources.items()
    )


def _per_channel(
    option: str, items: Sequence[str], channels: Mapping[str, str], choices: tuple[str, ...] | None
) -> dict[str, str]:
    values = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not value:
            raise UsageError(f"{option}: expected NAME=VALUE, got {item!r}")
        if name not in channels:
            raise UsageError(f"{option}: {name!r} is not a channel given with --input")
        if choices is not None and value not in choices:
            raise UsageError(f"{option}: expected {' or '.join(choices)} for {name}, got {value!r}")
        values[name] = value
    return values


def input_data_config(channels: Sequence[Channel]) -> dict[str, dict[str, str]]:
    """inputdataconfig.json as SageMaker writes it."""
    config = {}
    for channel in channels:
        entry = {
            "TrainingInputMode": "Pipe" if channel.mode == PIPE_MODE else "File",
            "S3DistributionType": "ShardedByS3Key"
            if channel.sharding == BY_HOST
            else "FullyReplicated",
            "RecordWrapperType": "None",
        }
        if channel.content_type:
            entry["ContentType"] = channel.content_type
        config[channel.name] = entry
    return config


def shard(files: Sequence[str], hosts: int, index: int) -> list[str]:
    """The files host `index` (0-based) of `hosts` gets, like ShardedByS3Key: sorted, dealt out
    in turn, so the hosts' shards are disjoint and together hold every file."""
    return [name for position, name in enumerate(sorted(files)) if position % hosts == index]


def parse_env(items: Sequence[str], option: str = "--env") -> dict[str, str]:
    expected = f"{option}: expected KEY=VALUE with KEY a variable name"
    return dict(_assignment(item, expected) for item in items)


def parse_env_file(text: str, source: str) -> dict[str, str]:
    """Docker's --env-file format: KEY=VALUE lines, `#` comments and blank lines ignored."""
    return dict(
        _assignment(line.strip(), f"--env-file: {source}:{number}: expected KEY=VALUE", line)
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.strip().startswith("#")
    )


def _assignment(text: str, expected: str, shown: str | None = None) -> tuple[str, str]:
    """(KEY, VALUE) of `KEY=VALUE` with KEY a variable name; else a UsageError that says what
    was expected and quotes `shown` (default `text`) without its value."""
    key, sep, value = text.partition("=")
    if not sep or not _ENV_NAME.fullmatch(key):
        raise UsageError(f"{expected}, got {_shown(text if shown is None else shown)}")
    return key, value


def parse_host_env(items: Sequence[str], hosts: Sequence[str]) -> dict[str, dict[str, str]]:
    """`--host-env HOST:KEY=VALUE`: a variable for one host only."""
    values: dict[str, dict[str, str]] = {}
    for item in items:
        host, sep, assignment = item.partition(":")
        if not sep or host not in hosts:
            raise UsageError(
                f"--host-env: expected HOST:KEY=VALUE with HOST one of {', '.join(hosts)}, "
                f"got {_shown(item)}"
            )
        values.setdefault(host, {}).update(parse_env([assignment], "--host-env"))
    return values


def _shown(item: str) -> str:
    """An item as quoted in an error, without a value that may be a secret."""
    key, sep, _ = item.partition("=")
    return repr(f"{key}=..." if sep else item)


def parse_size(option: str, value: str) -> int:
    """Docker's size syntax (`1g`, `512m`, `100000000`) in bytes."""
    try:
        return as_size(option, value)
    except ConfigError as error:
        raise UsageError(f"{option}: {error.problem}") from None


def gpu_plan(gpus: str | None, available: int, hosts: int) -> list[list[str] | int | None]:
    """Per host: None (no GPU), -1 (all GPUs), a count, or the device ids it gets.

    `all`: every host sees every GPU; `N`: each host gets N (Docker picks them);
    `per-host`: the machine's GPUs split evenly, each host its own."""
    if gpus is None:
        return [None] * hosts
    if available == 0:
        raise UsageError(f"--gpus {gpus}: no GPU found on this machine (/proc/driver/nvidia/gpus)")
    if gpus == "all":
        return [-1] * hosts
    if gpus == "per-host":
        each = available // hosts
        if each == 0:
            raise UsageError(f"--gpus per-host: {available} GPU(s) for {hosts} hosts")
        return [[str(index * each + gpu) for gpu in range(each)] for index in range(hosts)]
    if not gpus.isdigit() or int(gpus) < 1:
        raise UsageError(f"--gpus: expected all, per-host or a number, got {gpus!r}")
    if int(gpus) > available:
        raise UsageError(f"--gpus {gpus}: only {available} GPU(s) on this machine")
    return [int(gpus)] * hosts


def gpus_per_host(plan: Sequence[list[str] | int | None], available: int) -> int:
    """How many GPUs each host sees (the default processes per host)."""
    first = plan[0] if plan else None
    if first is None:
        return 0
    if isinstance(first, list):
        return len(first)
    return available if first == -1 else first


def resource_warnings(
    hosts: int, cpus: float | None, memory: int | None, machine_cpus: int, machine_memory: int
) -> list[str]:
    warnings = []
    if cpus is not None and cpus * hosts > machine_cpus:
        warnings.append(
            f"--cpus {cpus:g} x {hosts} hosts asks for more than the machine's {machine_cpus} CPUs"
        )
    if memory is not None and memory * hosts > machine_memory:
        warnings.append(
            f"--memory x {hosts} hosts asks for {memory * hosts / (1 << 30):.1f} GiB, more than "
            f"the machine's {machine_memory / (1 << 30):.1f} GiB"
        )
    return warnings


def available_gpus() -> int:
    """The GPUs of this machine (NVIDIA's driver lists one directory per GPU)."""
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


def add_restart_options(parser: argparse.ArgumentParser) -> None:
    """`--max-restarts`, `--restart-backoff` and `--restart-on`, checked before anything starts
    (exit 2)."""
    parser.add_argument(
        "--max-restarts",
        type=_count,
        metavar="N",
        help="after a rank fails or the job hangs, stop every rank and start them all again "
        "in place, up to N times (ringleader_max_restarts; default: 0)",
    )
    parser.add_argument(
        "--restart-backoff",
        type=_seconds,
        metavar="SECONDS",
        help="the wait between two attempts (ringleader_restart_backoff; default: 1)",
    )
    parser.add_argument(
        "--restart-on",
        type=_argument(_checked_restart_on),
        metavar="CAUSES",
        help="what a restart may cure: rank-failure, hang, lost-host, health, straggler, "
        "codes:N,... or not-codes:N,... (ringleader_restart_on; default: all five causes); a "
        f"failure it refuses ends the job with {exitcodes.DO_NOT_RETRY} (do not retry)",
    )


def _checked_restart_on(field: str, value: str) -> str:
    parse_restart_on(field, value)
    return value


def restart_settings(args: argparse.Namespace) -> dict[str, str]:
    """The ringleader_* settings (without the prefix) the restart options give."""
    settings = {}
    if args.max_restarts is not None:
        settings["max_restarts"] = str(args.max_restarts)
    if args.restart_backoff is not None:
        settings["restart_backoff"] = f"{args.restart_backoff:g}"
    if args.restart_on is not None:
        settings["restart_on"] = args.restart_on
    return settings


def _argument(parse: Callable[[str, str], _T]) -> Callable[[str], _T]:
    """An argparse type from a hyperparameter parser: its problem becomes argparse's error."""

    def convert(text: str) -> _T:
        try:
            return parse("value", text)
        except ConfigError as error:
            raise argparse.ArgumentTypeError(error.problem) from None

    return convert


_count = _argument(as_count)
_seconds = _argument(as_seconds)
