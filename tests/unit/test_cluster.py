"""`ringleader cluster`: hostfiles, preflight verdicts, the job each host runs, wheels, agents."""

import ast
import base64
import dataclasses
import hashlib
import importlib.metadata
import inspect
import io
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import zipfile
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from ringleader.aws.download import missing
from ringleader.config.job import parse_job_config
from ringleader.config.topology import parse_topology
from ringleader.core import exitcodes, paths
from ringleader.core.attempts import AttemptRecord, parse_history
from ringleader.core.errors import ConfigError
from ringleader.core.jobfile import JobSummary, write_job_file
from ringleader.launch.mpirun import MpiPlan, build_mpirun_argv
from ringleader.tools.cluster import agent, fanout, preflight, run, wheels
from ringleader.tools.cluster import probe as probe_program
from ringleader.tools.cluster.hostfile import (
    ClusterHost,
    parse_host_list,
    parse_hostfile,
    processes_per_host,
)
from ringleader.tools.cluster.jobspec import job_from_json, job_to_json
from ringleader.tools.cluster.ssh import SshOptions, bootstrap_venv

# ------------------------------------------------------------------------------------ hostfile


def test_hostfile_with_comments_slots_localhost_and_addresses():
    text = "# the cluster\n\nlocalhost slots=8\n10.0.0.2 slots=8  # second\nnode-3 max_slots=4\n"
    hosts = parse_hostfile(text, "hosts", "leader-box")
    assert [(h.address, h.name, h.slots, h.origin) for h in hosts] == [
        ("localhost", "leader-box", 8, "hosts:3"),
        ("10.0.0.2", "10.0.0.2", 8, "hosts:4"),
        ("node-3", "node-3", 1, "hosts:5"),
    ]


def test_localhost_alone_keeps_its_name():
    (host,) = parse_hostfile("localhost slots=2\n", "hosts", "box")
    assert host.name == "localhost"


@pytest.mark.parametrize(
    ("text", "field", "expected"),
    [
        ("", "hosts", "no hosts"),
        ("# only a comment\n\n", "hosts", "no hosts"),
        ("a slots=2\nb\na slots=2\n", "hosts:3 host", "listed twice (first at hosts:1)"),
        ("a slots=0\n", "hosts:1 slots", "positive whole number, got '0'"),
        ("a\nb slots=abc\n", "hosts:2 slots", "got 'abc'"),
        ("a cpus=4\n", "hosts:1 cpus", "unknown key"),
        ("a 4\n", "hosts:1 4", "KEY=VALUE"),
        ("bad/name slots=1\n", "hosts:1 host", "not a host name"),
    ],
)
def test_bad_hostfiles_name_the_line_and_field(text, field, expected):
    with pytest.raises(ConfigError) as error:
        parse_hostfile(text, "hosts", "box")
    assert error.value.field == field
    assert expected in error.value.problem
    assert error.value.exit_code == exitcodes.CONFIG_ERROR


def test_host_list():
    hosts = parse_host_list("a:4,b:4,c", "box")
    assert [(h.name, h.slots) for h in hosts] == [("a", 4), ("b", 4), ("c", 1)]
    with pytest.raises(ConfigError, match="-H entry 2 slots"):
        parse_host_list("a:4,b:x", "box")


def test_processes_per_host_defaults_to_slots_and_is_bounded_by_them():
    hosts = parse_hostfile("a slots=4\nb slots=2\n", "hosts", "box")
    assert processes_per_host(hosts, None) == 2
    assert processes_per_host(hosts, 1) == 1
    with pytest.raises(ConfigError) as error:
        processes_per_host(hosts, 3)
    assert error.value.field == "--processes-per-host"
    assert "2 slots of b (hosts:2)" in error.value.problem


# ----------------------------------------------------------------------------------------- ssh


def test_ssh_is_batch_mode_and_accepts_new_keys_only():
    argv = SshOptions(5, ("Port=2222",)).command("node", ["echo", "a b"])
    assert argv[:1] == ["ssh"]
    assert "BatchMode=yes" in argv
    assert "StrictHostKeyChecking=accept-new" in argv
    assert "ConnectTimeout=5" in argv
    assert "Port=2222" in argv
    assert argv[-3:] == ["node", "--", "echo 'a b'"]
    assert not any("StrictHostKeyChecking=no" in part for part in argv)


def test_remote_python_finder_passes_arguments_through(tmp_path):
    """The remote command runs the first Python found with our arguments, quoted intact."""
    remote = SshOptions().python("node", ["-c", "import sys; print(sys.argv[1:])", "a b", "'c'"])
    env = dict(os.environ, HOME=str(tmp_path))
    out = subprocess.run(["sh", "-c", remote[-1]], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['a b', \"'c'\"]"


def run_finder(remote, home):
    env = dict(os.environ, HOME=str(home))
    return subprocess.run(["sh", "-c", remote[-1]], capture_output=True, text=True, env=env)


def test_remote_python_named_with_python_option_is_the_one_run(tmp_path):
    remote = SshOptions(remote_python=sys.executable).python(
        "node", ["-c", "import sys; print(sys.executable)"]
    )
    out = run_finder(remote, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == sys.executable


def test_a_missing_python_option_interpreter_is_named(tmp_path):
    remote = SshOptions(remote_python="/no/such/python3.12").python("node", ["-V"])
    out = run_finder(remote, tmp_path)
    assert out.returncode == 127
    assert out.stderr.strip() == (
        "ringleader: --python /no/such/python3.12 is not an executable on this host"
    )


@pytest.mark.parametrize(
    ("named", "venv"),
    [
        (None, ".ringleader/venv"),
        ("/usr/bin/python3.12", ".ringleader/venv-usr_bin_python3.12"),
        ("/opt/my env/bin/python", ".ringleader/venv-opt_my_env_bin_python"),
    ],
)
def test_each_named_interpreter_has_its_own_bootstrap_venv_which_is_tried_first(
    tmp_path, named, venv
):
    assert bootstrap_venv(named) == venv
    fake = tmp_path / venv / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text('#!/bin/sh\necho "bootstrapped $*"\n')
    fake.chmod(0o755)
    out = run_finder(SshOptions(remote_python=named).python("node", ["-V"]), tmp_path)
    assert out.stdout.strip() == "bootstrapped -V"
    other = "/usr/bin/python3.13" if named is None else None  # another's venv is not used
    out = run_finder(SshOptions(remote_python=other).python("node", ["-V"]), tmp_path)
    assert "bootstrapped" not in out.stdout


# ----------------------------------------------------------------------------------- preflight

HOST = ClusterHost("node", "node", 2, "hosts:1")


def facts(**changes):
    values = dict(
        hostname="node",
        python="/usr/bin/python3",
        python_version="{}.{}.9".format(*sys.version_info[:2]),
        implementation="cpython",
        machine="x86_64",
        ringleader=preflight.Needs().ringleader,
        versions={},
        gpus=0,
        free_bytes=10 << 30,
        cwd_exists=True,
        mpirun=True,
        site_packages=(),
    )
    values.update(changes)
    return preflight.HostFacts(**values)


def test_a_fit_host_has_no_problems():
    assert preflight.problems(preflight.Probe(HOST, facts()), preflight.Needs()) == []


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"python_version": "3.9.2"},
            "Python 3.9.2 (/usr/bin/python3) is not supported: ringleader needs Python 3.10-3.13 "
            "on every host; name another interpreter on the hosts with --python PATH",
        ),
        ({"python_version": "3.14.0", "ringleader": None}, "Python 3.14.0 (/usr/bin/python3) is"),
        ({"ringleader": None}, "not installed for /usr/bin/python3 (--bootstrap"),
        ({"ringleader": "0.0.1"}, "ringleader 0.0.1, not"),
        ({"mpirun": False}, "no mpirun"),
        ({"cwd_exists": False}, "working directory / does not exist"),
        ({"free_bytes": 1 << 20}, "0.0 GiB free"),
    ],
)
def test_problems_name_what_is_wrong(changes, expected):
    (problem,) = preflight.problems(preflight.Probe(HOST, facts(**changes)), preflight.Needs())
    assert expected in problem


