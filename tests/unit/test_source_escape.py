"""A sourcedir tarball that tries to write outside the code directory: links chained through
other links, a name used twice, hard links. Refused before anything is written (the member
checks), or, when the disk already holds a way out, while extracting (the data filter's
check: ours on every Python, the standard library's on top where it has one)."""

import tarfile
from pathlib import Path

import pytest

from ringleader.core.errors import ConfigError
from ringleader.source import usercode
from ringleader.source.usercode import Member, MemberKind
from tests.unit.test_sourcecode import make_tarball

F, D, S, H = MemberKind.FILE, MemberKind.DIRECTORY, MemberKind.SYMLINK, MemberKind.HARDLINK

# What a user's tarball did on all 3 hosts of a job, which then exited 0: code/x/b leads to
# code itself, so x/b/.. is code's parent, not code/x as the text of the path says; the file f
# is then written through the symlink f, and the hard link h made through it is written too.
ESCAPING = [
    ("file", "train.py", "print('hi')\n"),
    ("dir", "x", None),
    ("symlink", "x/b", ".."),
    ("symlink", "f", "x/b/../output/victim.txt"),
    ("file", "f", "written through the symlink f\n"),
    ("hardlink", "h", "f"),
    ("file", "h", "written through the hard link h\n"),
]


def problems(*members: Member) -> list[tuple[str, str]]:
    return usercode.unsafe_members(list(members))


@pytest.fixture
def ml(tmp_path: Path) -> Path:
    """An /opt/ml: the code directory is ml/code, and ml/output holds a file."""
    (tmp_path / "output").mkdir()
    (tmp_path / "output" / "model.pth").write_text("weights\n")
    return tmp_path


def outside_code(ml: Path) -> dict[str, str]:
    """Every file of ml outside ml/code (the tarball aside), with its content."""
    return {
        str(path.relative_to(ml)): path.read_text()
        for path in ml.rglob("*")
        if path.is_file() and not path.is_relative_to(ml / "code") and path.suffix != ".gz"
    }


# ------------------------------------------------------------------------- member checks


def test_the_escaping_tarball_is_refused_naming_each_way_out(ml):
    archive = make_tarball(ml / "s.tar.gz", ESCAPING)
    with tarfile.open(archive) as tar:
        found = usercode.unsafe_members([usercode.member_of(info) for info in tar])
    assert found == [
        ("f", "is a symlink to x/b/../output/victim.txt, outside the code through the symlink x/b"),
        ("f", "is a file with the same name as an earlier symlink"),
        ("h", "is a hard link to the symlink f"),
        ("h", "is a file with the same name as an earlier hard link"),
    ]
    with pytest.raises(ConfigError) as caught:
        usercode.extract(archive, "s3://b/k/s.tar.gz", ml / "code")
    assert caught.value.field == "sagemaker_submit_directory"
    assert caught.value.problem == (
        "s3://b/k/s.tar.gz has unsafe members, nothing was extracted: "
        "'f' is a symlink to x/b/../output/victim.txt, outside the code through the symlink "
        "x/b; 'f' is a file with the same name as an earlier symlink; "
        "'h' is a hard link to the symlink f (and 1 more)"
    )
    assert not (ml / "code").exists()
    assert outside_code(ml) == {"output/model.pth": "weights\n"}


