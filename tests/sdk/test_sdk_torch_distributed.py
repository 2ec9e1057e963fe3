"""SageMaker Python SDK v2 local mode: the `PyTorch` estimator with
`distribution={'torch_distributed': {'enabled': True}}` on 3 instances of our PyTorch image
(ringleader:horovod), running examples/ddp_train.py as it would run under torchrun."""

import json
from typing import Any

import pytest

from tests.container.conftest import HOROVOD_IMAGE
from tests.sdk.conftest import SdkJob, assert_hosts_agree, framework_estimator

pytestmark = [pytest.mark.sdk, pytest.mark.container]


def pytorch_estimator(sdk_job: SdkJob, name: str, **hyperparameters: object) -> Any:
    from sagemaker.pytorch import PyTorch

    return framework_estimator(
        PyTorch,
        sdk_job,
        image=HOROVOD_IMAGE,
        entry_point="ddp_train.py",
        framework_version="2.1",
        distribution={"torch_distributed": {"enabled": True}},
        name=name,
        # the SDK has no processes-per-host field for torch_distributed: ringleader's setting
        hyperparameters={"ringleader_processes_per_host": 2, **hyperparameters},
    )


def test_pytorch_estimator_with_torch_distributed_trains_on_every_rank(sdk_job, channel):
    estimator = pytorch_estimator(sdk_job, "ringleader-sdk-ddp", steps=20, **{"log-interval": 10})
    sdk_job.fit(estimator, {"training": f"file://{channel}"})

    assert sdk_job.error is None
    translated = estimator.hyperparameters()  # what the SDK made of `distribution`
    assert json.loads(translated["sagemaker_torch_distributed_enabled"]) is True
    assert "sagemaker_mpi_enabled" not in translated
    assert_hosts_agree(sdk_job, 0)
    files = sdk_job.output_tar()
    logs = b"".join(content for name, content in files.items() if name.endswith(".log"))
    hosts = sorted(sdk_job.hosts)
    for rank in range(6):
        expected = (
            f"env rank={rank} local_rank={rank % 2} world=6 group_rank={rank // 2} "
            f"master={hosts[0]}:7777 host={hosts[rank // 2]} allreduce=15 ok"
        )
        assert expected.encode() in logs, expected
    assert (sdk_job.output / "model.tar.gz").is_file()


def test_pytorch_estimator_with_a_failing_rank_names_it_on_every_host(sdk_job, channel):
    estimator = pytorch_estimator(
        sdk_job, "ringleader-sdk-ddp-fail", steps=400, **{"fail-rank": 3, "fail-code": 3}
    )
    sdk_job.fit(estimator, {"training": f"file://{channel}"})

    assert isinstance(sdk_job.error, RuntimeError)
    assert str(sdk_job.error).endswith("Process exited with code: 3")
    headline = f"Rank 3 on host {sorted(sdk_job.hosts)[1]} exited with code 3."
    assert_hosts_agree(sdk_job, 3, headline)
    assert sdk_job.output_tar()["failure"].decode().startswith(headline)
