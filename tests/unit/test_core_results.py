"""/opt/ml/output/failure and /opt/ml/output/success."""

from ringleader.core.results import write_result


def test_failure_file_on_failure(tmp_path):
    out = tmp_path / "output"
    write_result(3, "Rank 4 on host algo-3 exited with code 3.\n", out)
    assert (out / "failure").read_text() == "Rank 4 on host algo-3 exited with code 3.\n"
    assert not (out / "success").exists()
    assert sorted(path.name for path in out.iterdir()) == ["failure"]  # no temporary left


def test_failure_without_text_still_names_the_code(tmp_path):
    write_result(137, None, tmp_path)
    assert "137" in (tmp_path / "failure").read_text()


def test_success_file_on_success(tmp_path):
    write_result(0, None, tmp_path)
    assert (tmp_path / "success").read_text() == ""
    assert not (tmp_path / "failure").exists()


def test_stale_result_of_the_other_kind_is_removed(tmp_path):
    (tmp_path / "failure").write_text("old failure")
    write_result(0, None, tmp_path)
    assert not (tmp_path / "failure").exists()
    assert (tmp_path / "success").exists()

    write_result(78, "Configuration error in sagemaker_program: missing\n", tmp_path)
    assert not (tmp_path / "success").exists()
    assert (tmp_path / "failure").read_text().startswith("Configuration error in")


def test_failure_overwrites_an_older_failure(tmp_path):
    write_result(1, "first\n", tmp_path)
    write_result(2, "second\n", tmp_path)
    assert (tmp_path / "failure").read_text() == "second\n"