@pytest.mark.parametrize(
    ("members", "found"),
    [
        (  # the link on the way comes after the one that uses it: the final state counts
            [Member("f", S, "x/b/../../y"), Member("x", D), Member("x/b", S, "..")],
            [("f", "is a symlink to x/b/../../y, outside the code through the symlink x/b")],
        ),
        (  # each link's text stays inside (b's and c's end where they start)
            [Member("a", S, "b"), Member("b", S, "c/.."), Member("c", S, "d/.."), Member("d", D)],
            [
                ("a", "is a symlink to b, outside the code through the symlink b, c"),
                ("b", "is a symlink to c/.., outside the code through the symlink c"),
            ],
        ),
        (
            [Member("d", D), Member("d/up", S, ".."), Member("a", S, "d/up/d/up/..")],
            [("a", "is a symlink to d/up/d/up/.., outside the code through the symlink d/up")],
        ),
        (  # a link inside that leads to a link to an absolute path
            [Member("abs", S, "d"), Member("d", S, "/etc"), Member("e", S, "abs")],
            [
                ("d", "is a symlink to the absolute path /etc"),
                ("abs", "is a symlink to d, outside the code through the symlink d"),
                ("e", "is a symlink to abs, outside the code through the symlink abs, d"),
            ],
        ),
        (
            [Member("a", S, "b"), Member("b", S, "a")],
            [
                ("a", "is a symlink to b, a loop of symlinks (b, a)"),
                ("b", "is a symlink to a, a loop of symlinks (a, b)"),
            ],
        ),
    ],
)
def test_a_symlink_is_followed_through_the_archives_other_links(members, found):
    assert sorted(problems(*members)) == sorted(found)


@pytest.mark.parametrize(
    ("earlier", "later", "reason"),
    [
        (
            Member("d", D),
            Member("d", S, "sub"),
            "is a symlink with the same name as an earlier directory",
        ),
        (Member("f", F), Member("f", S, "g"), "is a symlink with the same name as an earlier file"),
        (Member("f", S, "g"), Member("f", F), "is a file with the same name as an earlier symlink"),
        (
            Member("f", S, "g"),
            Member("f", D),
            "is a directory with the same name as an earlier symlink",
        ),
        (
            Member("f", F),
            Member("f", H, "g"),
            "is a hard link with the same name as an earlier file",
        ),
        (
            Member("f", H, "g"),
            Member("f", F),
            "is a file with the same name as an earlier hard link",
        ),
        (Member("f", F), Member("./f/", D), "is a directory with the same name as an earlier file"),
        (
            Member("l", S, "g"),
            Member("./l", S, "g"),
            "is a symlink with the same name as an earlier symlink",
        ),
    ],
)
def test_a_name_used_again_is_refused_unless_file_after_file_or_directory_after_directory(
    earlier, later, reason
):
    found = problems(Member("g", F), earlier, later)
    assert (later.name, reason) in found


def test_a_name_used_again_by_the_same_plain_kind_is_fine():
    """`tar -r` appends a newer copy of a file; `.` and `./` are both the top directory."""
    assert (
        problems(Member(".", D), Member("train.py", F), Member("./", D), Member("./train.py", F))
        == []
    )


@pytest.mark.parametrize(
    ("members", "target", "reason"),
    [
        ([Member("s", S, "g")], "s", "is a hard link to the symlink s"),
        ([Member("d", D)], "d", "is a hard link to the directory d"),
        ([], "s", "is a hard link to s, not a file of the code"),
        ([Member("h2", H, "g")], "h2", "is a hard link to the hard link h2"),
        (
            [Member("l", S, "sub"), Member("sub", D), Member("l/s", F)],
            "l/s",
            "is a hard link to l/s, under the symlink l",
        ),
    ],
)
def test_a_hard_link_only_to_a_plain_file_extracted_before_it(members, target, reason):
    found = problems(Member("g", F), *members, Member("h", H, target))
    assert ("h", reason) in found


def test_a_hard_link_to_a_file_that_comes_after_it_is_refused():
    """tarfile would link to whatever is at that path when the link is made."""
    assert problems(Member("h", H, "g"), Member("g", F)) == [
        ("h", "is a hard link to g, not a file of the code")
    ]


def test_links_that_stay_inside_are_extracted(ml):
    archive = make_tarball(
        ml / "s.tar.gz",
        [
            ("file", "train.py", "print('hi')\n"),
            ("dir", "lib", None),
            ("file", "lib/v1.py", "V = 1\n"),
            ("symlink", "lib/v.py", "v1.py"),
            ("symlink", "current.py", "lib/v.py"),
            ("symlink", "lib/top", ".."),
            ("symlink", "again.py", "lib/top/lib/top/train.py"),
            ("hardlink", "copy.py", "lib/v1.py"),
            ("file", "train.py", "print('newer')\n"),
        ],
    )
    code = ml / "code"
    usercode.extract(archive, "s.tar.gz", code)
    assert (code / "current.py").read_text() == "V = 1\n"
    assert (code / "again.py").read_text() == "print('newer')\n"
    assert (code / "copy.py").read_text() == "V = 1\n"
    assert outside_code(ml) == {"output/model.pth": "weights\n"}


