"""SageMaker Python SDK v2 local mode (instance_count=3) runs our image end to end.

Each test is one real `estimator.fit()` on 3 containers under docker compose, with file://
input and output and no network. They prove what the SDK reports, what lands in its
output.tar.gz, and that every container ends with the same exit code after writing its files.
"""

import json

import pytest

from tests.sdk.conftest import (
    IMAGE,
    MPI_HYPERPARAMETERS,
    ROLE,
    SdkJob,
    assert_hosts_agree,
    make_package_code_dir,
    rank_records,
    sourcedir_tarball,
)

pytestmark = [pytest.mark.sdk, pytest.mark.container]


def assert_every_rank_ran(
    job: SdkJob, files: dict[str, bytes], option: str, probe: str = "1.0"
) -> None:
    records = rank_records(files)
    assert sorted(records) == list(range(6)), sorted(files)
    hosts = sorted(job.hosts)
    for rank, record in records.items():
        assert record["host"] == hosts[rank // 2], record  # 2 processes per host, in host order
        assert record["file"] == f"data/{record['host']}-rank{rank}.json"
        assert sorted(record["hosts"]) == hosts
        assert record["world"] == "6"
        assert record["argv"] == ["--rounds", "2"]  # user hyperparameters only, as --key value
        assert record["probe"] == probe, "requirements.txt/the package is not installed here"
        assert record["channel"] == "/opt/ml/input/data/training"
        assert record["channel_files"] == ["sample.csv"]
        assert record["checkpoints_writable"]
        assert record["option"] == option  # from sagemaker_mpi_custom_mpi_options (-x)
        assert record["cwd"] == "/opt/ml/code"


def test_generic_estimator_on_three_hosts_collects_every_hosts_output(sdk_job, code_dir, channel):
    from sagemaker.estimator import Estimator

    estimator = Estimator(
        image_uri=IMAGE,
        role=ROLE,
        instance_count=3,
        instance_type="local",
        entry_point="train.py",  # the SDK sets sagemaker_program and sagemaker_submit_directory
        source_dir=str(code_dir()),
        hyperparameters={**MPI_HYPERPARAMETERS, "rounds": 2},
        output_path=f"file://{sdk_job.output}",
        sagemaker_session=sdk_job.session(),
        base_job_name="ringleader-sdk",
    )
    sdk_job.fit(estimator, {"training": f"file://{channel}"})

    assert sdk_job.error is None
    assert_hosts_agree(sdk_job, 0)
    files = sdk_job.output_tar()
    assert "success" in files and "failure" not in files
    assert_every_rank_ran(sdk_job, files, "from-custom-options")
    records = {record["file"] for record in rank_records(files).values()}
    for host in sdk_job.hosts:  # ringleader's own per-host files (rank logs) made it too
        own = [name for name in files if host in name and name not in records]
        assert own, f"nothing of ringleader's from {host} in output.tar.gz: {sorted(files)}"
    assert (sdk_job.output / "model.tar.gz").is_file()


def test_failing_rank_makes_fit_raise_and_the_failure_file_names_it(sdk_job, code_dir, channel):
    from sagemaker.estimator import Estimator

    estimator = Estimator(
        image_uri=IMAGE,
        role=ROLE,
        instance_count=3,
        instance_type="local",
        entry_point="train.py",
        source_dir=str(code_dir()),
        hyperparameters={**MPI_HYPERPARAMETERS, "rounds": 2, "fail-rank": 4, "fail-code": 3},
        output_path=f"file://{sdk_job.output}",
        sagemaker_session=sdk_job.session(),
        base_job_name="ringleader-sdk-fail",
    )
    sdk_job.fit(estimator, {"training": f"file://{channel}"})

    assert isinstance(sdk_job.error, RuntimeError)
    assert str(sdk_job.error).endswith("Process exited with code: 3")
    rank_host = sorted(sdk_job.hosts)[2]
    headline = f"Rank 4 on host {rank_host} exited with code 3."
    assert_hosts_agree(sdk_job, 3, headline)
    failure = sdk_job.output_tar()["failure"].decode()
    assert failure.startswith(headline), failure
    assert "rank 4 failing on purpose with code 3" in failure
    for host in sdk_job.hosts:  # the workers got the leader's verdict word for word
        assert sdk_job.snapshots[host].text("failure") == failure


def test_framework_estimator_translates_distribution_mpi(sdk_job, code_dir, channel):
    from sagemaker.pytorch import PyTorch

    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(code_dir()),
        image_uri=IMAGE,  # our image, not a PyTorch DLC: framework_version is only validated
        framework_version="2.1",
        py_version="py310",
        role=ROLE,
        instance_count=3,
        instance_type="local",
        distribution={
            "mpi": {
                "enabled": True,
                "processes_per_host": 2,
                "custom_mpi_options": "-x RINGLEADER_PROBE_OPTION=from-distribution",
            }
        },
        hyperparameters={"rounds": 2},
        output_path=f"file://{sdk_job.output}",
        sagemaker_session=sdk_job.session(),
        base_job_name="ringleader-sdk-pytorch",
    )
    sdk_job.fit(estimator, {"training": f"file://{channel}"})

    assert sdk_job.error is None
    translated = estimator.hyperparameters()  # what the SDK made of `distribution`
    assert json.loads(translated["sagemaker_mpi_enabled"]) is True
    assert json.loads(translated["sagemaker_mpi_num_of_processes_per_host"]) == 2
    assert "sagemaker_mpi_custom_mpi_options" in translated
    assert_hosts_agree(sdk_job, 0)
    assert_every_rank_ran(sdk_job, sdk_job.output_tar(), "from-distribution")


def test_s3_sourcedir_with_sagemaker_program_as_a_hyperparameter(s3_job, code_dir, channel):
    uri = "s3://ringleader-code/jobs/ok/sourcedir.tar.gz"
    job = s3_job(uri, sourcedir_tarball(code_dir()), channel=channel, rounds=2)

    assert job.error is None
    assert_hosts_agree(job, 0)
    assert_every_rank_ran(job, job.output_tar(), "from-custom-options")


def test_code_that_is_a_python_package_is_built_and_installed_on_every_host(
    sdk_job, tmp_path, channel
):
    from sagemaker.estimator import Estimator

    estimator = Estimator(
        image_uri=IMAGE,
        role=ROLE,
        instance_count=3,
        instance_type="local",
        entry_point="train.py",
        source_dir=str(make_package_code_dir(tmp_path / "package")),
        hyperparameters={**MPI_HYPERPARAMETERS, "rounds": 2},
        output_path=f"file://{sdk_job.output}",
        sagemaker_session=sdk_job.session(),
        base_job_name="ringleader-sdk-package",
    )
    sdk_job.fit(estimator, {"training": f"file://{channel}"})

    assert sdk_job.error is None
    assert_hosts_agree(sdk_job, 0)
    assert_every_rank_ran(sdk_job, sdk_job.output_tar(), "from-custom-options", probe="2.0")
