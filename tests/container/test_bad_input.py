"""Bad input: a clear message naming the field, a failure file and exit code 78 on every host."""

import json

import pytest

pytestmark = pytest.mark.container

HOSTS = ["algo-1", "algo-2", "algo-3"]


def on_every_host(**env: str) -> dict[str, dict[str, str]]:
    return {host: {"SM_CURRENT_HOST": host, **env} for host in HOSTS}


def hyperparameters_file(values: dict[str, str]) -> dict[str, dict[str, str]]:
    text = json.dumps({key: json.dumps(value) for key, value in values.items()})
    return {host: {"hyperparameters.json": text} for host in HOSTS}


def instance_groups_file(groups: dict[str, list[str]]) -> dict[str, dict[str, str]]:
    """resourceconfig.json on every host with these instance groups (group -> its hosts)."""
    return {
        host: {
            "resourceconfig.json": json.dumps(
                {
                    "current_host": host,
                    "hosts": HOSTS,
                    "current_group_name": "train",
                    "instance_groups": [
                        {"instance_group_name": name, "hosts": members}
                        for name, members in groups.items()
                    ],
                }
            )
        }
        for host in HOSTS
    }


CASES = {
    "malformed SM_HOSTS": (
        {"env_overrides": on_every_host(SM_HOSTS='["algo-1", "algo-2"')},
        "Configuration error in SM_HOSTS: not valid JSON",
    ),
    "empty host list": (
        {"env_overrides": on_every_host(SM_HOSTS="[]")},
        "Configuration error in SM_HOSTS: the host list is empty",
    ),
    "duplicate hosts": (
        {"env_overrides": on_every_host(SM_HOSTS='["algo-1", "algo-1", "algo-2", "algo-3"]')},
        "Configuration error in SM_HOSTS: duplicate hosts ['algo-1']",
    ),
    "processes per host abc": (
        {"hyperparameters": {"sagemaker_mpi_num_of_processes_per_host": "abc"}},
        "sagemaker_mpi_num_of_processes_per_host: expected a whole number of at least 1, got 'abc'",
    ),
    "processes per host 0": (
        {"hyperparameters": {"sagemaker_mpi_num_of_processes_per_host": "0"}},
        "sagemaker_mpi_num_of_processes_per_host: expected a whole number of at least 1",
    ),
    "processes per host negative": (
        {"hyperparameters": {"sagemaker_mpi_num_of_processes_per_host": "-2"}},
        "sagemaker_mpi_num_of_processes_per_host: expected a whole number of at least 1",
    ),
    "unbalanced quotes in custom MPI options": (
        {"mpi_options": '-x "FOO=1'},
        "Configuration error in sagemaker_mpi_custom_mpi_options: cannot split",
    ),
    "sagemaker_program missing": (
        {"config_overrides": hyperparameters_file({"sagemaker_mpi_enabled": "true"})},
        "Configuration error in sagemaker_program: missing",
    ),
    "sagemaker_program not found": (
        {
            "config_overrides": hyperparameters_file(
                {"sagemaker_program": "nope.py", "sagemaker_mpi_enabled": "true"}
            )
        },
        "Configuration error in sagemaker_program: 'nope.py' not found in the code directory",
    ),
    "hyperparameters.json not JSON": (
        {"config_overrides": {host: {"hyperparameters.json": "{"} for host in HOSTS}},
        "Configuration error in hyperparameters.json: /opt/ml/input/config/hyperparameters.json "
        "is not valid JSON",
    ),
    "torch_distributed together with mpi": (
        {"hyperparameters": {"sagemaker_torch_distributed_enabled": "true"}},
        "Configuration error in sagemaker_torch_distributed_enabled: true together with "
        "sagemaker_mpi_enabled",
    ),
    "master port out of range": (
        {"distribution": "torch_distributed", "settings": {"master_port": "70000"}},
        "Configuration error in ringleader_master_port: expected a TCP port from 1 to 65535",
    ),
    "master port in use on the leader": (
        {"distribution": "torch_distributed", "settings": {"master_port": "29100"}},
        "Configuration error in ringleader_master_port: MASTER_PORT 29100 is not free on "
        "algo-1 (the leader, where rank 0 listens)",
    ),
    "two distributions at once (parameter_server and mpi)": (
        {"hyperparameters": {"sagemaker_parameter_server_enabled": "true"}},
        "Configuration error in sagemaker_parameter_server_enabled: true together with "
        "sagemaker_mpi_enabled",
    ),
    "TensorFlow port in use on the leader": (
        {
            "distribution": "parameter_server",
            "processes_per_host": None,
            # this image has no TensorFlow: say whose parameter servers are meant
            "settings": {"tf_ps_port": "29100", "ps_framework": "tensorflow"},
        },
        "Configuration error in ringleader_tf_ps_port: port 29100 is not free on algo-1",
    ),
    "parameter_server in an image with neither TensorFlow nor MXNet": (
        {"distribution": "parameter_server", "processes_per_host": None},
        "Configuration error in sagemaker_parameter_server_enabled: parameter servers need "
        "TensorFlow or MXNet, and this image has neither importable",
    ),
    "MXNet servers per host of 0": (
        {
            "distribution": "parameter_server",
            "processes_per_host": None,
            "settings": {"ps_framework": "mxnet", "mxnet_servers_per_host": "0"},
        },
        "Configuration error in ringleader_mxnet_servers_per_host: expected a whole number",
    ),
    "TensorFlow port out of range": (
        {
            "distribution": "multi_worker_mirrored_strategy",
            "processes_per_host": None,
            "settings": {"tf_mirrored_port": "0"},
        },
        "Configuration error in ringleader_tf_mirrored_port: expected a whole number",
    ),
    "distribution instance group that does not exist": (
        {
            "instance_groups": (("data", 1), ("train", 2)),
            "distribution_groups": ("train",),
            "hyperparameters": {"sagemaker_distribution_instance_groups": ["gpu"]},
        },
        "Configuration error in sagemaker_distribution_instance_groups: 'gpu' is not one of "
        "the instance groups ['data', 'train']",
    ),
    "processes per host that disagree between groups": (
        {
            "distribution": "torch_distributed",
            "instance_groups": (("data", 1), ("train", 2)),
            "distribution_groups": ("data", "train"),
            "settings": {"processes_per_host": {"data": 1, "train": 2}},
            "processes_per_host": None,
        },
        "Configuration error in ringleader_processes_per_host: the distribution's instance "
        "groups disagree: {'data': 1, 'train': 2}",
    ),
    "a host in no instance group": (
        {"config_overrides": instance_groups_file({"train": ["algo-1", "algo-2"]})},
        "Configuration error in resourceconfig.json instance_groups: host(s) ['algo-3'] are in "
        "no instance group",
    ),
    "a distribution instance group with no hosts": (
        {
            "config_overrides": instance_groups_file({"train": HOSTS, "spare": []}),
            "hyperparameters": {"sagemaker_distribution_instance_groups": ["spare"]},
        },
        "Configuration error in sagemaker_distribution_instance_groups: the instance group "
        "'spare' has no hosts",
    ),
    "invalid interface name": (
        {
            "env_overrides": on_every_host(
                SM_HOSTS=json.dumps(HOSTS), SM_NETWORK_INTERFACE_NAME="no such if!"
            )
        },
        "Configuration error in network_interface_name: 'no such if!' is not a valid interface",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_fails_every_host_with_78_naming_the_field(run_job, case):
    overrides, expected = CASES[case]
    run = run_job(**overrides)
    assert run.codes() == dict.fromkeys(HOSTS, 78)
    for host in HOSTS:
        failure = run.failure(host)
        assert expected in failure, f"{host}: {failure}"
        assert len(failure.encode()) <= 1024


def test_current_host_not_in_list_on_one_worker_fails_the_whole_job(run_job):
    env = on_every_host(SM_HOSTS=json.dumps(HOSTS))
    env["algo-2"]["SM_CURRENT_HOST"] = "algo-9"
    run = run_job(env_overrides=env, settings={"startup_timeout": "30", "finish_timeout": "3"})
    assert run.codes() == dict.fromkeys(HOSTS, 78)
    expected = "Configuration error in SM_CURRENT_HOST: 'algo-9' is not one of the hosts"
    for host in HOSTS:
        assert expected in run.failure(host), host