@pytest.mark.parametrize("version", ["3.10.0", "3.11.2", "3.12.1", "3.13.0"])
def test_any_supported_python_on_a_host_is_fit_whatever_runs_here(version):
    probe = preflight.Probe(HOST, facts(python_version=version))
    assert preflight.problems(probe, preflight.Needs()) == []


@pytest.mark.parametrize(
    ("version", "minor"), [("3.12.1", (3, 12)), ("3.13.0rc1", (3, 13)), ("3", (0, 0)), ("", (0, 0))]
)
def test_minor_version(version, minor):
    assert preflight.minor_version(version) == minor


def test_unreachable_host_and_table():
    probe = preflight.Probe(HOST, None, "ssh: connect to host node port 22: Connection refused")
    needs = preflight.Needs(processes_per_host=4)
    assert preflight.problems(probe, needs) == [
        "unreachable over ssh: ssh: connect to host node port 22: Connection refused"
    ]
    rows = preflight.table([probe, preflight.Probe(HOST, facts(gpus=8), key_added=True)], needs)
    assert rows[0].split()[:3] == ["host", "python", "ringleader"]
    assert "Connection refused" in rows[1]
    assert "4 processes per host but 8 GPUs found" in rows[2]
    assert "host key accepted on first use" in rows[2]


def test_probe_hosts_runs_the_probe_program_and_reads_its_answer(tmp_path):
    """The real probe program, run by a local shell in place of ssh."""

    def local(argv, timeout):
        return subprocess.run(["sh", "-c", argv[-1]], capture_output=True, timeout=timeout)

    needs = preflight.Needs(cwd=str(tmp_path), job_root=str(tmp_path / "jobs"))
    names = ["no-such-distribution-xyz"]
    ssh = SshOptions(remote_python=sys.executable)  # this test's Python, whatever python3 is
    (probe,) = preflight.probe_hosts([HOST], ssh, needs, names, 60, run=local)
    assert probe.error is None
    assert probe.facts is not None
    assert probe.facts.python_version == "{}.{}.{}".format(*sys.version_info[:3])
    assert probe.facts.implementation == sys.implementation.name
    assert probe.facts.machine == platform.machine()
    assert probe.facts.versions == {"no-such-distribution-xyz": None}
    assert Path(probe.facts.python).name.startswith("python")
    assert probe.facts.cwd_exists
    assert probe.facts.free_bytes > 0


OLD_PYTHONS = sorted(Path(os.path.expanduser("~/.pyenv/versions")).glob("3.[7-9].*/bin/python3"))


def test_a_host_whose_python_is_too_old_is_probed_and_refused_by_name(tmp_path):
    """The probe itself runs on the old interpreter (named with --python) and answers."""
    if not OLD_PYTHONS:
        message = "needs a Python 3.7-3.9 under ~/.pyenv/versions (CI machines have them)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)

    def local(argv, timeout):
        return subprocess.run(["sh", "-c", argv[-1]], capture_output=True, timeout=timeout)

    old = str(OLD_PYTHONS[0])
    needs = preflight.Needs(cwd=str(tmp_path), job_root=str(tmp_path), mpirun=False)
    ssh = SshOptions(remote_python=old)
    (probe,) = preflight.probe_hosts([HOST], ssh, needs, ["psutil"], 60, run=local)
    assert probe.error is None and probe.facts is not None
    (problem,) = preflight.problems(probe, needs)
    assert problem.startswith(f"Python {probe.facts.python_version} (")
    assert "is not supported: ringleader needs Python 3.10-3.13" in problem
    assert "--python PATH" in problem


def test_the_probe_is_python_3_7_syntax():
    """It must answer (with its version) on a host too old for ringleader."""
    ast.parse(inspect.getsource(probe_program), feature_version=(3, 7))


def test_probe_timeout_counts_as_unreachable():
    def slow(argv, timeout):
        raise subprocess.TimeoutExpired(argv, timeout)

    (probe,) = preflight.probe_hosts([HOST], SshOptions(), preflight.Needs(), [], 3, run=slow)
    assert probe.facts is None
    assert probe.error == "no answer within 3 s (--preflight-timeout)"


# ------------------------------------------------------------------------------ the job itself


def cluster_job(**changes):
    values = dict(
        hosts=parse_hostfile("b slots=2\na slots=2\n", "hosts", "box"),
        command=("python", "train.py", "--epochs", "2"),
        cwd="/work",
        processes_per_host=2,
        job_id="cluster-1",
    )
    values.update(changes)
    return run.ClusterJob(**values)


def test_every_host_gets_a_job_config_the_entry_point_accepts():
    raw = run.cluster_hyperparameters(cluster_job(settings={"sigterm_grace": "5"}))
    topology = parse_topology({}, {"hosts": ["a", "b"], "current_host": "b"})
    config = parse_job_config(topology, raw, {})
    assert config.source.command == ("python", "train.py", "--epochs", "2")
    assert config.source.code_dir == "/work"
    assert config.distribution == "mpi"
    assert config.ranks_per_host(0) == 2
    assert config.timeouts.sigterm_grace == 5
    assert config.user_hyperparameters == {}
    torch = parse_job_config(
        topology, run.cluster_hyperparameters(cluster_job(distribution="torch_distributed")), {}
    )
    assert torch.distribution == "torch_distributed"
    assert torch.ranks_per_host(0) == 2


def test_ringleader_command_must_be_a_list_of_strings():
    topology = parse_topology({}, {"hosts": ["a"], "current_host": "a"})
    with pytest.raises(ConfigError) as error:
        parse_job_config(topology, {"ringleader_command": json.dumps("python x.py")}, {})
    assert error.value.field == "ringleader_command"


def test_exit_code_is_the_leaders_unless_its_connection_failed():
    assert run.job_exit_code(3, [3, 3]) == 3
    assert run.job_exit_code(0, [0, 255]) == 0
    assert run.job_exit_code(255, [255, 75, 0]) == 75
    assert run.job_exit_code(255, [255, 0]) == exitcodes.HOST_LOST


def test_stop_grace_is_the_ranks_grace_capped():
    assert run.stop_grace({}) == 12.0
    assert run.stop_grace({"sigterm_grace": "3"}) == 3.0
    assert run.stop_grace({"sigterm_grace": "x"}) == 12.0


