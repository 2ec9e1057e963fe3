"""ringleader_horovod_* settings, the seed-style -x options, and keeping the files."""

import pytest

from ringleader.config.horovod import files_to_keep, horovod_env
from ringleader.config.job import parse_job_config
from ringleader.config.topology import Topology
from ringleader.core.errors import ConfigError
from ringleader.output.kept_files import autotune_rows, keep_files

TOPOLOGY = Topology(("algo-1", "algo-2"), "algo-1", "eth0")


def config(**values):
    return parse_job_config(TOPOLOGY, {"sagemaker_program": "train.py", **values}, {})


def test_settings_become_horovod_variables():
    env = horovod_env(
        {
            "ringleader_horovod_timeline": "true",
            "ringleader_horovod_timeline_mark_cycles": True,
            "ringleader_horovod_autotune": "True",
            "ringleader_horovod_fusion_threshold": "67108864",
            "ringleader_horovod_cycle_time": 3.5,
            "ringleader_horovod_hierarchical_allreduce": "true",
        }
    )
    assert env == {
        "HOROVOD_TIMELINE": "/opt/ml/output/data/horovod_timeline.json",
        "HOROVOD_TIMELINE_MARK_CYCLES": "1",
        "HOROVOD_AUTOTUNE": "1",
        "HOROVOD_AUTOTUNE_LOG": "/opt/ml/output/data/horovod_autotune_log.csv",
        "HOROVOD_FUSION_THRESHOLD": "67108864",
        "HOROVOD_CYCLE_TIME": "3.5",
        "HOROVOD_HIERARCHICAL_ALLREDUCE": "1",
    }
    assert horovod_env({}) == {}
    assert horovod_env({"ringleader_horovod_timeline": "false"}) == {}


def test_config_carries_the_variables_and_the_files_to_keep():
    job = config(
        ringleader_horovod_timeline="/opt/ml/output/tl.json", ringleader_horovod_autotune="true"
    )
    assert job.horovod_env["HOROVOD_TIMELINE"] == "/opt/ml/output/tl.json"
    assert job.output.kept_files == (
        "/opt/ml/output/data/horovod_autotune_log.csv",
        "/opt/ml/output/tl.json",
    )


def test_seed_style_custom_options_are_kept_too():
    options = (
        "-x HOROVOD_TIMELINE=/opt/ml/output/timeline.json -x HOROVOD_AUTOTUNE=1 "
        "-x HOROVOD_AUTOTUNE_LOG=/opt/ml/output/autotune_log.csv"
    )
    job = config(sagemaker_mpi_custom_mpi_options=options)
    assert job.output.kept_files == (
        "/opt/ml/output/autotune_log.csv",
        "/opt/ml/output/timeline.json",
    )


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"ringleader_horovod_timeline": "/tmp/timeline.json"}, "ringleader_horovod_timeline"),
        ({"ringleader_horovod_timeline": "timeline.json"}, "ringleader_horovod_timeline"),
        (
            {"ringleader_horovod_timeline": "/opt/ml/output/../x.json"},
            "ringleader_horovod_timeline",
        ),
        (
            {"ringleader_horovod_autotune_log": "/opt/ml/output/a.csv"},
            "ringleader_horovod_autotune_log",
        ),
        ({"ringleader_horovod_fusion_threshold": "lots"}, "ringleader_horovod_fusion_threshold"),
        ({"ringleader_horovod_autotune": "maybe"}, "ringleader_horovod_autotune"),
        (
            {"sagemaker_mpi_custom_mpi_options": "-x HOROVOD_TIMELINE=/tmp/t.json"},
            "sagemaker_mpi_custom_mpi_options",
        ),
    ],
)
def test_bad_settings_name_the_field(values, field):
    with pytest.raises(ConfigError) as error:
        config(**values)
    assert error.value.field == field


def test_files_to_keep_prefers_the_forwarded_value():
    assert files_to_keep(
        {"HOROVOD_TIMELINE": "/opt/ml/output/data/a.json"},
        {"HOROVOD_TIMELINE": "/opt/ml/output/b.json"},
    ) == ("/opt/ml/output/b.json",)


def test_keep_files_copies_into_data_and_warns_on_an_empty_autotune_log(tmp_path):
    output = tmp_path / "output"
    data = output / "data"
    output.mkdir()
    (output / "timeline.json").write_text('[{"ph": "B"}')
    (output / "autotune_log.csv").write_text("hierarchical_allreduce,cycle_time_ms,score\n")
    notes = keep_files(
        [str(output / "timeline.json"), str(output / "autotune_log.csv"), str(output / "gone")],
        data,
    )
    assert (data / "timeline.json").read_text() == '[{"ph": "B"}'
    assert (data / "autotune_log.csv").is_file()
    assert any("has no data rows" in note for note in notes)
    assert any("was configured but not written" in note for note in notes)


def test_autotune_rows_counts_lines_after_the_header(tmp_path):
    log = tmp_path / "a.csv"
    log.write_text("a,b,score\n1,2,3.5\n1,4,3.9\n\n")
    assert autotune_rows(log) == 2
