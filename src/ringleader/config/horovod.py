"""Horovod settings as hyperparameters, and which files (timeline, autotune log) to keep.

`ringleader_horovod_*` hyperparameters become HOROVOD_* variables for every rank. The seed
style (`-x HOROVOD_TIMELINE=... -x HOROVOD_AUTOTUNE_LOG=...` in the custom MPI options) keeps
working. Either way the files must be under /opt/ml/output; after the job
ringleader.output.kept_files copies them into /opt/ml/output/data, the only part of it
SageMaker uploads.
"""

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from ringleader.config import hyperparameters as hp
from ringleader.core import paths
from ringleader.core.errors import ConfigError

OUTPUT_ROOT = PurePosixPath(str(paths.OUTPUT_DIR))
DEFAULT_TIMELINE = str(paths.DATA_DIR / "horovod_timeline.json")
DEFAULT_AUTOTUNE_LOG = str(paths.DATA_DIR / "horovod_autotune_log.csv")
FILE_VARIABLES = ("HOROVOD_TIMELINE", "HOROVOD_AUTOTUNE_LOG")

KEYS = (
    "ringleader_horovod_timeline",
    "ringleader_horovod_timeline_mark_cycles",
    "ringleader_horovod_autotune",
    "ringleader_horovod_autotune_log",
    "ringleader_horovod_fusion_threshold",
    "ringleader_horovod_cycle_time",
    "ringleader_horovod_hierarchical_allreduce",
)


def horovod_env(values: Mapping[str, Any]) -> dict[str, str]:
    """HOROVOD_* variables from the ringleader_horovod_* hyperparameters (validated)."""
    env: dict[str, str] = {}
    timeline = values.get("ringleader_horovod_timeline")
    if timeline is not None:
        path = _file_setting("ringleader_horovod_timeline", timeline, DEFAULT_TIMELINE)
        if path:
            env["HOROVOD_TIMELINE"] = path
    if _flag(values, "ringleader_horovod_timeline_mark_cycles"):
        env["HOROVOD_TIMELINE_MARK_CYCLES"] = "1"
    if _flag(values, "ringleader_horovod_autotune"):
        env["HOROVOD_AUTOTUNE"] = "1"
        log = values.get("ringleader_horovod_autotune_log", True)
        path = _file_setting("ringleader_horovod_autotune_log", log, DEFAULT_AUTOTUNE_LOG)
        if path:
            env["HOROVOD_AUTOTUNE_LOG"] = path
    elif "ringleader_horovod_autotune_log" in values:
        raise ConfigError(
            "ringleader_horovod_autotune_log", "needs ringleader_horovod_autotune set to true"
        )
    if "ringleader_horovod_fusion_threshold" in values:
        key = "ringleader_horovod_fusion_threshold"
        env["HOROVOD_FUSION_THRESHOLD"] = str(hp.as_positive_int(key, values[key]))
    if "ringleader_horovod_cycle_time" in values:
        key = "ringleader_horovod_cycle_time"
        env["HOROVOD_CYCLE_TIME"] = f"{hp.as_positive_seconds(key, values[key]):g}"
    if _flag(values, "ringleader_horovod_hierarchical_allreduce"):
        env["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "1"
    return env


def files_to_keep(env: Mapping[str, str], forwarded: Mapping[str, str]) -> tuple[str, ...]:
    """The timeline and autotune log paths a job writes; each must be under /opt/ml/output.

    `forwarded` holds NAME=VALUE pairs from -x in the custom MPI options, which win."""
    found = {name: env[name] for name in FILE_VARIABLES if name in env}
    found.update({name: forwarded[name] for name in FILE_VARIABLES if name in forwarded})
    for name, value in found.items():
        field = (
            "sagemaker_mpi_custom_mpi_options"
            if name in forwarded
            else {"HOROVOD_TIMELINE": KEYS[0], "HOROVOD_AUTOTUNE_LOG": KEYS[3]}[name]
        )
        _check_under_output(field, f"{name}={value}", value)
    return tuple(sorted(set(found.values())))


def _flag(values: Mapping[str, Any], key: str) -> bool:
    return key in values and hp.as_bool(key, values[key])


def _file_setting(field: str, value: Any, default: str) -> str | None:
    """true -> the default path, false -> off, a string -> that path (under /opt/ml/output)."""
    if isinstance(value, bool) or (isinstance(value, str) and value.lower() in ("true", "false")):
        return default if hp.as_bool(field, value) else None
    if not isinstance(value, str) or not value:
        raise ConfigError(field, f"expected true, false or a path under {OUTPUT_ROOT}")
    _check_under_output(field, value, value)
    return value


def _check_under_output(field: str, shown: str, value: str) -> None:
    path = PurePosixPath(value)
    if not path.is_absolute() or ".." in path.parts or OUTPUT_ROOT not in path.parents:
        raise ConfigError(
            field,
            f"{shown} is not under {OUTPUT_ROOT}: files elsewhere are lost when the job ends",
        )