def test_mpirun_passes_the_job_locations_to_every_rank():
    plan = MpiPlan(("a", "b"), 2, None, (), ("python", "x.py"), exported=paths.RANK_VARIABLES)
    argv = build_mpirun_argv(plan)
    tail = argv[argv.index("-x") : argv.index("python")]
    assert tail == [part for name in paths.RANK_VARIABLES for part in ("-x", name)]


# ---------------------------------------------------------------------------------------- agent


def test_agent_job_round_trip_and_layout(tmp_path):
    job = agent.AgentJob(
        "j1", str(tmp_path / "j1"), ("a", "b"), "b", {"x": '"1"'}, 5.0, secret="5e"
    )
    assert agent.AgentJob.from_json(job.to_json()) == job
    agent.lay_out(job)
    config = tmp_path / "j1" / "ml" / "input" / "config"
    assert json.loads((config / "resourceconfig.json").read_text()) == {
        "current_host": "b",
        "hosts": ["a", "b"],
    }
    assert json.loads((config / "hyperparameters.json").read_text()) == {"x": '"1"'}
    python = str(tmp_path / "j1" / "run" / "python")
    found = subprocess.run([python, "-c", "import sys; print(sys.prefix)"], capture_output=True)
    assert found.stdout.decode().strip() == sys.prefix  # the same Python, venv included
    env = agent.job_environment(job, {"HOME": "/root"})
    assert env[paths.ML_ROOT_VARIABLE] == str(tmp_path / "j1" / "ml")
    assert env[paths.JOB_MARK_VARIABLE] == "j1"
    assert env["HOME"] == "/root"
    assert env["RINGLEADER_JOB_SECRET"] == "5e"  # the host's entry point takes it out at once


