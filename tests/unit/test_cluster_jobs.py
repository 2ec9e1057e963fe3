"""`ringleader cluster run --mpi-options/--env/--detach`, `attach`, `status`, `stop`: argument
parsing, the job as JSON, the registry of detached jobs and the leader's side of each verb
(with a stand-in runner process instead of a real job)."""

import io
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from ringleader.core import exitcodes
from ringleader.core.errors import ConfigError
from ringleader.tools import cli
from ringleader.tools.cluster import agent, jobs, registry, remote, run
from ringleader.tools.cluster.hostfile import ClusterHost
from ringleader.tools.cluster.jobspec import job_from_json, job_to_json, results_on_leader
from ringleader.tools.cluster.registry import JobRecord
from ringleader.tools.cluster.ssh import SshOptions

HOSTS = (ClusterHost("10.0.0.3", "node-b", 2, "hosts:2"), ClusterHost("node-a", "node-a", 2, "h:1"))


def a_job(**values: object) -> run.ClusterJob:
    base: dict[str, object] = dict(
        hosts=HOSTS, command=("python", "job.py"), cwd="/work", processes_per_host=2, job_id="j1"
    )
    base.update(values)
    return run.ClusterJob(**base)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- argument parsing
@pytest.mark.parametrize(
    "argv",
    [
        ["cluster", "run", "-H", "no-such-host.invalid:1", "--env", "NOVALUE", "--", "true"],
        ["cluster", "run", "-H", "x.invalid:1", "--env", "A=secret-1", "--env", "=v", "--", "true"],
    ],
)
def test_env_without_equals_is_a_usage_error_naming_the_flag(argv, capsys):
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert "--env: expected KEY=VALUE" in err
    assert "secret-1" not in err
    # nothing started: the hosts (which do not resolve) were never even looked up
    assert "cannot resolve" not in err


def test_env_value_is_never_shown_in_the_error(capsys):
    code = cli.main(["cluster", "run", "-H", "a.invalid:1", "--env", "1BAD=hunter2", "--", "x"])
    err = capsys.readouterr().err
    assert code == 2 and "1BAD=..." in err and "hunter2" not in err


def test_run_parses_mpi_options_env_and_detach():
    args = cli.build_parser().parse_args(
        [
            "cluster",
            "run",
            "-H",
            "a:2",
            "--mpi-options",
            "-x NCCL_DEBUG=INFO -mca btl ^openib",
            "--env",
            "A=1",
            "--env",
            "B=x=y",
            "--detach",
            "--",
            "python",
            "t.py",
        ]
    )
    assert args.mpi_options == "-x NCCL_DEBUG=INFO -mca btl ^openib"
    assert args.env == ["A=1", "B=x=y"] and args.detach and args.start_timeout == 60.0


@pytest.mark.parametrize(
    ("argv", "job", "timeout"),
    [
        (["cluster", "attach", "-H", "a:1", "j-1"], "j-1", None),
        (["cluster", "stop", "-H", "a:1", "j-1"], "j-1", 60.0),
        (["cluster", "status", "-H", "a:1"], None, None),
    ],
)
def test_attach_stop_status_arguments(argv, job, timeout):
    args = cli.build_parser().parse_args(argv)
    assert args.job == job and args.remote_dir == f"/tmp/ringleader-jobs-{os.getuid()}"
    assert getattr(args, "timeout", None) == timeout


def test_attach_needs_a_job_id():
    with pytest.raises(SystemExit) as raised:
        cli.build_parser().parse_args(["cluster", "attach", "-H", "a:1"])
    assert raised.value.code == 2


def test_a_job_id_that_is_a_path_is_refused_before_anything_runs(capsys):
    code = cli.main(["cluster", "attach", "-H", "a.invalid:1", "../etc"])
    assert code == exitcodes.CONFIG_ERROR
    assert "'../etc'" in capsys.readouterr().err


