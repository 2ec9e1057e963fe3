"""Hyperparameter values arrive JSON-encoded (as the SDK writes them) or as plain strings."""

import pytest

from ringleader.config import hyperparameters as hp
from ringleader.core.errors import ConfigError


@pytest.mark.parametrize(
    ("raw", "decoded"),
    [
        ('"train.py"', "train.py"),  # the SDK's json.dumps of a string
        ("train.py", "train.py"),  # a hand-written plain string
        ("2", 2),
        (2, 2),
        ("true", True),
        (True, True),
        ("True", "True"),  # not JSON: stays a string, as_bool still accepts it
        ('{"a": [1]}', {"a": [1]}),
        ("", ""),
    ],
)
def test_decode_value_accepts_json_and_plain_strings(raw, decoded):
    assert hp.decode_value(raw) == decoded


def test_decode_all_decodes_every_value_and_stringifies_keys():
    assert hp.decode_all({"a": '"x"', "b": "3", "c": "plain text"}) == {
        "a": "x",
        "b": 3,
        "c": "plain text",
    }


@pytest.mark.parametrize("value", ["True", "true", True, "TRUE", " yes ", "1", 1])
def test_as_bool_true_spellings(value):
    assert hp.as_bool("sagemaker_mpi_enabled", hp.decode_value(value)) is True


@pytest.mark.parametrize("value", ["False", "false", False, "no", "0", 0])
def test_as_bool_false_spellings(value):
    assert hp.as_bool("sagemaker_mpi_enabled", hp.decode_value(value)) is False


@pytest.mark.parametrize("value", ["maybe", 2, "", None])
def test_as_bool_rejects_other_values_naming_the_field(value):
    with pytest.raises(ConfigError) as caught:
        hp.as_bool("sagemaker_mpi_enabled", value)
    assert caught.value.field == "sagemaker_mpi_enabled"
    assert "sagemaker_mpi_enabled" in str(caught.value)
    assert repr(value) in str(caught.value)


@pytest.mark.parametrize(("value", "expected"), [("2", 2), (2, 2), (" 7 ", 7), ("+3", 3), (4.0, 4)])
def test_as_positive_int_accepts_whole_numbers(value, expected):
    assert hp.as_positive_int("field_x", hp.decode_value(value)) == expected


@pytest.mark.parametrize("value", ["abc", 0, "0", -1, "-1", True, False, 2.5, "2.5", None, ""])
def test_as_positive_int_rejects_with_the_field_named(value):
    with pytest.raises(ConfigError) as caught:
        hp.as_positive_int("sagemaker_mpi_num_of_processes_per_host", hp.decode_value(value))
    assert caught.value.field == "sagemaker_mpi_num_of_processes_per_host"
    assert str(caught.value).startswith(
        "Configuration error in sagemaker_mpi_num_of_processes_per_host:"
    )


@pytest.mark.parametrize("value", ["--2", "+-3", "-+1", "²"])
def test_as_positive_int_malformed_signs_are_config_errors(value):
    # A typo such as "--2" must be reported as a configuration error naming the field, not
    # escape as a bare ValueError (which would crash the entry point without a failure file).
    with pytest.raises(ConfigError) as caught:
        hp.as_positive_int("sagemaker_mpi_num_of_processes_per_host", value)
    assert caught.value.field == "sagemaker_mpi_num_of_processes_per_host"


@pytest.mark.parametrize(("value", "expected"), [("2.5", 2.5), (10, 10.0), ("0.05", 0.05)])
def test_as_positive_seconds(value, expected):
    assert hp.as_positive_seconds("ringleader_startup_timeout", hp.decode_value(value)) == expected


@pytest.mark.parametrize("value", ["soon", 0, -1.5, True, None, "nan"])
def test_as_positive_seconds_rejects(value):
    with pytest.raises(ConfigError) as caught:
        hp.as_positive_seconds("ringleader_startup_timeout", value)
    assert caught.value.field == "ringleader_startup_timeout"


@pytest.mark.parametrize("value", ["inf", "Infinity", float("inf"), 1e300])
def test_as_positive_seconds_rejects_unbounded_waits(value):
    # Every wait must be bounded; an infinite or absurd timeout also makes queue.get/Event.wait
    # raise OverflowError later instead of a configuration error now.
    with pytest.raises(ConfigError) as caught:
        hp.as_positive_seconds("ringleader_leader_timeout", hp.decode_value(value))
    assert caught.value.field == "ringleader_leader_timeout"


def test_as_port():
    assert hp.as_port("ringleader_control_port", "29100") == 29100
    for bad in (0, 65536, "http"):
        with pytest.raises(ConfigError) as caught:
            hp.as_port("ringleader_control_port", bad)
        assert caught.value.field == "ringleader_control_port"