def test_sweep_ends_every_process_with_the_mark_and_nothing_else():
    mark = f"test-{os.getpid()}"
    ignores_sigterm = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    marked = subprocess.Popen(
        [sys.executable, "-c", ignores_sigterm],
        env=dict(os.environ, **{paths.JOB_MARK_VARIABLE: mark}),
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    other = subprocess.Popen(["sleep", "60"])
    try:
        assert marked.stdout.readline() == b"ready\n"
        assert [p.pid for p in agent.marked_processes(mark)] == [marked.pid]
        assert len(agent.sweep(mark, 0.5)) == 1  # SIGTERM is ignored: it takes the SIGKILL
        assert not psutil.pid_exists(marked.pid) or marked.poll() is not None
        assert agent.marked_processes(mark) == []
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


ADOPTS_AND_SWEEPS = """
import os, subprocess, sys, psutil
from ringleader.rank.tree import become_subreaper
from ringleader.tools.cluster import agent
assert become_subreaper()
# a daemon as ssh's ControlPersist makes one: its parent exits, and it carries no mark
daemonize = "import os, time; os.fork() and os._exit(0); os.setsid(); time.sleep(60)"
subprocess.run([sys.executable, "-c", daemonize], check=True)
adopted = [p.pid for p in psutil.Process().children()]
print("adopted", len(adopted))
print("swept", len(agent.sweep("no-such-mark", 0.5, descendants=True)))
print("left", [pid for pid in adopted if psutil.pid_exists(pid)])
"""


LEAVES_AN_ENDED_ORPHAN = """
import os, subprocess, sys, psutil
from ringleader.rank.tree import become_subreaper
from ringleader.tools.cluster import agent
assert become_subreaper()
# an ssh client that mpirun leaves as it exits: adopted by the agent, then it ends by itself
orphan = "import os, time; os.fork() and os._exit(0); time.sleep(0.2)"
subprocess.run([sys.executable, "-c", orphan], check=True)
(adopted,) = [p.pid for p in psutil.Process().children()]
os.waitid(os.P_PID, adopted, os.WEXITED | os.WNOWAIT)  # it has ended; not reaped yet
print("zombie", psutil.Process(adopted).status() == psutil.STATUS_ZOMBIE)
print("swept", agent.sweep("no-such-mark", 0.5, descendants=True))
print("reaped", not psutil.pid_exists(adopted))
"""


def printed_by(script: str) -> list[str]:
    """The lines a script (run as a subreaper agent would be) prints; it must succeed."""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_the_sweep_reaps_an_ended_orphan_and_does_not_call_it_a_leftover():
    assert printed_by(LEAVES_AN_ENDED_ORPHAN) == ["zombie True", "swept []", "reaped True"]


def test_the_agent_adopts_the_jobs_daemons_and_sweeps_them_without_their_mark():
    assert printed_by(ADOPTS_AND_SWEEPS) == ["adopted 1", "swept 1", "left []"]


@pytest.mark.parametrize(
    ("stdin", "signal_sent"),
    [("stop\n", signal.SIGTERM), ("", signal.SIGHUP)],
    ids=["the leader asks: SIGTERM", "input ends (leader or ssh gone): SIGHUP"],
)
def test_agent_stops_the_entry_point_by_how_its_input_ended(tmp_path, stdin, signal_sent):
    job = agent.AgentJob("j1", str(tmp_path / "j1"), ("a",), "a", {}, 5.0)
    # as the agent starts it: SIGHUP at its default whatever this test runs under (nohup)
    child = subprocess.Popen(["sleep", "60"], preexec_fn=_default_hangup)
    try:
        agent.Agent(job, io.StringIO(stdin), io.BytesIO())._watch_stdin(child)
        assert child.wait(timeout=10) == -signal_sent
    finally:
        child.kill()
        child.wait()


def test_agent_passes_a_stacks_request_to_the_entry_point_as_sigquit_and_goes_on(tmp_path):
    """Ctrl-\\ on the machine that runs `cluster run`: the leader's agent gets "stacks" and the
    entry point SIGQUIT (every rank's stacks); the job goes on until it is stopped."""
    job = agent.AgentJob("j1", str(tmp_path / "j1"), ("a",), "a", {}, 5.0)
    handler = (
        "import signal, time\n"
        "signal.signal(signal.SIGQUIT, lambda *_: print('quit', flush=True))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", handler], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        read, write = os.pipe()
        with open(read) as commands, open(write, "w") as leader:
            watch = threading.Thread(
                target=agent.Agent(job, commands, io.BytesIO())._watch_stdin, args=(child,)
            )
            watch.start()
            leader.write("stacks\n")
            leader.flush()
            assert child.stdout.readline() == "quit\n"
            assert child.poll() is None  # the job goes on
            leader.write("stop\n")
            leader.flush()
            watch.join(timeout=10)
        assert child.wait(timeout=10) == -signal.SIGTERM
    finally:
        child.kill()
        child.wait()


def _default_hangup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def test_the_agents_children_end_on_sighup_though_the_agent_survives_it():
    """The agent once ignored SIGHUP; its entry point inherited that and outlived the hang-up
    it was sent, until the sweep after the grace period killed it."""
    code = (
        "import signal, subprocess, os\n"
        "from ringleader.tools.cluster.agent import survive_hangups\n"
        "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"  # as under nohup
        "survive_hangups()\n"
        "os.kill(os.getpid(), signal.SIGHUP)\n"  # the agent itself goes on
        "child = subprocess.Popen(['sleep', '60'])\n"
        "child.send_signal(signal.SIGHUP)\n"
        "print(child.wait(timeout=10))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == str(-signal.SIGHUP)


# --------------------------------------------------------------------------------------- wheels


def test_ringleader_packs_into_an_installable_wheel():
    name, data = wheels.pack("ringleader")
    assert name.startswith("ringleader-") and name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = archive.namelist()
        assert "ringleader/tools/cluster/agent.py" in names
        assert not any("__pycache__" in n for n in names)
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        record = archive.read(f"{info}/RECORD").decode().splitlines()
        for line in record:
            path, digest, _ = line.rsplit(",", 2)
            if digest:
                expected = base64.urlsafe_b64encode(hashlib.sha256(archive.read(path)).digest())
                assert digest == "sha256=" + expected.rstrip(b"=").decode()
        assert (
            "ringleader = ringleader.tools.cli:main"
            in archive.read(f"{info}/entry_points.txt").decode()
        )


def test_requirement_closure_includes_the_dependencies():
    closure = list(wheels.requirement_closure("ringleader"))
    assert closure[0] == "ringleader"
    assert {"boto3", "botocore", "psutil"} <= set(closure)


FAKE_REQUIRES = {
    "ringleader": [
        "pyyaml>=6",
        "tomli>=2; python_version < '3.11'",
        'pywin32>=304; sys_platform == "win32"',
        'rich; extra == "report"',
    ],
    "pyyaml": [],
}


@pytest.mark.parametrize(
    ("python", "expected"),
    [
        ((3, 10), {"ringleader": "ringleader", "pyyaml": "pyyaml>=6", "tomli": "tomli>=2"}),
        ((3, 12), {"ringleader": "ringleader", "pyyaml": "pyyaml>=6"}),
        (None, {"ringleader": "ringleader", "pyyaml": "pyyaml>=6", "tomli": "tomli>=2"}),
    ],
)
def test_requirement_closure_is_the_hosts_python_s(monkeypatch, python, expected):
    """tomli (not installed here) is listed for a 3.10 host; pywin32, whose marker is not
    about Python and which is not installed here, never is; extras never are."""

    def requires(name):
        if name not in FAKE_REQUIRES:
            raise importlib.metadata.PackageNotFoundError(name)
        return FAKE_REQUIRES[name]

    monkeypatch.setattr(wheels.importlib.metadata, "requires", requires)
    assert wheels.requirement_closure("ringleader", python) == expected


@pytest.mark.parametrize(
    ("marker", "python", "applies"),
    [
        ("", (3, 10), True),
        ('python_version < "3.11"', (3, 10), True),
        ('python_version < "3.11"', (3, 13), False),
        ("python_version >= '3.10' and python_version != '3.12'", (3, 12), False),
        ("python_version >= '3.10' and python_version != '3.12'", (3, 13), True),
        ('python_version < "3.11"', None, True),
        ('extra == "crt"', (3, 11), False),
        ('sys_platform == "win32"', (3, 11), None),
        ('python_version < "3.10" or sys_platform == "x"', (3, 11), None),
    ],
)
def test_marker_applies(marker, python, applies):
    assert wheels.marker_applies(marker, python) is applies


X86_312 = wheels.HostPython((3, 12), "cpython", "x86_64")


@pytest.mark.parametrize(
    ("tag", "fits"),
    [
        ("py3-none-any", True),
        ("py2.py3-none-any", True),
        ("py2-none-any", False),
        ("py312-none-any", True),
        ("py313-none-any", False),
        ("cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64", True),
        ("cp311-cp311-manylinux_2_17_x86_64", False),  # built here for 3.11: not for 3.12
        ("cp312-cp312-manylinux_2_17_aarch64", False),
        ("cp36-abi3-manylinux_2_12_x86_64", True),  # the stable ABI, from 3.6 on
        ("cp313-abi3-manylinux_2_12_x86_64", False),
        ("cp312-none-any", True),
        ("pp310-pypy310_pp73-manylinux_2_17_x86_64", False),
        ("not-a-tag", False),
    ],
)
def test_wheel_fits_the_hosts_python_and_architecture(tag, fits):
    assert wheels.wheel_fits(tag, X86_312) is fits


def test_a_cpython_wheel_does_not_fit_another_implementation():
    pypy = wheels.HostPython((3, 10), "pypy", "x86_64")
    assert not wheels.wheel_fits("cp36-abi3-manylinux_2_12_x86_64", pypy)
    assert wheels.wheel_fits("py3-none-any", pypy)


def test_bootstrap_ships_what_fits_and_leaves_the_rest_to_the_hosts_index():
    needed = {
        "ringleader": "ringleader",
        "pyyaml": "pyyaml>=6",
        "psutil": "psutil>=5.9",
        "boto3": "boto3>=1.28",
        "tomli": "tomli>=2",
        "docker": "docker>=7",
    }
    host_has = {"ringleader": "0.0.1", "docker": "7.1.0"}
    installed_here = {
        "ringleader": ("0.1.0", "py3-none-any"),
        "pyyaml": ("6.0.4", "cp311-cp311-manylinux_2_17_x86_64"),
        "psutil": ("7.2.2", "cp36-abi3-manylinux_2_12_x86_64"),
        "boto3": ("1.44.8", "py3-none-any"),
        "tomli": None,
        "docker": ("7.2.0", "py3-none-any"),
    }
    plan = wheels.plan_bootstrap(needed, host_has, installed_here, X86_312)
    assert plan.shipped == ("ringleader", "psutil", "boto3")
    assert plan.from_index == ("pyyaml==6.0.4", "tomli>=2")
    assert plan.index_note(X86_312) == (
        "; from the host's package index (no build here fits its Python 3.12 on x86_64): "
        "pyyaml==6.0.4, tomli>=2"
    )
    same = wheels.HostPython((3, 11), "cpython", "x86_64")
    plan = wheels.plan_bootstrap(needed, host_has, installed_here, same)
    assert plan.shipped == ("ringleader", "pyyaml", "psutil", "boto3")
    assert plan.from_index == ("tomli>=2",)  # not installed here, but asked for


class FakeDistribution:
    def __init__(self, wheel: str) -> None:
        self.wheel = wheel

    def read_text(self, name):
        return self.wheel if name == "WHEEL" else None


@pytest.mark.parametrize(
    ("wheel", "tag"),
    [
        ("Wheel-Version: 1.0\nTag: py2-none-any\nTag: py3-none-any\n", "py2.py3-none-any"),
        (
            "Tag: cp311-cp311-manylinux_2_17_x86_64\nTag: cp311-cp311-manylinux2014_x86_64\n",
            "cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64",
        ),
        ("Wheel-Version: 1.0\n", "py3-none-any"),
    ],
)
def test_a_packed_wheel_keeps_every_tag_of_the_installed_one(wheel, tag):
    assert wheels._wheel_tag(FakeDistribution(wheel)) == tag


def test_install_remote_installs_wheels_offline_and_the_rest_from_the_index(tmp_path, monkeypatch):
    """Its pip commands, in order, for one wheel and one index requirement; a failing index
    install names what it could not get and how to fix it."""
    calls = []

    def fake_run(argv, **kwargs):
        calls.append(argv)
        if argv[1:3] == ["-m", "venv"]:
            python = Path(argv[3]) / "bin" / "python"
            python.parent.mkdir(parents=True)
            python.write_text("")
        site = tmp_path / "site"
        site.mkdir(exist_ok=True)
        return subprocess.CompletedProcess(argv, fail_index * ("tomli>=2" in argv), str(site), "")

    from ringleader.tools.cluster import install_remote

    monkeypatch.setattr(install_remote.subprocess, "run", fake_run)
    wheel = base64.b64encode(b"zip").decode()
    lines = f"wheel\tringleader-0.1.0-py3-none-any.whl\t{wheel}\nindex\ttomli>=2\n"
    venv = tmp_path / "venv"
    fail_index = 0
    monkeypatch.setattr(sys, "stdin", io.StringIO(lines))
    assert install_remote.main(venv) == 0
    pips = [argv[3:] for argv in calls if argv[1:4] == ["-m", "pip", "install"]]
    assert pips[0][-1] == "tomli>=2"
    assert "--no-index" not in pips[0]
    assert pips[1][-1].endswith("ringleader-0.1.0-py3-none-any.whl")
    assert {"--no-index", "--no-deps"} <= set(pips[1])

    fail_index = 1
    monkeypatch.setattr(sys, "stdin", io.StringIO(lines))
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    assert install_remote.main(venv) == 3
    assert "cannot install tomli>=2 for Python" in err.getvalue()
    assert "--python" in err.getvalue()


# ------------------------------------------------------------------------------- exec and sync


def test_fanout_exit_code_and_table():
    a, b = ClusterHost("a", "a", 1, "h:1"), ClusterHost("bb", "bb", 1, "h:2")
    results = [fanout.HostResult(a, 0, 1.0), fanout.HostResult(b, 3, 2.5, "boom")]
    assert fanout.overall_exit_code(results) == 3
    assert fanout.overall_exit_code(results[:1]) == 0
    table = fanout.result_table(results)
    assert table[2].split() == ["bb", "3", "2.5", "boom"]


def test_rsync_sends_the_directory_contents_resumably():
    argv = fanout.rsync_argv(SshOptions(), "data", "node", "/data")
    assert argv[0] == "rsync"
    assert "--partial" in argv
    assert argv[-2:] == ["data/", "node:/data"]
    assert argv[argv.index("-e") + 1].startswith("ssh -o BatchMode=yes")
    assert not [arg for arg in argv if arg.startswith("--bwlimit")]
    limited = fanout.rsync_argv(SshOptions(), "data", "node", "/data", "20M")
    assert limited[:2] == ["rsync", "--bwlimit=20M"]


@pytest.mark.parametrize(
    ("source", "rate", "expected"),
    [
        ("DIR", "fast", "--bwlimit: a rate such as 800K or 20M, not 'fast'"),
        ("DIR", "-5", "--bwlimit: a rate such as 800K or 20M, not '-5'"),
        ("s3://b/p", "20M", "--bwlimit: rsync's limit; it does not apply to an s3:// source"),
    ],
)
def test_a_bad_sync_bwlimit_exits_78(tmp_path, capsys, source, rate, expected):
    source = str(tmp_path) if source == "DIR" else source
    args = cluster_args("sync", "-H", "localhost", "--bwlimit", rate, source, "/data")
    assert args.func(args) == exitcodes.CONFIG_ERROR
    assert expected in capsys.readouterr().err


def test_s3_sync_copies_only_what_is_missing_or_replaced(tmp_path):
    """A cached file is current only with the size and the ETag it was downloaded at (issue
    23: an object replaced by another of the same size was taken for cached)."""
    for name, data in {"a.bin": b"12345", "b.bin": b"1", "d.bin": b"xy", "e.bin": b"z"}.items():
        (tmp_path / name).write_bytes(data)
    recorded = {"a.bin": '"aaa"', "b.bin": '"bbb"', "d.bin": '"old"'}
    objects = [
        ("p/a.bin", 5, '"aaa"'),  # as downloaded
        ("p/b.bin", 3, '"bbb"'),  # another size
        ("p/sub/c.bin", 1, '"ccc"'),  # not here
        ("p/d.bin", 2, '"new"'),  # replaced by an object of the same size
        ("p/e.bin", 1, '"eee"'),  # here, but not known to be this version
        ("p/", 0, '""'),
    ]
    assert missing(objects, "p/", tmp_path, recorded) == [
        "p/b.bin",
        "p/sub/c.bin",
        "p/d.bin",
        "p/e.bin",
    ]
    with pytest.raises(ValueError, match="leaves"):
        missing([("p/../x", 1, '"x"')], "p/", tmp_path, {})


# ---------------------------------------------------------------------------- the command line


def cluster_args(*argv):
    from ringleader.tools.cli import build_parser

    return build_parser().parse_args(["cluster", *argv])


def resolves_all_but(bad):
    def resolve(name, port):
        if name == bad:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return []

    return resolve


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "Configuration error in --hostfile: cannot read"),
        ("", "no hosts"),
        ("a\na\n", "hosts:2 host"),
        ("a slots=0\n", "hosts:1 slots"),
        ("a slots=abc\n", "hosts:1 slots"),
        ("a\nghost slots=2\n", "hosts:2 host: cannot resolve 'ghost'"),
    ],
)
def test_bad_hostfiles_exit_78_before_anything_starts(tmp_path, capsys, content, expected):
    from ringleader.tools.cluster import cli

    hostfile = tmp_path / "hosts"
    if content is not None:
        hostfile.write_text(content)
    args = cluster_args("run", "--hostfile", str(hostfile), "--", "python", "x.py")
    with pytest.raises(ConfigError) as error:
        cli.read_hosts(args, resolves_all_but("ghost"))
        raise AssertionError("no error")
    assert expected in str(error.value).replace(str(hostfile), "hosts")
    # through the command: the same message, exit 78 (a missing file needs no resolver)
    if content is None or "ghost" not in content:
        assert args.func(args) == exitcodes.CONFIG_ERROR
        assert "ringleader cluster: Configuration error" in capsys.readouterr().err


