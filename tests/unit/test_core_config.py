"""Job configuration: hyperparameters.json and the code directory, validated up front."""

import json
from pathlib import Path

import pytest

from ringleader.config.job import (
    DEFAULT_CODE_DIR,
    DEFAULT_CONTROL_PORT,
    ConfigFiles,
    ReportingSettings,
    Timeouts,
    load_job_config,
    load_topology,
    parse_job_config,
    read_json_object,
    reporting_settings,
)
from ringleader.config.topology import parse_topology
from ringleader.core.errors import ConfigError

TOPOLOGY = parse_topology({}, {"hosts": ["algo-1", "algo-2"], "current_host": "algo-1"})


def sdk_encoded(values):
    """hyperparameters.json as the SageMaker SDK writes it: every value JSON-encoded."""
    return {key: json.dumps(value) for key, value in values.items()}


@pytest.fixture
def job_dirs(tmp_path: Path) -> tuple[ConfigFiles, Path]:
    config_dir = tmp_path / "config"
    code_dir = tmp_path / "code"
    config_dir.mkdir()
    code_dir.mkdir()
    (code_dir / "train.py").write_text("print('hi')\n")
    return ConfigFiles(config_dir), code_dir


def write_hyperparameters(files: ConfigFiles, values) -> None:
    files.hyperparameters.write_text(json.dumps(values))


def test_sdk_encoded_mpi_job(job_dirs):
    files, code_dir = job_dirs
    write_hyperparameters(
        files,
        sdk_encoded(
            {
                "sagemaker_program": "train.py",
                "sagemaker_submit_directory": str(code_dir),
                "sagemaker_mpi_enabled": True,
                "sagemaker_mpi_num_of_processes_per_host": 2,
                "sagemaker_mpi_custom_mpi_options": "-x FOO=1 --mca btl_tcp_if_include 'eth 1'",
                "ringleader_leader_timeout": 2,
                "ringleader_startup_timeout": "60.5",
                "ringleader_sigterm_grace": 5,
                "ringleader_finish_timeout": 7,
                "ringleader_abort_grace": 0.25,
                "ringleader_mpi4py_run": False,
                "ringleader_control_port": 31000,
                "rounds": 3,
                "lr": "0.1",
            }
        ),
    )
    config = load_job_config(TOPOLOGY, {}, files)
    assert config.source.program == "train.py"
    assert config.source.code_dir == str(code_dir)
    assert config.source.program_path == code_dir / "train.py"
    assert config.distribution == "mpi"
    assert config.mpi.processes_per_host == 2
    assert config.mpi.custom_options == (
        "-x",
        "FOO=1",
        "--mca",
        "btl_tcp_if_include",
        "eth 1",
    )
    assert config.timeouts == Timeouts(
        startup=60.5, sigterm_grace=5, leader_loss=2, finish=7, abort_grace=0.25
    )
    assert config.timeouts.pulse_interval == 0.5
    assert config.control_port == 31000
    assert config.mpi.mpi4py_run is False
    assert config.user_hyperparameters == {"rounds": 3, "lr": "0.1"}
    # sagemaker-training gets all of them, decoded
    assert config.hyperparameters["sagemaker_mpi_enabled"] is True
    assert config.hyperparameters["ringleader_control_port"] == 31000


def test_plain_hand_written_values(job_dirs):
    files, code_dir = job_dirs
    write_hyperparameters(
        files,
        {
            "sagemaker_program": "train.py",
            "sagemaker_submit_directory": f"file://{code_dir}",
            "sagemaker_mpi_enabled": "True",
            "sagemaker_mpi_num_of_processes_per_host": "2",
            "epochs": 4,
        },
    )
    config = load_job_config(TOPOLOGY, {}, files)
    assert config.source.code_dir == str(code_dir)
    assert config.distribution == "mpi"
    assert config.mpi.processes_per_host == 2
    assert config.user_hyperparameters == {"epochs": 4}


def test_defaults():
    config = parse_job_config(TOPOLOGY, {"sagemaker_program": "train.py"}, {})
    assert config.source.code_dir == DEFAULT_CODE_DIR
    assert config.distribution != "mpi"
    assert config.mpi.processes_per_host is None
    assert config.mpi.custom_options == ()
    assert config.timeouts == Timeouts()
    assert config.control_port == DEFAULT_CONTROL_PORT
    assert config.mpi.mpi4py_run is True
    assert config.user_hyperparameters == {}


def test_program_from_environment():
    config = parse_job_config(TOPOLOGY, {}, {"SAGEMAKER_PROGRAM": "run.sh"})
    assert config.source.program == "run.sh"


def test_user_hyperparameters_exclude_toolkit_keys():
    config = parse_job_config(
        TOPOLOGY,
        {
            "sagemaker_program": "train.py",
            "sagemaker_region": '"us-west-2"',
            "ringleader_sigterm_grace": "3",
            "sagemaker": "kept",  # only the prefixes with the underscore are reserved
            "batch_size": '"64"',
        },
        {},
    )
    assert config.user_hyperparameters == {"sagemaker": "kept", "batch_size": "64"}