# ----------------------------------------------------------------------- while extracting


@pytest.fixture(params=["with", "without"])
def data_filter(request, monkeypatch):
    """Python with the standard library's data filter, and without it (Debian bookworm's
    3.11.2, which the image has): ours refuses in both."""
    assert hasattr(tarfile, "data_filter"), "every Python the tests run on has it (3.10.12+)"
    if request.param == "without":
        monkeypatch.delattr(tarfile, "data_filter")
    return request.param


@pytest.fixture
def code_with_a_way_out(ml: Path) -> Path:
    """A code directory that already holds a symlink to its parent's output directory (a
    mount, or an earlier job's files): the archive alone cannot show it."""
    code = ml / "code"
    code.mkdir()
    (code / "out").symlink_to("../output")
    return code


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        (
            ("file", "out/victim.txt", "x"),
            "'out/victim.txt' would be written at {ml}/output/victim.txt",
        ),
        (("symlink", "out/l", "."), "'out/l' would be written at {ml}/output/l"),
        (("symlink", "m", "out/model.pth"), "'m' would be a link to {ml}/output/model.pth"),
    ],
)
@pytest.mark.filterwarnings("ignore:Python 3.14 will:DeprecationWarning")  # 3.12+ "without"
def test_a_way_out_already_on_disk_is_refused_while_extracting(
    ml, code_with_a_way_out, data_filter, entry, said
):
    archive = make_tarball(ml / "s.tar.gz", [("file", "train.py", "x"), entry])
    with pytest.raises(ConfigError) as caught:
        usercode.extract(archive, "s.tar.gz", code_with_a_way_out)
    assert caught.value.problem == (
        f"s.tar.gz: {said.format(ml=ml)}, outside the code directory; extraction stopped "
        f"there, and {code_with_a_way_out} may hold the members before it"
    )
    assert outside_code(ml) == {"output/model.pth": "weights\n"}
    assert (ml / "code" / "train.py").is_file()  # extracted before the bad member


def test_the_standard_librarys_filter_is_applied_on_top_of_ours(
    ml, code_with_a_way_out, monkeypatch
):
    """Were our check on disk to miss a member, Python's data filter still refuses it."""
    monkeypatch.setattr(usercode, "escape_on_disk", lambda *_args: None)
    archive = make_tarball(ml / "s.tar.gz", [("file", "out/victim.txt", "x")])
    with pytest.raises(ConfigError) as caught:
        usercode.extract(archive, "s.tar.gz", code_with_a_way_out)
    assert caught.value.problem.startswith(
        "s.tar.gz: Python's tar data filter refused 'out/victim.txt': "
    )
    assert caught.value.problem.endswith(
        f"; extraction stopped there, and {code_with_a_way_out} may hold the members before it"
    )
    assert outside_code(ml) == {"output/model.pth": "weights\n"}


@pytest.mark.parametrize(
    ("name", "link", "symlink", "found"),
    [
        ("a/b.py", "", False, None),
        ("a/l", "../b.py", True, None),
        ("a/l", "../../b.py", True, "would be a link to {parent}/b.py, outside the code directory"),
        ("h", "a/b.py", False, None),
        ("h", "../b.py", False, "would be a link to {parent}/b.py, outside the code directory"),
        ("l", "/etc/passwd", True, "is a link to the absolute path /etc/passwd"),
    ],
)
def test_escape_on_disk_of_plain_paths(tmp_path, name, link, symlink, found):
    root = tmp_path / "code"
    root.mkdir()
    hardlink = bool(link) and not symlink
    problem = usercode.escape_on_disk(str(root), name, link, symlink, hardlink)
    assert problem == (found and found.format(parent=tmp_path))