# ---------------------------------------------------------------------------- the job's parts
def test_mpi_options_become_sagemakers_custom_mpi_options():
    raw = run.cluster_hyperparameters(a_job(mpi_options="-bind-to none -x NCCL_DEBUG=INFO"))
    assert json.loads(raw["sagemaker_mpi_custom_mpi_options"]) == "-bind-to none -x NCCL_DEBUG=INFO"
    assert "sagemaker_mpi_custom_mpi_options" not in run.cluster_hyperparameters(a_job())


def test_env_reaches_every_host_but_never_its_hyperparameters(tmp_path):
    job = a_job(env={"SECRET": "s3cr3t", "NCCL_DEBUG": "WARN"})
    assert "s3cr3t" not in json.dumps(run.cluster_hyperparameters(job))
    spec = agent.AgentJob("j1", str(tmp_path), ("a",), "a", {}, 5.0, env=job.env)
    again = agent.AgentJob.from_json(spec.to_json())
    assert again.env == {"SECRET": "s3cr3t", "NCCL_DEBUG": "WARN"}
    env = agent.job_environment(again, {"HOME": "/root", "NCCL_DEBUG": "INFO"})
    assert env["SECRET"] == "s3cr3t" and env["NCCL_DEBUG"] == "WARN"


def test_the_users_env_cannot_move_the_jobs_own_locations(tmp_path):
    spec = agent.AgentJob(
        "j1", str(tmp_path), ("a",), "a", {}, 5.0, env={"SAGEMAKER_BASE_DIR": "/x"}
    )
    assert agent.job_environment(spec, {})["SAGEMAKER_BASE_DIR"] == str(tmp_path / "ml")


def test_an_agent_job_without_env_still_reads():
    line = json.dumps(
        {"job": "j", "job_dir": "/d", "hosts": ["a"], "current_host": "a"}
        | {"hyperparameters": {}, "grace": 5}
    )
    assert agent.AgentJob.from_json(line).env == {}


def test_job_json_round_trip():
    job = a_job(
        mpi_options="-x A=1",
        env={"K": "v"},
        settings={"sigterm_grace": "5"},
        output_dir=Path("out"),
        ssh=SshOptions(7.0, ("Port=2222",), "/opt/py 3.12/bin/python"),
        distribution="torch_distributed",
        spares=(ClusterHost("10.0.0.9", "node9", 2, "hosts:4"),),
    )
    assert job_from_json(job_to_json(job)) == job
    assert job_from_json(job_to_json(a_job())) == a_job()


def test_results_of_a_detached_job_are_on_the_leader_under_its_working_directory():
    assert results_on_leader(a_job()) == Path("/work/ringleader-output/j1")
    assert results_on_leader(a_job(output_dir=Path("/data/out"))) == Path("/data/out")


def test_how_to_follow_a_detached_job_repeats_its_python_option():
    assert "--python" not in remote._where_flags(a_job())
    job = a_job(ssh=SshOptions(remote_python="/opt/py 3.12/bin/python"))
    assert remote._where_flags(job).endswith("--python '/opt/py 3.12/bin/python' ")


def test_the_leader_is_the_first_host_by_name():
    assert remote.leader(HOSTS).name == "node-a"


def test_a_local_host_runs_its_agent_directly():
    runner = run.ClusterRun(a_job(), io.StringIO(), local_host="node-a")
    assert runner._agent_argv(HOSTS[1])[:3] == [
        sys.executable,
        "-m",
        "ringleader.tools.cluster.agent",
    ]
    assert runner._agent_argv(HOSTS[0])[0] == "ssh"


# ------------------------------------------------------------------------------------ registry
@pytest.mark.parametrize("bad", ["../x", "a/b", ".hidden", "", "x" * 200, "a b"])
def test_job_ids_that_are_not_names_are_refused(bad):
    with pytest.raises(ConfigError):
        registry.job_console("/tmp/r", bad)