@pytest.mark.parametrize("value", ["False", "false", False, "0"])
def test_mpi4py_run_can_be_turned_off(value):
    config = parse_job_config(
        TOPOLOGY, {"sagemaker_program": "t.py", "ringleader_mpi4py_run": value}, {}
    )
    assert config.mpi.mpi4py_run is False


@pytest.mark.parametrize("raw", [{}, {"sagemaker_program": ""}, {"sagemaker_program": '"  "'}])
def test_missing_program(raw):
    with pytest.raises(ConfigError) as caught:
        parse_job_config(TOPOLOGY, raw, {})
    assert caught.value.field == "sagemaker_program"
    assert "missing" in caught.value.problem


def test_program_not_a_string():
    with pytest.raises(ConfigError) as caught:
        parse_job_config(TOPOLOGY, {"sagemaker_program": "[1]"}, {})
    assert caught.value.field == "sagemaker_program"


def test_program_not_found(job_dirs):
    files, code_dir = job_dirs
    write_hyperparameters(
        files, {"sagemaker_program": "nope.py", "sagemaker_submit_directory": str(code_dir)}
    )
    with pytest.raises(ConfigError) as caught:
        load_job_config(TOPOLOGY, {}, files)
    assert caught.value.field == "sagemaker_program"
    assert "'nope.py'" in caught.value.problem
    assert str(code_dir) in caught.value.problem


def test_program_is_a_directory(job_dirs):
    files, code_dir = job_dirs
    (code_dir / "pkg").mkdir()
    write_hyperparameters(
        files, {"sagemaker_program": "pkg", "sagemaker_submit_directory": str(code_dir)}
    )
    with pytest.raises(ConfigError) as caught:
        load_job_config(TOPOLOGY, {}, files)
    assert caught.value.field == "sagemaker_program"


def test_no_hyperparameters_file_means_no_program(job_dirs):
    files, _ = job_dirs
    with pytest.raises(ConfigError) as caught:
        load_job_config(TOPOLOGY, {}, files)
    assert caught.value.field == "sagemaker_program"


@pytest.mark.parametrize("value", ["abc", "0", 0, "-2", -1, "true"])
def test_bad_processes_per_host(value):
    with pytest.raises(ConfigError) as caught:
        parse_job_config(
            TOPOLOGY,
            {"sagemaker_program": "t.py", "sagemaker_mpi_num_of_processes_per_host": value},
            {},
        )
    assert caught.value.field == "sagemaker_mpi_num_of_processes_per_host"


def test_bad_mpi_enabled():
    with pytest.raises(ConfigError) as caught:
        parse_job_config(
            TOPOLOGY, {"sagemaker_program": "t.py", "sagemaker_mpi_enabled": "on?"}, {}
        )
    assert caught.value.field == "sagemaker_mpi_enabled"


@pytest.mark.parametrize("options", ["-x 'FOO=1", '--mca btl "tcp', json.dumps("-x 'A")])
def test_custom_options_with_unbalanced_quotes(options):
    with pytest.raises(ConfigError) as caught:
        parse_job_config(
            TOPOLOGY,
            {"sagemaker_program": "t.py", "sagemaker_mpi_custom_mpi_options": options},
            {},
        )
    assert caught.value.field == "sagemaker_mpi_custom_mpi_options"
    assert "cannot split" in caught.value.problem


def test_custom_options_not_a_string():
    with pytest.raises(ConfigError) as caught:
        parse_job_config(
            TOPOLOGY, {"sagemaker_program": "t.py", "sagemaker_mpi_custom_mpi_options": "[1]"}, {}
        )
    assert caught.value.field == "sagemaker_mpi_custom_mpi_options"


def test_unknown_ringleader_key():
    with pytest.raises(ConfigError) as caught:
        parse_job_config(
            TOPOLOGY, {"sagemaker_program": "t.py", "ringleader_startup_timout": "5"}, {}
        )
    assert caught.value.field == "ringleader_startup_timout"
    assert "ringleader_startup_timeout" in caught.value.problem  # lists the known ones


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ringleader_startup_timeout", "0"),
        ("ringleader_sigterm_grace", "-1"),
        ("ringleader_leader_timeout", "soon"),
        ("ringleader_finish_timeout", "false"),
        ("ringleader_control_port", "70000"),
        ("ringleader_abort_grace", "0"),
        ("ringleader_mpi4py_run", "sometimes"),
    ],
)
def test_bad_ringleader_values_name_their_key(key, value):
    with pytest.raises(ConfigError) as caught:
        parse_job_config(TOPOLOGY, {"sagemaker_program": "t.py", key: value}, {})
    assert caught.value.field == key


@pytest.mark.parametrize("url", ["https://x/y", "file://ftp://x"])
def test_remote_submit_directory_other_than_s3_is_rejected_clearly(url):
    # s3:// sourcedir tarballs are accepted: tests/unit/test_sourcecode.py
    with pytest.raises(ConfigError) as caught:
        parse_job_config(
            TOPOLOGY, {"sagemaker_program": "t.py", "sagemaker_submit_directory": url}, {}
        )
    assert caught.value.field == "sagemaker_submit_directory"
    assert "expected an s3:// sourcedir tarball or a local path" in caught.value.problem


