"""SDK v3's job (ModelTrainer(distributed=Ringleader(...))) read as a v2 estimator's: the
fields' checks, the translation, and the driver that starts the entry point in each container.
The Ringleader class itself needs sagemaker>=3: tests/sdk/test_sdk_v3_local_mode.py runs it."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ringleader.config import sdk3
from ringleader.config.job import (
    MPI,
    MULTI_WORKER_MIRRORED,
    NO_DISTRIBUTION,
    PARAMETER_SERVER,
    TORCH_DISTRIBUTED,
    ConfigFiles,
    load_job_config,
)
from ringleader.config.topology import parse_topology
from ringleader.core import exitcodes
from ringleader.core.errors import ConfigError
from ringleader.tools.image.setup import ENTRYPOINT

DRIVER = Path(sdk3.__file__).parents[1] / "sagemaker" / "driver" / "ringleader_driver.py"
TOPOLOGY = parse_topology({}, {"hosts": ["algo-1", "algo-2"], "current_host": "algo-1"})


def v3_environ(code_dir: Path, **config: object) -> dict[str, str]:
    """What sm_train.sh exports for ModelTrainer(source_code=..., distributed=Ringleader(...))."""
    fields = {"distribution": "mpi", "processes_per_host": None, "mpi_options": None}
    fields.update(config)
    fields.setdefault("settings", {})
    return {
        sdk3.DRIVER_MARK: "1",
        sdk3.DISTRIBUTED_CONFIG: json.dumps(fields),
        sdk3.ENTRY_SCRIPT: "train.py",
        sdk3.SOURCE_DIR: str(code_dir),
    }


@pytest.mark.parametrize(
    ("distribution", "switch"),
    [
        (MPI, "sagemaker_mpi_enabled"),
        (TORCH_DISTRIBUTED, "sagemaker_torch_distributed_enabled"),
        (PARAMETER_SERVER, "sagemaker_parameter_server_enabled"),
        (MULTI_WORKER_MIRRORED, "sagemaker_multi_worker_mirrored_strategy_enabled"),
    ],
)
def test_each_distribution_is_the_switch_a_v2_estimator_sends(distribution, switch):
    assert sdk3.ringleader_hyperparameters(distribution, None, None, {}) == {switch: True}


def test_no_distribution_sends_no_switch():
    assert sdk3.ringleader_hyperparameters(NO_DISTRIBUTION, None, None, {}) == {}


def test_processes_per_host_goes_where_each_distribution_reads_it():
    mpi = sdk3.ringleader_hyperparameters(MPI, 4, "-x FOO", {})
    assert mpi["sagemaker_mpi_num_of_processes_per_host"] == 4
    assert mpi["sagemaker_mpi_custom_mpi_options"] == "-x FOO"
    torch = sdk3.ringleader_hyperparameters(TORCH_DISTRIBUTED, 2, None, {})
    assert torch["ringleader_processes_per_host"] == 2


def test_settings_get_their_prefix_once():
    values = sdk3.ringleader_hyperparameters(
        MPI, None, None, {"hang_timeout": 30, "ringleader_max_restarts": 2}
    )
    assert values["ringleader_hang_timeout"] == 30
    assert values["ringleader_max_restarts"] == 2


def test_an_unknown_distribution_names_the_field_and_the_choices():
    with pytest.raises(ConfigError) as raised:
        sdk3.check_fields("horovod", None, None, {})
    assert raised.value.field == "distribution"
    assert "mpi, torch_distributed, parameter_server" in str(raised.value)
    assert "'horovod'" in str(raised.value)


def test_mpi_options_outside_mpi_are_refused():
    with pytest.raises(ConfigError) as raised:
        sdk3.check_fields(TORCH_DISTRIBUTED, None, "-x FOO", {})
    assert raised.value.field == "mpi_options"


@pytest.mark.parametrize(
    ("settings", "field", "problem"),
    [
        ({"hang_timeout": "soon"}, "ringleader_hang_timeout", "soon"),
        ({"no_such_setting": 1}, "ringleader_no_such_setting", "unknown ringleader setting"),
        ({"max_restarts": -1}, "ringleader_max_restarts", "at least 0"),
    ],
)
def test_a_bad_setting_names_its_key(settings, field, problem):
    with pytest.raises(ConfigError) as raised:
        sdk3.check_fields(MPI, None, None, settings)
    assert raised.value.field == field
    assert problem in str(raised.value)


@pytest.mark.parametrize("count", [0, -2, "two"])
def test_bad_processes_per_host_are_refused(count):
    with pytest.raises(ConfigError, match="whole number of at least 1"):
        sdk3.check_fields(MPI, count, None, {})  # type: ignore[arg-type]


def test_settings_not_a_mapping_are_refused():
    with pytest.raises(ConfigError) as raised:
        sdk3.check_fields(MPI, None, None, ["hang_timeout"])  # type: ignore[arg-type]
    assert raised.value.field == "settings"


def test_good_fields_pass():
    sdk3.check_fields(MPI, 2, "-x NCCL_DEBUG=INFO", {"hang_timeout": 300, "log_ranks": "0"})


@pytest.fixture
def v3_job(tmp_path: Path) -> tuple[ConfigFiles, Path]:
    config_dir = tmp_path / "config"
    code_dir = tmp_path / "input" / "data" / "code"
    config_dir.mkdir()
    code_dir.mkdir(parents=True)
    (code_dir / "train.py").write_text("print('hi')\n")
    # v3 writes the user's hyperparameters with safe_serialize: strings as they are
    (config_dir / "hyperparameters.json").write_text(json.dumps({"epochs": "3", "lr": "0.1"}))
    return ConfigFiles(config_dir), code_dir


def test_a_v3_job_is_read_as_the_v2_job_it_means(v3_job):
    files, code_dir = v3_job
    environ = v3_environ(
        code_dir,
        distribution="mpi",
        processes_per_host=2,
        settings={"hang_timeout": 60},
    )
    translated = sdk3.config_files(environ)
    files = ConfigFiles(files.config_dir, translate=translated.translate)
    config = load_job_config(TOPOLOGY, environ, files)
    assert config.distribution == MPI
    assert config.mpi.processes_per_host == 2
    assert config.timeouts.hang == 60
    assert config.source.program == "train.py"
    assert config.source.code_dir == str(code_dir)
    assert config.user_hyperparameters == {"epochs": 3, "lr": 0.1}


def test_without_the_driver_s_mark_the_job_is_v2_s():
    assert sdk3.config_files({sdk3.DISTRIBUTED_CONFIG: "{}"}).translate is None


def test_a_setting_given_twice_must_agree(v3_job):
    files, code_dir = v3_job
    files.hyperparameters.write_text(json.dumps({"ringleader_hang_timeout": "30"}))
    agreeing = v3_environ(code_dir, settings={"hang_timeout": 30})
    assert sdk3.sdk3_hyperparameters(json.loads(files.hyperparameters.read_text()), agreeing)
    differing = v3_environ(code_dir, settings={"hang_timeout": 60})
    with pytest.raises(ConfigError) as raised:
        sdk3.sdk3_hyperparameters({"ringleader_hang_timeout": "30"}, differing)
    assert raised.value.field == "ringleader_hang_timeout"
    assert "set it once" in str(raised.value)


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        ({sdk3.ENTRY_SCRIPT: ""}, sdk3.ENTRY_SCRIPT, "SourceCode(source_dir=..., entry_script"),
        ({sdk3.DISTRIBUTED_CONFIG: "{nope"}, sdk3.DISTRIBUTED_CONFIG, "not JSON"),
        ({sdk3.DISTRIBUTED_CONFIG: "[]"}, sdk3.DISTRIBUTED_CONFIG, "expected a JSON object"),
        (
            {sdk3.DISTRIBUTED_CONFIG: '{"distribution": "mpi", "elastic": true}'},
            sdk3.DISTRIBUTED_CONFIG,
            "unknown field(s) ['elastic']",
        ),
        ({sdk3.DISTRIBUTED_CONFIG: '{"distribution": "ddp"}'}, "distribution", "'ddp'"),
    ],
)
def test_a_broken_v3_environment_is_a_configuration_error(tmp_path, change, field, problem):
    environ = {**v3_environ(tmp_path), **change}
    with pytest.raises(ConfigError) as raised:
        sdk3.sdk3_hyperparameters({}, environ)
    assert raised.value.field == field
    assert problem in str(raised.value)


def test_no_distributed_config_at_all_is_named(tmp_path):
    environ = v3_environ(tmp_path)
    del environ[sdk3.DISTRIBUTED_CONFIG]
    with pytest.raises(ConfigError, match="SM_DISTRIBUTED_CONFIG: missing"):
        sdk3.sdk3_hyperparameters({}, environ)


# ------------------------------------------------------------------------------- the driver
def load_driver() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ringleader_driver", DRIVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_driver_s_copies_of_ringleader_s_constants_agree():
    """The driver runs without ringleader importable: it carries these values itself."""
    driver = load_driver()
    assert driver.CONFIG_ERROR == exitcodes.CONFIG_ERROR
    assert driver.DRIVER_MARK == sdk3.DRIVER_MARK
    assert str(ENTRYPOINT) == driver.ENTRYPOINT


# The driver as sm_train.sh runs it (a python3, v3's environment), with its fixed path to the
# entry point moved somewhere this machine has nothing: what is on PATH decides.
RUN_DRIVER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("ringleader_driver", sys.argv[1])
driver = importlib.util.module_from_spec(spec)
spec.loader.exec_module(driver)
driver.ENTRYPOINT = sys.argv[2]
sys.exit(driver.main())
"""


