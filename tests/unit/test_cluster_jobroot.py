"""The cluster job directory root (--remote-dir): per user, made 0700, refused when another
user could change it (jobroot); results fetched without their remote owners and
setuid/setgid bits (run.receive_argv)."""

import io
import os
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ringleader.core import exitcodes
from ringleader.core.errors import ConfigError
from ringleader.tools.cluster import agent, jobroot, jobs, preflight, probe, run
from ringleader.tools.cluster.hostfile import ClusterHost
from ringleader.tools.cluster.jobroot import PathEntry, UnsafeJobRoot
from ringleader.tools.cluster.jobspec import job_to_json
from tests.unit.test_cluster import facts as host_facts

ME, OTHER = 1000, 1001
DIR, LINK, FILE = stat.S_IFDIR, stat.S_IFLNK, stat.S_IFREG
SYSTEM = [PathEntry("/", 0, "root", DIR | 0o755), PathEntry("/tmp", 0, "root", DIR | 0o1777)]
ROOT = "/tmp/ringleader-jobs-1000"


def problem(*entries: PathEntry, root: str = ROOT, resolved: str = ROOT) -> str | None:
    return jobroot.root_problem(root, resolved, [*SYSTEM, *entries], ME, "alice")


# ------------------------------------------------------------------------------------ pure


def test_the_default_root_is_per_user():
    assert jobroot.default_root(1000) == "/tmp/ringleader-jobs-1000"
    assert jobroot.default_root() == f"/tmp/ringleader-jobs-{os.getuid()}"
    assert run.ClusterJob((), (), "/", 1).remote_dir == jobroot.default_root()


@pytest.mark.parametrize(
    "entries",
    [
        [],  # not made yet: it will be, 0700
        [PathEntry(ROOT, ME, "alice", DIR | 0o700)],
    ],
)
def test_a_root_of_this_user_closed_to_others_is_fine(entries):
    assert problem(*entries) is None


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        (
            PathEntry(ROOT, OTHER, "mallory", DIR | 0o777),
            f"the job directory root {ROOT} belongs to someone else (owner mallory (uid 1001), "
            "mode 0777), not to you (alice, uid 1000), who could change the jobs' files and "
            "the Python they run: remove it (as its owner or root) or give another --remote-dir",
        ),
        (
            PathEntry(ROOT, OTHER, "mallory", DIR | 0o700),
            f"the job directory root {ROOT} belongs to someone else (owner mallory (uid 1001), "
            "mode 0700)",
        ),
        (
            PathEntry(ROOT, ME, "alice", DIR | 0o755),
            f"the job directory root {ROOT} is open to group or others (owner alice (uid 1000), "
            f"mode 0755), who could read the jobs' files: `chmod 700 {ROOT}` or give another "
            "--remote-dir",
        ),
        (
            PathEntry(ROOT, ME, "alice", DIR | 0o720),
            f"the job directory root {ROOT} is open to group or others",
        ),
        (
            PathEntry(ROOT, ME, "alice", FILE | 0o600),
            f"the job directory root {ROOT} is not a directory (owner alice (uid 1000), mode "
            "0600); give another --remote-dir",
        ),
    ],
)
def test_a_root_of_someone_else_or_open_to_others_is_refused_naming_owner_and_mode(entry, said):
    found = problem(entry)
    assert found is not None and found.startswith(said), found


def test_a_symlink_in_place_of_the_root_counts_as_on_the_way():
    """Its owner could point it elsewhere between two jobs (or two ranks' starts)."""
    link = PathEntry(ROOT, OTHER, "mallory", LINK | 0o777)
    target = PathEntry("/home/alice/jobs", ME, "alice", DIR | 0o700)
    home = [
        PathEntry("/home", 0, "root", DIR | 0o755),
        PathEntry("/home/alice", ME, "alice", DIR | 0o750),
    ]
    assert problem(link, *home, target, resolved=target.path) == (
        f"{ROOT}, on the way to the job directory root {ROOT}, belongs to another user (owner "
        "mallory (uid 1001), mode 0777); give a --remote-dir under directories that only you "
        "or root can change"
    )
    own_link = PathEntry(ROOT, ME, "alice", LINK | 0o777)
    assert problem(own_link, *home, target, resolved=target.path) is None