def test_more_processes_than_slots_exits_78(tmp_path, capsys):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=2\n")
    args = cluster_args("run", "--hostfile", str(hostfile), "--processes-per-host", "4", "--", "x")
    assert args.func(args) == exitcodes.CONFIG_ERROR
    assert (
        "--processes-per-host: 4 is more than the 2 slots of localhost" in capsys.readouterr().err
    )


def test_missing_command_exits_78(tmp_path, capsys):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost\n")
    args = cluster_args("exec", "--hostfile", str(hostfile))
    assert args.func(args) == exitcodes.CONFIG_ERROR
    assert "COMMAND: missing" in capsys.readouterr().err


@pytest.mark.parametrize("verb", ["run", "attach", "status", "stop", "sync"])
def test_every_verb_that_starts_python_on_the_hosts_takes_the_python_option(verb):
    from ringleader.tools.cluster import cli

    rest = {"run": ["--", "p"], "attach": ["j1"], "stop": ["j1"], "sync": ["src", "/dst"]}
    args = cluster_args(verb, "-H", "a", "--python", "/opt/py/bin/python3.13", *rest.get(verb, []))
    assert cli._ssh(args).remote_python == "/opt/py/bin/python3.13"
    assert cli._ssh(cluster_args(verb, "-H", "a", *rest.get(verb, []))).remote_python is None