def test_read_json_object(tmp_path):
    path = tmp_path / "x.json"
    assert read_json_object(path, "x.json") is None
    path.write_text('{"a": 1}')
    assert read_json_object(path, "x.json") == {"a": 1}


DEEP = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"  # deeper than json's parser can go


@pytest.mark.parametrize(
    ("text", "problem"),
    [("{", "not valid JSON"), ("[1]", "JSON object"), (DEEP, "nested too deeply")],
)
def test_read_json_object_errors(tmp_path, text, problem):
    path = tmp_path / "hyperparameters.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        read_json_object(path, "hyperparameters.json")
    assert caught.value.field == "hyperparameters.json"
    assert problem in caught.value.problem
    assert str(path) in caught.value.problem


def test_read_json_object_unreadable(tmp_path):
    with pytest.raises(ConfigError) as caught:
        read_json_object(tmp_path, "resourceconfig.json")  # a directory: IsADirectoryError
    assert caught.value.field == "resourceconfig.json"


def test_hyperparameters_file_not_json(job_dirs):
    files, _ = job_dirs
    files.hyperparameters.write_text('{"sagemaker_program": "train.py",')
    with pytest.raises(ConfigError) as caught:
        load_job_config(TOPOLOGY, {}, files)
    assert caught.value.field == "hyperparameters.json"


def test_load_topology_prefers_sm_hosts_and_skips_the_file(job_dirs):
    files, _ = job_dirs
    files.resource_config.write_text("{ not json")
    topology = load_topology({"SM_HOSTS": '["h2", "h1"]', "SM_CURRENT_HOST": "h2"}, files)
    assert topology.hosts == ("h1", "h2")
    with pytest.raises(ConfigError) as caught:
        load_topology({}, files)
    assert caught.value.field == "resourceconfig.json"


def test_load_topology_from_resource_config(job_dirs):
    files, _ = job_dirs
    files.resource_config.write_text(
        json.dumps({"current_host": "algo-2", "hosts": ["algo-2", "algo-1"]})
    )
    topology = load_topology({}, files)
    assert topology.leader == "algo-1"
    assert topology.current_host == "algo-2"


def test_reporting_settings_keep_every_valid_value_and_default_the_rest(job_dirs):
    files, _ = job_dirs
    write_hyperparameters(
        files,
        sdk_encoded(
            {
                "sagemaker_program": "",  # invalid for the job, irrelevant for reporting
                "ringleader_leader_timeout": 4,
                "ringleader_finish_timeout": "soon",  # invalid: default
                "ringleader_sigterm_grace": -1,  # invalid: default
                "ringleader_abort_grace": "0.75",
                "ringleader_startup_timeout": True,  # invalid: default
                "ringleader_control_port": 31001,
                "ringleader_typo_timeout": 3,  # unknown keys do not spoil the rest
            }
        ),
    )
    settings = reporting_settings(files)
    defaults = Timeouts()
    assert settings == ReportingSettings(
        Timeouts(
            startup=defaults.startup,
            sigterm_grace=defaults.sigterm_grace,
            leader_loss=4,
            finish=defaults.finish,
            abort_grace=0.75,
        ),
        31001,
    )
    assert settings.timeouts.pulse_interval == 1.0


@pytest.mark.parametrize("port", [70000, 0, "x", None])
def test_reporting_settings_default_an_invalid_control_port(job_dirs, port):
    files, _ = job_dirs
    write_hyperparameters(files, {"ringleader_control_port": port, "ringleader_finish_timeout": 9})
    settings = reporting_settings(files)
    assert settings.control_port == DEFAULT_CONTROL_PORT
    assert settings.timeouts.finish == 9


@pytest.mark.parametrize("text", [None, "{ not json", "[1, 2]"])
def test_reporting_settings_without_a_usable_file_are_the_defaults(job_dirs, text):
    files, _ = job_dirs
    if text is not None:
        files.hyperparameters.write_text(text)
    assert reporting_settings(files) == ReportingSettings(Timeouts(), DEFAULT_CONTROL_PORT)


def test_deeply_nested_json_is_a_configuration_error_not_a_crash():
    with pytest.raises(ConfigError) as caught:
        parse_topology({"SM_HOSTS": "[" * 100_000, "SM_CURRENT_HOST": "algo-1"}, None)
    assert caught.value.field == "SM_HOSTS" and "nested too deeply" in caught.value.problem
    # a hyperparameter that is not JSON it can decode stays the string it is
    config = parse_job_config(TOPOLOGY, {"sagemaker_program": "t.py", "deep": "[" * 100_000}, {})
    assert config.user_hyperparameters["deep"] == "[" * 100_000


@pytest.mark.parametrize("host", ["algo-1\n", "algo-1\r", " algo-1", "algo-1 "])
def test_host_names_with_whitespace_are_refused(host):
    with pytest.raises(ConfigError):
        parse_topology({"SM_HOSTS": json.dumps([host, "algo-2"]), "SM_CURRENT_HOST": host}, None)
