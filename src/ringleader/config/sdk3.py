"""SageMaker Python SDK v3's job, `ModelTrainer(distributed=Ringleader(...))`, as ringleader
reads it.

ModelTrainer runs Ringleader's driver (ringleader/sagemaker/driver/) in every container with
v3's environment: SM_DISTRIBUTED_CONFIG (the Ringleader object's fields as JSON), SM_ENTRY_SCRIPT
and SM_SOURCE_DIR (the user's SourceCode), the user's hyperparameters in hyperparameters.json.
The driver marks the job (DRIVER_MARK) and starts the entry point, which turns it into the
hyperparameters a v2 estimator sends: one parser (config/job.py) checks and reads both, and the
Ringleader object checks its fields with the same rules when the user makes it.
"""

from collections.abc import Mapping
from typing import Any

from ringleader.config import hyperparameters as hp
from ringleader.config.job import (
    DISTRIBUTIONS,
    ENABLED_KEYS,
    MPI,
    NO_DISTRIBUTION,
    PROCESSES_PER_HOST_KEY,
    RINGLEADER_PREFIX,
    ConfigFiles,
    check_values,
)
from ringleader.core.errors import ConfigError
from ringleader.core.jsontext import parse_json

DRIVER_MARK = "RINGLEADER_SDK3_DRIVER"  # set by the driver: the job is v3's
DISTRIBUTED_CONFIG = "SM_DISTRIBUTED_CONFIG"
ENTRY_SCRIPT = "SM_ENTRY_SCRIPT"
SOURCE_DIR = "SM_SOURCE_DIR"
FIELDS = ("distribution", "processes_per_host", "mpi_options", "settings")


def ringleader_hyperparameters(
    distribution: str,
    processes_per_host: int | None,
    mpi_options: str | None,
    settings: Mapping[str, Any],
) -> dict[str, Any]:
    """The hyperparameters a v2 estimator sends for these Ringleader(...) fields: the
    distribution's switch, the processes per host and mpirun's options where SageMaker puts
    them, each setting with its ringleader_ prefix. Raises ConfigError naming the field."""
    if distribution not in DISTRIBUTIONS:
        raise ConfigError(
            "distribution", f"expected one of {', '.join(DISTRIBUTIONS)}, got {distribution!r}"
        )
    values: dict[str, Any] = {}
    if distribution != NO_DISTRIBUTION:
        values[ENABLED_KEYS[distribution]] = True
    if processes_per_host is not None:
        mpi = distribution == MPI
        values["sagemaker_mpi_num_of_processes_per_host" if mpi else PROCESSES_PER_HOST_KEY] = (
            processes_per_host
        )
    if mpi_options:
        if distribution != MPI:
            raise ConfigError("mpi_options", f"only for distribution 'mpi', not {distribution!r}")
        values["sagemaker_mpi_custom_mpi_options"] = mpi_options
    if not isinstance(settings, Mapping):
        raise ConfigError("settings", f"expected a mapping of settings, got {settings!r}")
    for name, value in settings.items():
        key = name if name.startswith(RINGLEADER_PREFIX) else RINGLEADER_PREFIX + name
        values[key] = value
    return values


def check_fields(
    distribution: str,
    processes_per_host: int | None,
    mpi_options: str | None,
    settings: Mapping[str, Any],
) -> None:
    """Everything about Ringleader(...)'s fields that does not depend on the hosts, checked
    where the user makes the object. Raises ConfigError."""
    check_values(
        ringleader_hyperparameters(distribution, processes_per_host, mpi_options, settings)
    )


def sdk3_hyperparameters(raw: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """v3's job as a v2 estimator's hyperparameters: the user's, the program and its code,
    Ringleader's fields. A setting in both the hyperparameters and Ringleader(settings=...)
    must agree."""
    config = _distributed_config(environ)
    entry_script = environ.get(ENTRY_SCRIPT, "")
    if not entry_script:
        raise ConfigError(
            ENTRY_SCRIPT,
            "missing: give ModelTrainer a SourceCode(source_dir=..., entry_script=...)",
        )
    fields = ringleader_hyperparameters(
        str(config.get("distribution", MPI)),
        config.get("processes_per_host"),
        config.get("mpi_options"),
        config.get("settings") or {},
    )
    for key, value in fields.items():
        if key in raw and hp.decode_value(raw[key]) != hp.decode_value(value):
            raise ConfigError(
                key,
                f"{raw[key]!r} in the hyperparameters, {value!r} in Ringleader(...): set it once",
            )
    values = {**raw, **fields, "sagemaker_program": entry_script}
    if environ.get(SOURCE_DIR):
        values["sagemaker_submit_directory"] = environ[SOURCE_DIR]
    return values


def _distributed_config(environ: Mapping[str, str]) -> dict[str, Any]:
    text = environ.get(DISTRIBUTED_CONFIG)
    if text is None:
        raise ConfigError(DISTRIBUTED_CONFIG, "missing: ModelTrainer sets it from Ringleader(...)")
    try:
        config = parse_json(text)
    except ValueError as error:
        raise ConfigError(DISTRIBUTED_CONFIG, f"not JSON: {error}") from None
    if not isinstance(config, dict):
        raise ConfigError(DISTRIBUTED_CONFIG, f"expected a JSON object, got {text!r}")
    unknown = sorted(set(config) - set(FIELDS))
    if unknown:
        raise ConfigError(
            DISTRIBUTED_CONFIG,
            f"unknown field(s) {unknown}: made by another version of ringleader.sagemaker? "
            f"This image's ringleader knows {list(FIELDS)}",
        )
    return config


def config_files(environ: Mapping[str, str]) -> ConfigFiles:
    """Where the entry point reads the job: v3's job when the driver started it."""
    if environ.get(DRIVER_MARK) != "1":
        return ConfigFiles()
    return ConfigFiles(translate=lambda raw: sdk3_hyperparameters(raw, environ))