def test_exec_runs_no_python_of_ours():
    from ringleader.tools.cluster import cli

    assert cli._ssh(cluster_args("exec", "-H", "a", "--", "true")).remote_python is None


@pytest.mark.parametrize("value", ["", "  ", "/a\nb"])
def test_a_bad_python_option_exits_78(tmp_path, capsys, value):
    args = cluster_args("run", "-H", "localhost", "--python", value, "--", "python", "x.py")
    assert args.func(args) == exitcodes.CONFIG_ERROR
    err = capsys.readouterr().err
    assert "--python: expected the path of the hosts' Python interpreter" in err


def test_a_remote_dir_too_long_for_the_job_sockets_is_refused_up_front():
    job_id = run.new_job_id()
    run.check_remote_dir(cluster_job(job_id=job_id))  # the default is fine
    longest = "/" + "d" * (107 - len(f"/{job_id}/run/sshd-notify.sock") - 1)
    run.check_remote_dir(cluster_job(job_id=job_id, remote_dir=longest))  # 107 bytes exactly
    with pytest.raises(ConfigError) as error:
        run.check_remote_dir(cluster_job(job_id=job_id, remote_dir=longest + "d"))
    assert error.value.field == "--remote-dir"
    assert f"at most {len(longest)} bytes" in str(error.value)


def test_s3_download_fetches_an_object_replaced_by_one_of_the_same_size(tmp_path, monkeypatch):
    """Against moto: a second sync copies nothing; after the object is replaced by another of
    the same size, the next sync copies it again."""
    import boto3
    from moto import mock_aws

    from ringleader.aws.download import download_prefix

    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="data")
        client.put_object(Bucket="data", Key="train/shard-0", Body=b"version 1")
        steps: list[str] = []

        def sync() -> tuple[int, int]:
            return download_prefix(
                client, "data", "train/", tmp_path, lambda *a: steps.append(a[2])
            )

        assert sync() == (1, 1)
        assert sync() == (0, 1)
        client.put_object(Bucket="data", Key="train/shard-0", Body=b"version 2")  # same size
        assert sync() == (1, 1)
        assert (tmp_path / "shard-0").read_bytes() == b"version 2"
        assert steps == ["train/shard-0", "train/shard-0"]
        assert [path.name for path in tmp_path.iterdir()] == ["shard-0"]  # nothing but data


# ------------------------------------------------------------------------------------ spares


def hosts_named(*names):
    return tuple(ClusterHost(name, name, 2, f"hosts:{i}") for i, name in enumerate(names, 1))


def spare_job(hosts=("a", "b", "c"), spares=("d", "e"), **changes):
    return cluster_job(hosts=hosts_named(*hosts), spares=hosts_named(*spares), **changes)


def attempt(number, cause="Rank 3 on host b exited with code 3.", lost=(), **changes):
    values = dict(
        attempt=number,
        started_at=100.0 + number,
        ended_at=150.0 + number,
        exit_code=exitcodes.HOST_LOST if lost else 3,
        cause=cause,
        hosts=("a", "b", "c"),
        progressed=True,
        lost=tuple(lost),
    )
    values.update(changes)
    return AttemptRecord(**values)


def test_spares_are_the_last_hosts_of_the_hostfile():
    hosts = hosts_named("a", "b", "c", "d")
    assert run.split_spares(hosts, 0, "the hostfile") == (hosts, ())
    assert run.split_spares(hosts, 1, "the hostfile") == (hosts[:3], hosts[3:])
    with pytest.raises(ConfigError) as error:
        run.split_spares(hosts[:3], 3, "the hostfile")
    assert str(error.value) == (
        "Configuration error in --spares: 3 spares leave no host to run the job on "
        "(the hostfile has 3)"
    )
    with pytest.raises(ConfigError, match="1 spare leaves no host to run the job on"):
        run.split_spares(hosts[:1], 1, "the -H list")


