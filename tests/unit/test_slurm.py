"""`ringleader slurm`: the step read from Slurm's variables, the topology source, what ranks
see of Slurm, the options and each node's job (no Slurm, no containers)."""

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ringleader.config.job import ENABLED_KEYS, ConfigFiles, load_topology
from ringleader.config.slurm import (
    INTERFACE_VARIABLE,
    TOPOLOGY_VARIABLE,
    job_environment,
    read_step,
    slurm_topology,
)
from ringleader.core.errors import ConfigError
from ringleader.tools.cli import build_parser
from ringleader.tools.local.errors import UsageError
from ringleader.tools.slurm.cli import node_job
from ringleader.tools.slurm.node import NodeRun, node_environment
from ringleader.tools.slurm.requeue import REQUEUE_TIMEOUT, forbid_requeue
from ringleader.tools.slurm.timelimit import (
    EndTime,
    at_time_limit,
    end_time_at_stop,
    parse_end_time,
    put_first,
    time_limit_line,
)

# What srun gives each task of `srun -N3 --ntasks-per-node=1` (Slurm 22.05), on node 2.
STEP = {
    "SLURM_JOB_ID": "42",
    "SLURM_JOBID": "42",
    "SLURM_JOB_NAME": "train",
    "SLURM_JOB_NODELIST": "node[1-3]",
    "SLURM_STEP_ID": "0",
    "SLURM_STEPID": "0",
    "SLURM_STEP_NODELIST": "node[1-3]",
    "SLURM_STEP_NUM_NODES": "3",
    "SLURM_STEP_NUM_TASKS": "3",
    "SLURM_NTASKS": "3",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "1",
    "SLURMD_NODENAME": "node2",
    "SLURM_SUBMIT_DIR": "/shared/jobs",
    "PMI_FD": "7",
    "HOME": "/root",
}


def test_the_step_is_read_from_slurms_variables() -> None:
    step = read_step(STEP)
    assert (step.job_id, step.step_id, step.node) == ("42", "0", "node2")
    assert step.hosts == ("node1", "node2", "node3")
    assert step.mark == "slurm-42.0"
    assert step.gpus_on_node is None
    assert read_step({**STEP, "SLURM_GPUS_ON_NODE": "8"}).gpus_on_node == 8


def test_the_step_nodelist_wins_over_the_jobs() -> None:
    """`srun -N2` inside a 3-node allocation: the job is the step's two nodes."""
    step = read_step({**STEP, "SLURM_STEP_NODELIST": "node[2-3]", "SLURM_STEP_NUM_NODES": "2",
                      "SLURM_STEP_NUM_TASKS": "2"})  # fmt: skip
    assert step.hosts == ("node2", "node3")


@pytest.mark.parametrize(
    ("missing", "field"),
    [
        ("SLURM_JOB_ID", "SLURM_JOB_ID"),
        ("SLURM_STEP_ID", "SLURM_STEP_ID"),
        ("SLURM_STEP_NUM_NODES", "SLURM_STEP_ID"),
        ("SLURMD_NODENAME", "SLURMD_NODENAME"),
    ],
)
def test_outside_a_step_the_error_names_the_variable_and_the_fix(missing: str, field: str) -> None:
    environ = {key: value for key, value in STEP.items() if key != missing}
    with pytest.raises(ConfigError) as caught:
        read_step(environ)
    assert caught.value.field == field
    assert "srun --ntasks-per-node=1 ringleader slurm" in str(caught.value)


def test_more_than_one_task_per_node_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        read_step({**STEP, "SLURM_STEP_NUM_TASKS": "6"})
    assert caught.value.field == "SLURM_STEP_NUM_TASKS"
    assert "6 tasks on 3 node(s)" in str(caught.value)


def test_a_node_outside_the_list_and_a_bad_list_are_named() -> None:
    with pytest.raises(ConfigError, match="'node9' is not one of"):
        read_step({**STEP, "SLURMD_NODENAME": "node9"})
    with pytest.raises(ConfigError) as caught:
        read_step({**STEP, "SLURM_STEP_NODELIST": "node[3-1]"})
    assert caught.value.field == "SLURM_STEP_NODELIST"


