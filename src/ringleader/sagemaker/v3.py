"""`Ringleader`, a SageMaker Python SDK v3 DistributedConfig: ModelTrainer copies this package's
driver/ directory into every container's sm_drivers channel and runs its driver script there,
which hands the job to ringleader's entry point (config/sdk3.py reads it)."""

from pathlib import Path
from typing import Any

from pydantic import Field, model_validator
from sagemaker.train.distributed import DistributedConfig

from ringleader.config.sdk3 import check_fields
from ringleader.core.errors import ConfigError

DRIVER_DIR = Path(__file__).with_name("driver")
DRIVER_SCRIPT = "ringleader_driver.py"


class Ringleader(DistributedConfig):  # type: ignore[misc]
    """ringleader supervises the job on every host: `mpi` (mpirun over ssh),
    `torch_distributed` (torchrun's environment), `parameter_server` and
    `multi_worker_mirrored_strategy` (TensorFlow; MXNet's parameter servers too), or `none`
    (every host runs the script once).

    Parameters:
        distribution: one of mpi, torch_distributed, parameter_server,
            multi_worker_mirrored_strategy, none.
        processes_per_host: ranks on each host (default: the GPUs found, else 1).
        mpi_options: more mpirun options, for `mpi` (as sagemaker_mpi_custom_mpi_options).
        settings: ringleader_* settings, with or without the prefix, e.g.
            {"hang_timeout": 300, "max_restarts": 2}.
    """

    distribution: str = "mpi"
    processes_per_host: int | None = None
    mpi_options: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> "Ringleader":
        try:
            check_fields(
                self.distribution, self.processes_per_host, self.mpi_options, self.settings
            )
        except ConfigError as error:
            raise ValueError(f"Ringleader(...): {error}") from None
        return self

    @property
    def driver_dir(self) -> str:
        return str(DRIVER_DIR)

    @property
    def driver_script(self) -> str:
        return DRIVER_SCRIPT