def test_record_round_trip_and_states():
    record = JobRecord("j1", 42, 1.5, "2026-11-25 10:00:00", "node-a", ("a", "b"), ("py",), "/o")
    assert JobRecord.from_json(record.to_json()) == record
    assert registry.state_of(record, None, True).state == registry.RUNNING
    ended = registry.state_of(record, 3, False)
    assert (ended.state, ended.code) == (registry.ENDED, 3)
    assert "exit code 3" in ended.summary() and "/o/<host>/" in ended.summary()
    gone = registry.state_of(record, None, False)
    assert (gone.state, gone.code) == (registry.VANISHED, registry.RUNNER_VANISHED)
    rows = registry.status_table([ended, registry.state_of(record, None, True)])
    assert rows[0].split()[:3] == ["JOB", "STATE", "EXIT"]
    assert [row.split()[1:3] for row in rows[1:]] == [["ended", "3"], ["running", "-"]]


@pytest.mark.parametrize(
    ("line", "code"),
    [("ringleader-exit-code=143\n", 143), ("ringleader-exit-code=x", None), ("other", None)],
)
def test_trailer(line, code):
    assert registry.split_trailer(line) == code


# ------------------------------------------------------------------ the leader's side, for real
RUNNER = textwrap.dedent(
    """\
    import json, os, signal, sys, time
    console, code = sys.argv[1], int(sys.argv[2])
    def end(code):
        with open(console + "/.exit", "w") as f:
            json.dump({"exit_code": code}, f)
        os.rename(console + "/.exit", console + "/exit.json")
        sys.exit(code)
    signal.signal(signal.SIGTERM, lambda *_: (print("stopping", flush=True), end(143)))
    for n in range(int(sys.argv[3])):
        print(f"line {n}", flush=True)
        time.sleep(0.1)
    if code >= 0:
        end(code)
    time.sleep(600)
    """
)


@pytest.fixture
def start_runner(tmp_path):
    started: list[subprocess.Popen[bytes]] = []

    def start(job: str, code: int, lines: int) -> Path:
        console = tmp_path / job / "console"
        console.mkdir(parents=True)
        log = (console / "output.log").open("ab")
        log.write(b"==> preflight\n")
        log.flush()
        process = subprocess.Popen(
            [sys.executable, "-c", RUNNER, str(console), str(code), str(lines)], stdout=log
        )
        log.close()
        started.append(process)
        record = JobRecord(
            job,
            process.pid,
            psutil.Process(process.pid).create_time(),
            "2026-11-25 10:00:00",
            "node-a",
            ("node-a",),
            ("python", "job.py"),
            "/work/out",
        )
        (console / "record.json").write_text(record.to_json())
        return console

    yield start
    for process in started:
        process.kill()
        process.wait()


def wait_for_output(console: Path, text: str) -> None:
    deadline = time.monotonic() + 30
    while text not in (console / "output.log").read_text():
        assert time.monotonic() < deadline, f"no {text!r}"
        time.sleep(0.05)


def test_attach_follows_from_the_beginning_and_returns_the_jobs_code(tmp_path, start_runner):
    start_runner("j1", 3, 20)
    out = io.BytesIO()
    started = time.monotonic()
    code = jobs.attach(str(tmp_path), "j1", 60.0, out, None)
    text = out.getvalue().decode()
    assert code == 3
    assert time.monotonic() - started < 30
    assert text.startswith("==> preflight\nline 0\n")
    assert "line 19\n" in text
    assert text.splitlines()[-1].startswith("==> job j1 ended: exit code 3; results on node-a")


def test_attach_to_an_ended_job_prints_everything_and_its_code(tmp_path, start_runner):
    console = start_runner("j2", 5, 2)
    jobs_done = jobs.status_of(console)
    deadline = time.monotonic() + 30
    while jobs_done is not None and jobs_done.state == registry.RUNNING:
        assert time.monotonic() < deadline
        time.sleep(0.05)
        jobs_done = jobs.status_of(console)
    out = io.BytesIO()
    assert jobs.attach(str(tmp_path), "j2", None, out, None) == 5
    assert out.getvalue().decode().splitlines() == [
        "==> preflight",
        "line 0",
        "line 1",
        "==> job j2 ended: exit code 5; results on node-a in /work/out/<host>/",
    ]