def test_the_topology_sorts_the_hosts_and_the_first_leads() -> None:
    topology = slurm_topology({**STEP, "SLURM_STEP_NODELIST": "b[2-3],a1", "SLURMD_NODENAME": "b3"})
    assert topology.hosts == ("a1", "b2", "b3")
    assert (topology.leader, topology.current_host) == ("a1", "b3")


def test_the_topology_of_node2() -> None:
    topology = slurm_topology({**STEP, INTERFACE_VARIABLE: "ib0"})
    assert (topology.current_host, topology.leader) == ("node2", "node1")
    assert topology.workers == ("node2", "node3")
    assert topology.network_interface == "ib0"
    assert slurm_topology(STEP).network_interface == "eth0"


def test_load_topology_reads_slurm_only_when_ringleader_slurm_says_so(tmp_path: Path) -> None:
    files = ConfigFiles(config_dir=tmp_path)
    assert load_topology({**STEP, TOPOLOGY_VARIABLE: "slurm"}, files).hosts == (
        "node1",
        "node2",
        "node3",
    )
    with pytest.raises(ConfigError) as caught:  # SageMaker's sources, which are absent here
        load_topology(STEP, files)
    assert caught.value.field == "SM_HOSTS"


def test_ranks_see_the_job_of_slurm_not_the_srun_task() -> None:
    kept = job_environment(STEP)
    assert kept["SLURM_JOB_ID"] == "42"
    assert kept["SLURM_STEP_NODELIST"] == "node[1-3]"
    assert kept["SLURMD_NODENAME"] == "node2"
    assert kept["HOME"] == "/root"
    # Open MPI takes SLURM_JOBID for an allocation to srun its daemons into; the task's own
    # variables would tell every rank it is task 1 of 3.
    for gone in ("SLURM_JOBID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEPID", "PMI_FD"):
        assert gone not in kept


def parse(*argv: str) -> object:
    return build_parser().parse_args(["slurm", *argv])


def test_each_node_gets_its_own_output_directory_and_the_jobs_hyperparameters(
    tmp_path: Path,
) -> None:
    args = parse(
        *("--processes-per-host", "2", "--hang-timeout", "30"),
        *("--setting", "ringleader_sigterm_grace=5", "--env", "TOKEN=s3cr3t"),
        *("--", "python", "t.py"),
    )
    job = node_job(args, read_step(STEP), str(tmp_path))
    assert job.output_dir == tmp_path / "ringleader-output" / "42" / "node2"
    assert job.output_dir.is_dir()
    values = {key: json.loads(value) for key, value in job.hyperparameters.items()}
    assert values["ringleader_command"] == ["python", "t.py"]
    assert values["sagemaker_submit_directory"] == str(tmp_path)
    assert values["sagemaker_mpi_enabled"] is True
    assert values["sagemaker_mpi_num_of_processes_per_host"] == 2
    assert values["ringleader_hang_timeout"] == "30"
    assert values["ringleader_sigterm_grace"] == "5"
    assert "s3cr3t" not in json.dumps(job.hyperparameters)
    assert job.env == {"TOKEN": "s3cr3t"}


def test_processes_per_host_default_to_the_gpus_slurm_gave(tmp_path: Path) -> None:
    step = read_step({**STEP, "SLURM_GPUS_ON_NODE": "4"})
    args = parse("--distribution", "torch_distributed", "--output", str(tmp_path), "--", "x")
    values = node_job(args, step, "/work").hyperparameters
    assert json.loads(values["ringleader_processes_per_host"]) == 4
    assert json.loads(values[ENABLED_KEYS["torch_distributed"]]) is True
    # none given and no GPUs: the supervision's own default (the GPUs it finds, else 1)
    plain = node_job(parse("--output", str(tmp_path), "--", "x"), read_step(STEP), "/work")
    assert "sagemaker_mpi_num_of_processes_per_host" not in plain.hyperparameters


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--"], "PROGRAM: missing"),
        (["--processes-per-host", "0", "--", "x"], "expected at least 1"),
        (["--distribution", "parameter_server", "--processes-per-host", "2", "--", "x"],
         "runs fixed tasks"),
        (["--env", "1BAD=x", "--", "x"], "--env: expected KEY=VALUE"),
        (["--setting", "novalue", "--", "x"], "--setting: expected KEY=VALUE"),
    ],
)  # fmt: skip
def test_bad_options_are_usage_errors_that_make_nothing(
    tmp_path: Path, argv: list[str], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        node_job(parse("--output", str(tmp_path / "out"), *argv), read_step(STEP), "/work")
    assert not (tmp_path / "out").exists()


def test_an_output_directory_that_cannot_be_made_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError) as caught:
        node_job(parse("--output", str(tmp_path / "file"), "--", "x"), read_step(STEP), "/w")
    assert caught.value.field == "--output"