@pytest.mark.parametrize(
    ("on_the_way", "said"),
    [
        (PathEntry("/scratch", 0, "root", DIR | 0o777), "can be changed by group or others"),
        (PathEntry("/scratch", 0, "root", DIR | 0o775), "can be changed by group or others"),
        (PathEntry("/scratch", OTHER, "bob", DIR | 0o755), "belongs to another user"),
        (PathEntry("/scratch", ME, "alice", FILE | 0o644), "is not a directory"),
    ],
)
def test_what_is_on_the_way_must_be_changeable_only_by_this_user_or_root(on_the_way, said):
    root = "/scratch/jobs"
    found = problem(on_the_way, root=root, resolved=root)
    assert found is not None
    assert found.startswith(f"/scratch, on the way to the job directory root {root}, {said}")


def test_a_sticky_directory_open_to_all_is_fine_on_the_way():
    """As /tmp: others may write to it but not rename or remove what is ours in it."""
    assert (
        problem(
            PathEntry("/scratch", 0, "root", DIR | 0o1777), root="/scratch/j", resolved="/scratch/j"
        )
        is None
    )


def test_preflight_names_the_host_s_unsafe_root():
    facts = host_facts(
        hostname="b",
        uid=ME,
        user="alice",
        job_root_real=ROOT,
        job_root_entries=(*SYSTEM, PathEntry(ROOT, OTHER, "mallory", DIR | 0o755)),
    )
    host = ClusterHost("b", "b", 1, "hosts:1")
    found = preflight.problems(preflight.Probe(host, facts), preflight.Needs(job_root=ROOT))
    assert len(found) == 1
    assert found[0].startswith(f"the job directory root {ROOT} belongs to someone else")


def test_the_remote_dir_must_be_absolute():
    job = run.ClusterJob((), (), "/", 1, job_id="cluster-1", remote_dir="jobs")
    with pytest.raises(ConfigError) as caught:
        run.check_remote_dir(job)
    assert caught.value.field == "--remote-dir"
    assert caught.value.problem == "'jobs' is not an absolute path (e.g. /tmp/my-jobs)"


# --------------------------------------------------------------------------- on this disk


def test_the_probe_reports_the_path_as_written_and_as_resolved(tmp_path):
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to("real")
    entries = {item[0]: item for item in probe.path_entries(str(tmp_path / "link" / "jobs"))}
    assert "/" in entries and str(tmp_path) in entries
    assert stat.S_ISLNK(entries[str(tmp_path / "link")][3])
    assert stat.S_ISDIR(entries[str(tmp_path / "real")][3])
    assert str(tmp_path / "link" / "jobs") not in entries  # does not exist (yet)
    assert entries[str(tmp_path)][1:3] == [os.getuid(), probe.owner_name(os.getuid())]


@pytest.fixture
def open_umask():
    """The most permissive umask: what is made 0700 must not depend on it."""
    previous = os.umask(0)
    yield
    os.umask(previous)


def test_the_job_directory_and_its_root_are_made_0700(tmp_path, open_umask):
    job = jobroot.make_job_dir(str(tmp_path / "jobs" / "cluster-1"))
    assert job == tmp_path / "jobs" / "cluster-1"
    for path in (tmp_path / "jobs", job):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
        assert path.stat().st_uid == os.getuid()
    jobroot.make_job_dir(str(tmp_path / "jobs" / "cluster-2"))  # the root again: still fine


def test_an_existing_root_open_to_others_is_refused_and_nothing_is_made_in_it(tmp_path):
    root = tmp_path / "jobs"
    root.mkdir()
    root.chmod(0o755)
    with pytest.raises(UnsafeJobRoot) as caught:
        jobroot.make_job_dir(str(root / "cluster-1"))
    assert caught.value.field == "--remote-dir"
    assert f"`chmod 700 {root}`" in caught.value.problem
    assert list(root.iterdir()) == []
    assert stat.S_IMODE(root.stat().st_mode) == 0o755  # refused, not changed


def test_a_root_seen_by_another_user_is_refused(tmp_path, monkeypatch):
    """Who made it first decides: to anyone else, ours is someone else's."""
    root = tmp_path / "jobs"
    root.mkdir(mode=0o700)
    me = os.getuid()
    monkeypatch.setattr(jobroot.os, "getuid", lambda: me + 1)
    with pytest.raises(UnsafeJobRoot) as caught:
        jobroot.check_root(str(root))
    # the root itself when we are root (root may own what is on the way), else what is on
    # the way (tmp_path's parents are ours too)
    assert "belongs to" in caught.value.problem
    assert f"(owner {probe.owner_name(me)} (uid {me})" in caught.value.problem


