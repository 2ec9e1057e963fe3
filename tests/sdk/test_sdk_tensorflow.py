"""SageMaker Python SDK v2 local mode: the `TensorFlow` estimator with
`distribution={'parameter_server': {'enabled': True}}` on 3 instances of ringleader:tensorflow,
running examples/tf_ps_train.py in SageMaker's parameter-server layout."""

import json
from typing import Any

import pytest

from tests.container.conftest import TENSORFLOW_IMAGE
from tests.sdk.conftest import SdkJob, assert_hosts_agree, framework_estimator

pytestmark = [pytest.mark.sdk, pytest.mark.container]


def tensorflow_estimator(sdk_job: SdkJob, name: str, **hyperparameters: object) -> Any:
    from sagemaker.tensorflow import TensorFlow

    return framework_estimator(
        TensorFlow,
        sdk_job,
        image=TENSORFLOW_IMAGE,
        entry_point="tf_ps_train.py",
        framework_version="2.16",
        distribution={"parameter_server": {"enabled": True}},
        name=name,
        hyperparameters=hyperparameters,
    )


def test_tensorflow_estimator_with_parameter_servers(sdk_job, channel):
    estimator = tensorflow_estimator(sdk_job, "ringleader-sdk-tf-ps", steps=60)
    sdk_job.fit(estimator, {"training": f"file://{channel}"})

    assert sdk_job.error is None
    translated = estimator.hyperparameters()
    assert json.loads(translated["sagemaker_parameter_server_enabled"]) is True
    assert_hosts_agree(sdk_job, 0)
    files = sdk_job.output_tar()
    logs = b"".join(content for name, content in files.items() if name.endswith(".log"))
    hosts = sorted(sdk_job.hosts)
    assert f'"master": ["{hosts[0]}:2222"]'.encode() in logs
    assert b"done: master:0 ran" in logs
    for index in range(3):
        assert f"serving ps:{index} at grpc://".encode() in logs


def test_tensorflow_estimator_with_a_failing_worker(sdk_job, channel):
    estimator = tensorflow_estimator(
        sdk_job,
        "ringleader-sdk-tf-ps-fail",
        **{"fail-task": "worker:0", "fail-code": 3, "fail-step": 0},
    )
    sdk_job.fit(estimator, {"training": f"file://{channel}"})

    assert isinstance(sdk_job.error, RuntimeError)
    assert str(sdk_job.error).endswith("Process exited with code: 3")
    headline = f"Rank 2 (worker:0) on host {sorted(sdk_job.hosts)[1]} exited with code 3."
    assert_hosts_agree(sdk_job, 3, headline)