def test_the_supervision_reads_slurm_and_its_paths_are_the_same_on_every_node(
    tmp_path: Path,
) -> None:
    step = read_step(STEP)
    args = parse("--output", str(tmp_path), "--network-interface", "ib0", "--", "x")
    job = node_job(args, step, "/work")
    environment = node_environment(job, dict(STEP))
    assert environment[TOPOLOGY_VARIABLE] == "slurm"
    assert environment[INTERFACE_VARIABLE] == "ib0"
    assert environment["SAGEMAKER_BASE_DIR"].endswith("/slurm-42.0/ml")
    assert environment["RINGLEADER_RUN_DIR"].endswith("/slurm-42.0/run")
    assert environment["RINGLEADER_CLUSTER_JOB"] == "slurm-42.0"
    assert "SLURM_PROCID" not in environment
    other = node_job(args, read_step({**STEP, "SLURMD_NODENAME": "node3"}), "/work")
    assert other.ml_root == job.ml_root  # mpirun hands the leader's paths to every rank
    assert other.output_dir != job.output_dir


class NoLimit:
    problem = None

    def __init__(self, job_id: str) -> None:
        assert job_id == "42"

    def value(self) -> None:
        return None


def test_a_node_runs_the_supervision_and_exits_with_its_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real node run with a stand-in supervision: the layout, the symlink, the code."""
    monkeypatch.setattr("ringleader.tools.slurm.node.default_root", lambda: str(tmp_path / "r"))
    step = read_step(STEP)
    job = node_job(parse("--output", str(tmp_path / "out"), "--", "x"), step, str(tmp_path))
    started: list[list[str]] = []
    real_popen = subprocess.Popen

    def fake_popen(argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        started.append(argv)
        env = kwargs["env"]
        assert isinstance(env, dict)
        script = "import os, sys; sys.exit(3 if os.path.isdir(os.environ['SAGEMAKER_BASE_DIR'] + '/input/config') else 9)"  # noqa: E501
        return real_popen([sys.executable, "-c", script], env=env, cwd=kwargs["cwd"])

    monkeypatch.setattr("ringleader.tools.slurm.node.subprocess.Popen", fake_popen)
    monkeypatch.setattr("ringleader.tools.slurm.node.become_subreaper", lambda: None)
    monkeypatch.setattr("ringleader.tools.slurm.node.EndTime", NoLimit)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT,
                                                                 signal.SIGQUIT)}  # fmt: skip
    try:
        out = io.StringIO()
        assert NodeRun(job, out).run() == 3
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert started == [[sys.executable, "-m", "ringleader.tools.cluster.host"]]
    assert job.ml_root.resolve() == job.output_dir.resolve()
    assert json.loads((job.output_dir / "input/config/hyperparameters.json").read_text())
    assert not (job.output_dir / "input/config/resourceconfig.json").exists()
    assert "job 42 step 0 on node2 of node1,node2,node3" in out.getvalue()
    assert os.access(job.run_dir / "python", os.X_OK)


def test_the_end_time_is_squeues_and_a_job_without_a_limit_has_none() -> None:
    asked: list[list[str]] = []

    def squeue(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        asked.append(argv)
        return subprocess.CompletedProcess(argv, 0, "2026-11-26T03:10:00\n", "")

    end = EndTime("42", squeue).value()
    assert asked == [["squeue", "--noheader", "--jobs", "42", "--format", "%e"]]
    assert end == time.mktime((2026, 11, 26, 3, 10, 0, 0, 0, -1))
    for shown in ("Unknown", "N/A", "NONE", ""):
        assert parse_end_time(shown) is None


def test_no_squeue_or_a_failing_one_means_no_limit_known() -> None:
    def missing(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(argv[0])

    def failing(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", "slurm_load_jobs error")

    def slow(argv: list[str], **options: object) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(argv, float(options["timeout"]))  # type: ignore[arg-type]

    for run, problem in (
        (missing, "squeue did not run: squeue"),
        (failing, "squeue exited with 1: slurm_load_jobs error"),
        (slow, "squeue gave no answer within 10 s"),
    ):
        asked = EndTime("42", run)
        assert asked.value() is None
        assert asked.problem == problem


def test_an_end_time_not_known_at_the_start_is_asked_again_at_the_stop() -> None:
    """squeue failed at the job's start (a busy controller; seen in CI, where every node then
    named a plain SIGTERM at the time limit): the stop asks again. Known at the start: asked
    once only."""

    def failing(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", "Socket timed out on send/recv")

    asked_again: list[str] = []

    def answering(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        asked_again.append(argv[3])
        return subprocess.CompletedProcess(argv, 0, "2026-11-26T03:10:00\n", "")

    end = time.mktime((2026, 11, 26, 3, 10, 0, 0, 0, -1))
    assert end_time_at_stop(EndTime("42", failing), lambda: EndTime("42", answering)).value() == end
    assert asked_again == ["42"]
    assert end_time_at_stop(EndTime("42", answering), lambda: EndTime("42", failing)).value() == end
    assert asked_again == ["42", "42"]  # the start's own query; none at the stop


def test_a_sigterm_at_the_end_time_is_the_time_limit_and_one_before_is_not() -> None:
    end = 1_000_000.0
    assert at_time_limit(end, end + 0.5)
    assert at_time_limit(end, end - 1.0)  # the clocks' slack
    assert not at_time_limit(end, end - 60.0)  # scancel a minute before the limit
    assert not at_time_limit(None, end)


def test_the_time_limit_is_put_first_in_the_failure_file(tmp_path: Path) -> None:
    failure = tmp_path / "failure"
    failure.write_text("Job stopped by SIGTERM received on host node1; ...\n" + "x" * 2000)
    line = time_limit_line(time.mktime((2026, 11, 26, 3, 10, 0, 0, 0, -1)))
    put_first(failure, line)
    text = failure.read_text()
    assert text.startswith(line + "\nJob stopped by SIGTERM")
    assert "2026-11-26T03:10:00" in line
    assert len(text.encode()) == 1024
    put_first(tmp_path / "missing-dir" / "failure", line)  # best-effort: no error


def test_more_ranks_than_the_allocation_gave_the_node_is_a_configuration_error(
    tmp_path: Path,
) -> None:
    out = str(tmp_path / "out")
    cpus = read_step({**STEP, "SLURM_CPUS_ON_NODE": "2"})
    with pytest.raises(ConfigError) as caught:
        node_job(parse("--output", out, "--processes-per-host", "3", "--", "x"), cpus, "/w")
    assert caught.value.field == "--processes-per-host"
    assert "3 ranks on node2, but the allocation gave it 2 CPUs (SLURM_CPUS_ON_NODE)" in str(
        caught.value
    )
    gpus = read_step({**STEP, "SLURM_CPUS_ON_NODE": "96", "SLURM_GPUS_ON_NODE": "8"})
    with pytest.raises(ConfigError, match="gave it 8 GPUs"):
        node_job(parse("--output", out, "--processes-per-host", "9", "--", "x"), gpus, "/w")
    assert not (tmp_path / "out").exists()
    job = node_job(parse("--output", out, "--processes-per-host", "2", "--", "x"), cpus, "/w")
    assert json.loads(job.hyperparameters["sagemaker_mpi_num_of_processes_per_host"]) == 2


class LimitPassed:
    """The job's end time, a minute ago: the SIGTERM that comes now is the time limit."""

    problem = None

    def __init__(self, job_id: str) -> None:
        self.end = time.time() - 60

    def value(self) -> float:
        return self.end