def loopback_hosts(tmp_path, count):
    """A hostfile of `count` hosts that resolve without a network (127.0.0.x)."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text("".join(f"127.0.0.{i} slots=2\n" for i in range(1, count + 1)))
    return str(hostfile)


def test_spares_leaving_no_host_exit_78_before_anything_starts(tmp_path, capsys, monkeypatch):
    started = []
    monkeypatch.setattr(run.ClusterRun, "run", lambda self: started.append(self) or 0)
    hostfile = loopback_hosts(tmp_path, 3)
    args = cluster_args("run", "--hostfile", hostfile, "--spares", "3", "--", "python", "x.py")
    assert args.func(args) == exitcodes.CONFIG_ERROR
    assert (
        "ringleader cluster: Configuration error in --spares: 3 spares leave no host to run the "
        "job on (the hostfile has 3)" in capsys.readouterr().err
    )
    args = cluster_args("run", "-H", "127.0.0.1,127.0.0.2", "--spares", "2", "--", "x")
    assert args.func(args) == exitcodes.CONFIG_ERROR
    assert "(the -H list has 2)" in capsys.readouterr().err
    assert started == []
    # a valid one reaches the run with the last host as the spare
    args = cluster_args("run", "--hostfile", hostfile, "--spares", "1", "--", "python", "x.py")
    assert args.func(args) == 0
    (launched,) = started
    assert [host.address for host in launched.job.hosts] == ["127.0.0.1", "127.0.0.2"]
    assert [host.address for host in launched.job.spares] == ["127.0.0.3"]


def test_a_detached_job_takes_its_spares_with_the_hosts_its_preflight_left(tmp_path, monkeypatch):
    """The preflight runs before the job detaches (a spare in a failed host's place); the
    runner on the leader gets those hosts and the spares left, for the later runs."""
    from ringleader.tools.cluster import remote

    def preflight(self):
        # 127.0.0.2 failed its preflight: the spare 127.0.0.3 takes its place
        hosts, spares = self.job.hosts, self.job.spares
        self.job = dataclasses.replace(self.job, hosts=(hosts[0], spares[0]), spares=())

    detached = []
    monkeypatch.setattr(run.ClusterRun, "preflight", preflight)
    monkeypatch.setattr(
        remote, "start_detached", lambda job, *rest: detached.append(job_to_json(job)) or 0
    )
    hostfile = loopback_hosts(tmp_path, 3)
    argv = ["run", "--hostfile", hostfile, "--spares", "1", "--max-restarts", "1", "--detach"]
    args = cluster_args(*argv, "--", "python", "x.py")
    assert args.func(args) == 0
    (job,) = (job_from_json(text) for text in detached)
    assert [host.address for host in job.hosts] == ["127.0.0.1", "127.0.0.3"]
    assert job.spares == ()
    assert job.settings["max_restarts"] == "1"


@pytest.mark.parametrize("value", ["-1", "x", "1.5"])
def test_a_spares_count_that_is_not_a_whole_number_is_a_usage_error(capsys, value):
    with pytest.raises(SystemExit) as exit_:
        cluster_args("run", "-H", "a,b", f"--spares={value}", "--", "x")
    assert exit_.value.code == 2
    assert "--spares: expected a whole number of at least 0" in capsys.readouterr().err


def test_a_spare_that_passed_its_preflight_replaces_a_host_that_failed_it():
    job = spare_job()
    swap = run.after_preflight(job, {"b"})
    assert [host.name for host in swap.hosts] == ["a", "d", "c"]
    assert [host.name for host in swap.spares] == ["e"]
    assert [(old.name, new.name) for old, new in swap.replaced] == [("b", "d")]
    assert swap.unreplaced == ()
    # a spare that failed is skipped; hosts are replaced in the job's order
    swap = run.after_preflight(job, {"c", "d", "a"})
    assert [(old.name, new.name) for old, new in swap.replaced] == [("a", "e")]
    assert [host.name for host in swap.unreplaced] == ["c"]
    assert swap.spares == ()
    # nobody failed: nothing changes
    assert run.after_preflight(job, set()) == run.Swap(job.hosts, job.spares)


def fake_probes(monkeypatch, answers):
    """probe_hosts answering from `answers` (host name: HostFacts, or None: unreachable)."""

    def probe_hosts(hosts, ssh, needs, names, timeout):
        return [
            preflight.Probe(host, answers[host.name], None if answers[host.name] else "refused")
            for host in hosts
        ]

    monkeypatch.setattr(preflight, "probe_hosts", probe_hosts)


def test_preflight_replaces_a_failed_host_by_a_spare_and_says_so(monkeypatch):
    fake_probes(
        monkeypatch, {"a": facts(), "b": facts(mpirun=False), "c": facts(), "d": None, "e": facts()}
    )
    out = io.StringIO()
    launcher = run.ClusterRun(spare_job(), out)
    assert launcher.preflight() is None
    text = out.getvalue()
    assert "    spares: d e\n" in text
    assert (
        "==> b failed its preflight (no mpirun on the PATH of a non-interactive ssh session "
        "(Open MPI needed)): replaced by spare e\n" in text
    )
    assert "==> spare d failed its preflight (unreachable over ssh: refused): not used\n" in text
    assert launcher.job.names == ("a", "e", "c")
    assert launcher.job.spares == ()


@pytest.mark.parametrize(
    ("answers", "code"),
    [
        ({"a": facts(), "b": None, "c": None, "d": facts(), "e": None}, exitcodes.HOST_UNREACHABLE),
        (
            {"a": facts(), "b": facts(mpirun=False), "c": facts(), "d": None, "e": None},
            exitcodes.CONFIG_ERROR,
        ),
    ],
)
def test_preflight_with_no_fit_spare_left_launches_nothing(monkeypatch, answers, code):
    fake_probes(monkeypatch, answers)
    out = io.StringIO()
    launcher = run.ClusterRun(spare_job(), out)
    assert launcher.preflight() == code
    text = out.getvalue()
    assert text.endswith("==> nothing was launched\n")
    unfit = [name for name in "bc" if answers[name] is None or name == "b"]
    assert f"error: {unfit[-1]} (hosts:" in text
    assert "error: e (hosts:2) (a spare): unreachable over ssh: refused" in text
    assert launcher.job.names == ("a", "b", "c")  # as it was


def test_the_hosts_a_run_lost():
    names = ("a", "b", "c")
    summary = JobSummary(75, "Host b ...", names, 6, None, (), attempts=(attempt(0, lost=["b"]),))
    assert run.lost_in_run(summary, 0, names, {"a": 75, "b": 75, "c": 75}) == ("b",)
    # a host whose connection failed too (ssh's 255), in the job's order
    assert run.lost_in_run(summary, 0, names, {"a": 75, "b": 75, "c": 255}) == ("b", "c")
    # the leader's connection failed, or its job.json could not be read: the leader is lost
    assert run.lost_in_run(summary, 0, names, {"a": 255, "b": 75, "c": 75}) == ("a", "b")
    assert run.lost_in_run(None, 0, names, {"a": 75, "b": 75, "c": 75}) == ("a",)
    # an attempt of an earlier run does not count for this one
    assert run.lost_in_run(summary, 1, names, {"a": 75, "b": 75, "c": 75}) == ()


def test_a_runs_attempts_and_the_last_one_amended_to_name_the_spare():
    names, earlier = ("a", "b", "c"), (attempt(0),)
    made = (attempt(0), attempt(1, cause="Host b was lost.", lost=["b"]))
    summary = JobSummary(75, "Host b was lost.\n...", names, 6, None, (), attempts=made)
    assert run.run_attempts(summary, earlier, names, 1.0, 2.0, ("b",)) == made
    # job.json records no attempt of this run (lost as it started): the run counts as one
    before = JobSummary(
        75, "Host b was lost before the job started.\n", names, 6, None, (), attempts=earlier
    )
    alone = run.run_attempts(before, earlier, names, 1.0, 2.0, ("b",))
    assert alone[:-1] == earlier
    assert alone[-1] == AttemptRecord(
        1, 1.0, 2.0, 75, "Host b was lost before the job started.", names, False, ("b",)
    )
    # no job.json at all: one attempt, which may have made progress
    (only,) = run.run_attempts(None, (), names, 1.0, 2.0, ("a",))
    assert only.attempt == 0 and only.progressed and only.lost == ("a",)
    assert "job.json was not fetched" in (only.cause or "")

    swap = run.swap_in_spares(hosts_named(*names), hosts_named("d", "e"), {"b"})
    amended = run.amend_last(made, swap)
    assert amended[0] == made[0]
    assert amended[1].cause == "Host b was lost. (b replaced by spare d)"
    assert amended[1].lost == ("b",)
    # a host lost only by its connection is added to the attempt's lost hosts
    swap = run.swap_in_spares(hosts_named(*names), hosts_named("d", "e"), {"b", "c"})
    assert run.amend_last(made, swap)[1].lost == ("b", "c")
    assert run.amend_last(made, swap)[1].cause == (
        "Host b was lost. (b replaced by spare d; c replaced by spare e)"
    )


def test_the_restart_budget_counts_every_attempt_of_the_job():
    assert run.restart_refusal([attempt(0, lost=["b"])], 0) == (
        "no restart without --max-restarts (ringleader_max_restarts is 0)"
    )
    assert run.restart_refusal([attempt(0, lost=["b"])], 1) is None
    assert run.restart_refusal([attempt(0), attempt(1, lost=["b"])], 1) == (
        "no restart left (--max-restarts 1)"
    )
    assert run.restart_refusal([attempt(0), attempt(1, lost=["b"])], 2) is None
    assert run.max_restarts({"max_restarts": "2"}) == 2
    assert run.max_restarts({}) == run.max_restarts({"max_restarts": "x"}) == 0


def test_the_next_run_has_its_own_id_the_same_results_and_the_attempts_so_far():
    job = spare_job(settings={"max_restarts": "2", "sigterm_grace": "5"})
    swap = run.swap_in_spares(job.hosts, job.spares, {"b"})
    history = run.amend_last((attempt(0, lost=["b"]),), swap)
    following = run.next_run(job, "cluster-1-r1", swap, history)
    assert following.job_id == "cluster-1-r1"
    assert following.names == ("a", "d", "c") and following.spares == job.spares[1:]
    assert following.results_dir == job.results_dir == Path("ringleader-output/cluster-1")
    assert following.job_dir.endswith("/cluster-1-r1")
    assert following.settings["max_restarts"] == "2"
    # what every host of the next run is given, as its entry point reads it
    raw = run.cluster_hyperparameters(following)
    topology = parse_topology({}, {"hosts": ["a", "c", "d"], "current_host": "d"})
    config = parse_job_config(topology, raw, {})
    assert config.restart.history == history
    assert config.restart.max_restarts == 2
    assert config.timeouts.sigterm_grace == 5


def test_the_console_lines_of_a_lost_host():
    job = spare_job(spares=("d",))
    swap = run.swap_in_spares(job.hosts, job.spares, {"b"})
    assert run.restart_line(("b",), swap, 1, 2) == (
        "==> b lost: restarting the job on a d c (spare d replaces b), attempt 1 (restart 1 of 2)"
    )
    short = run.swap_in_spares(job.hosts, job.spares, {"b", "c"})
    assert run.no_restart_line(("b", "c"), short, None) == (
        "==> b, c lost: no spare left for c; the job ends with exit code 75"
    )
    why = "no restart left (--max-restarts 1)"
    assert run.no_restart_line(("b",), swap, why) == (
        "==> b lost: no restart left (--max-restarts 1); the job ends with exit code 75"
    )
    assert "neither the leader's job.json nor a connection says which" in run.no_restart_line(
        (), swap, None
    )
    assert run.headline(job) == (
        "==> job cluster-1: 3 hosts x 2 (mpi), 1 spare (d): python train.py --epochs 2"
    )


class ScriptedRuns:
    """ClusterRun's agents and fetches replaced: each run ends with the next codes, and the
    leader's job.json it "fetches" holds the given attempts."""

    def __init__(self, monkeypatch, runs):
        self.runs, self.jobs = list(runs), []
        monkeypatch.setattr(run.ClusterRun, "_run_agents", lambda launcher: self.agents(launcher))
        monkeypatch.setattr(run.ClusterRun, "_fetch_all", lambda launcher: self.fetch(launcher))

    def agents(self, launcher):
        self.jobs.append(launcher.job)
        self.codes, self.attempts = self.runs.pop(0)
        return self.codes

    def fetch(self, launcher):
        job = launcher.job
        leader = min(job.names)
        for name in job.names:
            (job.results_dir / name / "output").mkdir(parents=True)
        if self.attempts is not None:
            summary = JobSummary(
                self.codes[leader],
                None if self.codes[leader] == 0 else "Host b was lost.\n",
                job.names,
                6,
                None,
                (),
                attempts=tuple(self.attempts),
            )
            write_job_file(job.results_dir / leader / "output" / "data" / "job.json", summary)
        return {host: None for host in job.hosts}


def test_a_lost_host_is_replaced_by_a_spare_and_the_job_runs_again(tmp_path, monkeypatch):
    job = spare_job(
        spares=("d",), settings={"max_restarts": "1"}, output_dir=tmp_path / "out", job_id="j"
    )
    lost = attempt(0, cause="Host b was lost.", lost=["b"], hosts=("a", "b", "c"))
    done = attempt(1, cause=None, exit_code=0, hosts=("a", "c", "d"))
    scripted = ScriptedRuns(
        monkeypatch,
        [
            ({"a": 75, "b": 255, "c": 75}, [lost]),
            ({"a": 0, "d": 0, "c": 0}, [lost, done]),
        ],
    )
    stale = tmp_path / "out" / "run-0" / "a" / "stale"  # an older job's, with the same --output
    stale.parent.mkdir(parents=True)
    stale.touch()
    out = io.StringIO()
    assert run.ClusterRun(job, out).launch() == 0
    assert not stale.exists()
    first, second = scripted.jobs
    assert first.job_id == "j" and second.job_id == "j-r1"
    assert second.names == ("a", "d", "c") and second.spares == ()
    history = parse_history("earlier_attempts", second.settings["earlier_attempts"])
    assert history == (replace(lost, cause="Host b was lost. (b replaced by spare d)"),)
    text = out.getvalue()
    assert "==> job j ended: exit code 75\n" in text
    assert (
        "==> b lost: restarting the job on a d c (spare d replaces b), attempt 1 (restart 1 of 1)"
        in text
    )
    assert "==> job j-r1: 3 hosts x 2 (mpi): python train.py" in text
    assert text.endswith("==> job j-r1 ended: exit code 0\n")
    # the earlier run's results beside the final run's
    assert f"==> results in {tmp_path}/out/run-0/<host>/:" in text
    assert sorted(path.name for path in (tmp_path / "out" / "run-0").iterdir()) == ["a", "b", "c"]
    assert (tmp_path / "out" / "run-0" / "a" / "output" / "data" / "job.json").is_file()
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["a", "c", "d", "run-0"]


@pytest.mark.parametrize(
    ("max_restarts", "spares", "expected"),
    [
        ("1", ("d",), "==> b, c lost: no spare left for c; the job ends with exit code 75"),
        ("0", ("d", "e"), "==> b, c lost: no restart without --max-restarts"),
    ],
)
def test_a_lost_host_with_no_spare_or_restart_left_ends_the_job(
    tmp_path, monkeypatch, max_restarts, spares, expected
):
    job = spare_job(
        spares=spares,
        settings={"max_restarts": max_restarts},
        output_dir=tmp_path / "out",
        job_id="j",
    )
    lost = attempt(0, cause="Host b was lost.", lost=["b"])
    scripted = ScriptedRuns(monkeypatch, [({"a": 75, "b": 255, "c": 255}, [lost])])
    out = io.StringIO()
    assert run.ClusterRun(job, out).launch() == exitcodes.HOST_LOST
    assert len(scripted.jobs) == 1
    text = out.getvalue()
    assert text.splitlines()[-1].startswith(expected), text
    assert f"==> results in {tmp_path}/out/<host>/:" in text  # where they are now
    assert not (tmp_path / "out" / "run-0").exists()


def test_a_lost_leader_is_replaced_and_the_run_counts_as_one_attempt(tmp_path, monkeypatch):
    job = spare_job(
        spares=("d",), settings={"max_restarts": "3"}, output_dir=tmp_path / "out", job_id="j"
    )
    scripted = ScriptedRuns(
        monkeypatch, [({"a": 255, "b": 75, "c": 75}, None), ({"b": 0, "c": 0, "d": 0}, [])]
    )
    out = io.StringIO()
    assert run.ClusterRun(job, out).launch() == 0
    second = scripted.jobs[1]
    assert second.names == ("d", "b", "c")
    (only,) = parse_history("earlier_attempts", second.settings["earlier_attempts"])
    assert only.attempt == 0 and only.lost == ("a",)
    assert only.cause is not None and only.cause.endswith("(a replaced by spare d)")
    assert "==> a lost: restarting the job on d b c (spare d replaces a), attempt 1" in (
        out.getvalue()
    )