def test_attach_with_a_timeout_names_it(tmp_path, start_runner, capsys):
    start_runner("j3", -1, 1)
    out = io.BytesIO()
    assert jobs.attach(str(tmp_path), "j3", 0.5, out, None) == registry.WAIT_TIMED_OUT
    assert "--timeout 0.5 s passed; job j3 is still running" in capsys.readouterr().err


def test_attach_stops_when_the_one_attached_has_gone(tmp_path, start_runner):
    start_runner("j4", -1, 1)
    read_end, write_end = os.pipe()
    os.close(write_end)
    try:
        assert jobs.attach(str(tmp_path), "j4", 30.0, io.BytesIO(), read_end) != 0
    finally:
        os.close(read_end)


def test_stop_ends_the_job_like_ctrl_c_and_waits_for_it(tmp_path, start_runner):
    console = start_runner("j5", -1, 1)
    wait_for_output(console, "line 0")  # its SIGTERM handler is in place
    out = io.BytesIO()
    assert jobs.stop(str(tmp_path), "j5", 30.0, out) == 0
    assert registry.read_exit(console) == 143
    assert "exit code 143" in out.getvalue().decode().splitlines()[-1]
    out = io.BytesIO()
    assert jobs.stop(str(tmp_path), "j5", 30.0, out) == 0  # again: it had ended already
    assert "already over" in out.getvalue().decode()


def test_a_runner_gone_without_an_exit_code_is_reported(tmp_path, start_runner):
    console = start_runner("j6", -1, 1)
    record = registry.read_record(console)
    assert record is not None
    os.kill(record.pid, 9)
    psutil.Process(record.pid).wait(10)
    out = io.BytesIO()
    assert jobs.attach(str(tmp_path), "j6", 30.0, out, None) == registry.RUNNER_VANISHED
    assert "ended without an exit code" in out.getvalue().decode()


def test_status_lists_every_job(tmp_path, start_runner, capsysbinary):
    start_runner("j7", -1, 1)
    start_runner("j8", 0, 0)
    assert jobs.main(["status", str(tmp_path)]) == 0
    captured = capsysbinary.readouterr()
    text = captured.out.decode()
    assert "j7" in text and "j8" in text and "running" in text
    assert captured.err.decode().strip() == "ringleader-exit-code=0"


@pytest.mark.parametrize("verb", ["attach", "stop", "status"])
def test_a_job_that_does_not_exist_is_named(tmp_path, verb, capsysbinary):
    assert jobs.main([verb, str(tmp_path), "cluster-nope"]) == registry.NO_SUCH_JOB
    err = capsysbinary.readouterr().err.decode()
    assert f"ringleader cluster {verb}: no job 'cluster-nope' in {tmp_path}" in err
    assert err.splitlines()[-1] == f"ringleader-exit-code={registry.NO_SUCH_JOB}"


def test_the_launchers_side_returns_the_leaders_code_not_ssh_s(tmp_path, monkeypatch, capfd):
    """on_leader with "ssh" replaced by running the leader's side here."""
    monkeypatch.setattr(SshOptions, "python", lambda self, address, args: [sys.executable, *args])
    code = remote.on_leader(HOSTS, SshOptions(), ["attach", str(tmp_path), "cluster-nope"])
    err = capfd.readouterr().err
    assert code == registry.NO_SUCH_JOB
    assert "no job 'cluster-nope'" in err and "ringleader-exit-code" not in err


def test_the_launchers_side_names_an_unreachable_leader(monkeypatch, capfd):
    monkeypatch.setattr(
        SshOptions, "python", lambda self, address, args: [sys.executable, "-c", "exit(255)"]
    )
    assert remote.on_leader(HOSTS, SshOptions(), ["status", "/x"]) == exitcodes.HOST_UNREACHABLE
    assert "cannot reach the leader node-a over ssh" in capfd.readouterr().err