class Unanswered:
    """squeue failed at the start and again at the stop."""

    problem = "squeue exited with 1: Socket timed out on send/recv operation"

    def __init__(self, job_id: str) -> None:
        pass

    def value(self) -> None:
        return None


@pytest.mark.parametrize("asked", [LimitPassed, Unanswered], ids=["limit", "squeue-failed"])
def test_a_sigterm_at_the_time_limit_is_said_at_once_and_put_first_in_the_failure_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, asked: type
) -> None:
    """Where squeue gave no end time, the output says why the time limit is not named."""
    monkeypatch.setattr("ringleader.tools.slurm.node.default_root", lambda: str(tmp_path / "r"))
    monkeypatch.setattr("ringleader.tools.slurm.node.become_subreaper", lambda: None)
    monkeypatch.setattr("ringleader.tools.slurm.node.EndTime", asked)
    job = node_job(parse("--output", str(tmp_path / "out"), "--", "x"), read_step(STEP), "/")
    ready = tmp_path / "ready"
    # The supervision's stand-in: on SIGTERM it writes its own verdict and exits 143.
    script = (
        "import os, signal, sys, time\n"
        "def stop(*_):\n"
        "    path = os.environ['SAGEMAKER_BASE_DIR'] + '/output/failure'\n"
        "    open(path, 'w').write('Job stopped by SIGTERM received on host node2.\\n')\n"
        "    sys.exit(143)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        f"open({str(ready)!r}, 'w').close()\n"
        "time.sleep(60)\n"
    )
    real_popen = subprocess.Popen

    def fake_popen(argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        return real_popen([sys.executable, "-c", script], env=kwargs["env"], cwd=kwargs["cwd"])

    monkeypatch.setattr("ringleader.tools.slurm.node.subprocess.Popen", fake_popen)

    def scancel_at_the_limit() -> None:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT,
                                                                 signal.SIGQUIT)}  # fmt: skip
    out = io.StringIO()
    try:
        threading.Thread(target=scancel_at_the_limit, daemon=True).start()
        assert NodeRun(job, out).run() == 143
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    failure = (job.output_dir / "output" / "failure").read_text().splitlines()
    if asked is Unanswered:
        assert failure == ["Job stopped by SIGTERM received on host node2."]
        assert (
            "[ringleader slurm] whether this SIGTERM is Slurm's time limit is not known: "
            f"{Unanswered.problem}\n"
        ) in out.getvalue()
        return
    assert failure[0].startswith("Slurm's time limit was reached (the job's end time ")
    assert failure[1] == "Job stopped by SIGTERM received on host node2."
    assert "[ringleader slurm] Slurm's time limit was reached" in out.getvalue()