def test_the_agent_lays_out_nothing_in_an_unsafe_root(tmp_path):
    root = tmp_path / "jobs"
    root.mkdir()
    root.chmod(0o777)
    spec = agent.AgentJob("cluster-1", str(root / "cluster-1"), ("a",), "a", {}, 1.0)
    with pytest.raises(UnsafeJobRoot):
        agent.lay_out(spec)
    assert list(root.iterdir()) == []
    mine = replace(spec, job_dir=str(tmp_path / "mine" / "cluster-1"))
    agent.lay_out(mine)
    assert stat.S_IMODE(Path(mine.job_dir).stat().st_mode) == 0o700
    assert (Path(mine.job_dir) / "run" / "python").is_file()


@pytest.mark.parametrize("verb", [["status"], ["attach", "cluster-1"], ["stop", "cluster-1"]])
def test_the_leader_s_verbs_refuse_an_unsafe_root_with_78(tmp_path, capsys, verb):
    root = tmp_path / "jobs"
    root.mkdir()
    root.chmod(0o750)
    args = jobs.build_parser().parse_args([verb[0], str(root), *verb[1:]])
    assert jobs.dispatch(args) == exitcodes.CONFIG_ERROR
    err = capsys.readouterr().err
    assert f"ringleader cluster {verb[0]}: Configuration error in --remote-dir: " in err
    assert f"the job directory root {root} is open to group or others" in err


def test_a_detached_start_in_an_unsafe_root_starts_nothing(tmp_path, capsys, monkeypatch):
    root = tmp_path / "jobs"
    root.mkdir()
    root.chmod(0o711)
    job = run.ClusterJob((), ("true",), str(tmp_path), 1, job_id="cluster-1", remote_dir=str(root))
    monkeypatch.setattr(sys, "stdin", io.StringIO(job_to_json(job) + "\n"))
    args = jobs.build_parser().parse_args(["start", str(root), "a"])
    assert jobs.dispatch(args) == exitcodes.CONFIG_ERROR
    assert "is open to group or others" in capsys.readouterr().err
    assert list(root.iterdir()) == []


# --------------------------------------------------------------------------------- fetch


def test_results_are_received_without_owners_or_permissions_from_the_archive():
    assert run.receive_argv(Path("/out/algo-1")) == [
        "tar",
        "--no-same-owner",
        "--no-same-permissions",
        "-xf",
        "-",
        "-C",
        "/out/algo-1",
    ]


def test_a_fetched_setuid_file_and_setgid_directory_lose_those_bits(tmp_path):
    """A real round trip: the job's side packs as the fetch does, ours unpacks with
    receive_argv. As root (where tar keeps owners and modes by default) the owner is
    someone else's uid too."""
    source = tmp_path / "job" / "ml"
    (source / "output" / "shared").mkdir(parents=True)
    (source / "model").mkdir()
    tool = source / "output" / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o6755)
    (source / "output" / "shared").chmod(0o2775)
    if os.getuid() == 0:
        os.chown(tool, 4242, 4242)
    packed = subprocess.run(
        ["tar", "-C", str(source), "-cf", "-", "output", "model"], capture_output=True, check=True
    ).stdout
    destination = tmp_path / "results"
    destination.mkdir()
    subprocess.run(run.receive_argv(destination), input=packed, check=True)
    got = destination / "output" / "tool"
    assert got.read_text() == "#!/bin/sh\n"
    assert stat.S_IMODE(got.stat().st_mode) & 0o7000 == 0
    assert got.stat().st_uid == os.getuid()
    assert stat.S_IMODE((destination / "output" / "shared").stat().st_mode) & 0o7000 == 0


def test_an_agent_whose_job_root_turned_unsafe_exits_78_naming_it(tmp_path):
    """Another user may make the root between the preflight and the agent's start."""
    root = tmp_path / "jobs"
    root.mkdir()
    root.chmod(0o777)
    spec = agent.AgentJob("cluster-1", str(root / "cluster-1"), ("a",), "a", {}, 1.0)
    ended = subprocess.run(
        [sys.executable, "-m", "ringleader.tools.cluster.agent"],
        input=spec.to_json() + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ended.returncode == 78, ended
    assert str(root) in ended.stdout and "Configuration error" in ended.stdout, ended
    assert not (root / "cluster-1").exists()