def run_driver(tmp_path: Path, path: str) -> subprocess.CompletedProcess[str]:
    environ = {
        "PATH": path,
        "SM_OUTPUT_FAILURE": str(tmp_path / "failure"),
        **v3_environ(tmp_path),
    }
    del environ[sdk3.DRIVER_MARK]  # the driver sets it
    return subprocess.run(
        [sys.executable, "-I", "-c", RUN_DRIVER, str(DRIVER), str(tmp_path / "no-entrypoint")],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_driver_in_an_image_without_ringleader_exits_78_and_says_how_to_fix_it(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    result = run_driver(tmp_path, str(empty))
    assert result.returncode == exitcodes.CONFIG_ERROR, result.stderr
    failure = (tmp_path / "failure").read_text()
    assert failure.startswith("Configuration error in training_image: ringleader is not installed")
    assert "ringleader image setup" in failure
    assert failure in result.stderr


def test_the_driver_hands_the_job_to_the_entry_point_on_path_with_its_mark(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "ringleader-entrypoint"
    fake.write_text(
        f'#!/bin/sh\necho "args=$* mark=${sdk3.DRIVER_MARK} entry=${sdk3.ENTRY_SCRIPT}"\nexit 7\n'
    )
    fake.chmod(0o755)
    result = run_driver(tmp_path, f"{bin_dir}:/usr/bin:/bin")
    assert result.returncode == 7, result.stderr  # the entry point's code is the container's
    assert result.stdout.strip() == "args=train mark=1 entry=train.py"
