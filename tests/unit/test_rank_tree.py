"""The rank wrapper's end of a rank's process tree, in a fresh interpreter of its own (so no
child of the test runner counts)."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import subprocess, sys
    from ringleader.rank import tree
    print("alone", tree.has_no_children())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    print("with a child", tree.has_no_children())
    ended = tree.end_descendants(5.0)
    print("ended", len(ended), child.pid in [int(entry.split()[0]) for entry in ended])
    print("after", tree.has_no_children(), tree.end_descendants(5.0))
    """
)


def test_children_are_seen_without_psutil_and_ended() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.splitlines() == [
        "alone True",
        "with a child False",
        "ended 1 True",
        "after True []",
    ]


def test_no_children_file_means_not_known_to_be_alone(tmp_path) -> None:
    from ringleader.rank.tree import has_no_children

    assert has_no_children(tmp_path / "missing") is False
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "children").write_text("")
    assert has_no_children(tmp_path) is True
    (tmp_path / "2").mkdir()
    (tmp_path / "2" / "children").write_text("4242 ")
    assert has_no_children(tmp_path) is False