# ----------------------------------------------------------------------------- do not requeue
def test_a_do_not_retry_end_marks_the_job_not_requeueable() -> None:
    calls: list[list[str]] = []

    def scontrol(argv: list[str], **kwargs: object) -> "subprocess.CompletedProcess[str]":
        calls.append(argv)
        assert kwargs["timeout"] == REQUEUE_TIMEOUT
        return subprocess.CompletedProcess(argv, 0, "", "")

    line = forbid_requeue("42", scontrol)
    assert calls == [["scontrol", "update", "JobId=42", "Requeue=0"]]
    assert line == (
        "restarting cannot help: job 42 marked not requeueable (scontrol update JobId=42 Requeue=0)"
    )


@pytest.mark.parametrize(
    ("outcome", "problem"),
    [
        (
            subprocess.CompletedProcess([], 1, "", "slurm_update error: Invalid job id\n"),
            "slurm_update error: Invalid job id",
        ),
        (subprocess.TimeoutExpired("scontrol", REQUEUE_TIMEOUT), "timed out after 10"),
        (FileNotFoundError(2, "No such file or directory"), "No such file or directory"),
    ],
)
def test_a_failed_scontrol_is_said_and_changes_nothing_else(outcome: object, problem: str) -> None:
    def scontrol(argv: list[str], **kwargs: object) -> "subprocess.CompletedProcess[str]":
        if isinstance(outcome, BaseException):
            raise outcome
        assert isinstance(outcome, subprocess.CompletedProcess)
        return outcome

    line = forbid_requeue("42", scontrol)
    assert line.startswith("could not mark job 42 not requeueable (scontrol update JobId=42")
    assert problem in line
