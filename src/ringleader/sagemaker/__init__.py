"""ringleader as SageMaker Python SDK v3's distributed driver:

    from ringleader.sagemaker import Ringleader
    from sagemaker.train import ModelTrainer
    from sagemaker.train.configs import SourceCode

    trainer = ModelTrainer(
        training_image=IMAGE,  # prepared with `ringleader image setup`
        source_code=SourceCode(source_dir="src", entry_script="train.py"),
        distributed=Ringleader(distribution="mpi", settings={"hang_timeout": 300}),
        ...
    )

`Ringleader` needs `sagemaker>=3` (the `sagemaker` extra); it is imported from sagemaker.train
only when it is first used, so `import ringleader` never needs the SDK.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ringleader.sagemaker.v3 import Ringleader as Ringleader


def __getattr__(name: str) -> Any:
    if name == "Ringleader":
        from ringleader.sagemaker.v3 import Ringleader

        return Ringleader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
