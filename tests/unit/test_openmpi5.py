"""Open MPI 5 (PRRTE) and Open MPI 4 (ORTE): the version found, the options built for each, and
what mpirun 5 prints, as captured from Debian trixie's Open MPI 5.0.7 and bookworm's 4.1.4."""

import subprocess
from dataclasses import replace

import pytest

from ringleader.config.job import parse_job_config
from ringleader.config.topology import parse_topology
from ringleader.core.errors import ConfigError
from ringleader.launch.mpirun import (
    MPIRUN_OUTPUT,
    MpiPlan,
    build_mpirun_argv,
    default_btl,
    ignored_options,
    parse_mpi_aborts,
    stops_all_on_rank_failure,
)
from ringleader.launch.mpirun_strategy import MpirunStrategy, SshSetup
from ringleader.launch.openmpi import (
    ASSUMED,
    OpenMpiVersion,
    detect_open_mpi,
    parse_mpirun_version,
)

HOSTS = ("algo-1", "algo-2", "algo-3")
RANK_COMMAND = ("/opt/ringleader/venv/bin/python3", "-m", "ringleader.rank", "--", "python", "t.py")
V5 = OpenMpiVersion(5, 0, 7)
V4 = OpenMpiVersion(4, 1, 4)
SSH = ("-o", "ControlPath=/run/rl-ssh/%C")

# `mpirun --version`, verbatim
VERSION_5 = "mpirun (Open MPI) 5.0.7\n\nReport bugs to https://www.open-mpi.org/community/help/\n"
VERSION_4 = "mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n"

# Open MPI 5.0.7, rank 4 of 3 hosts x 2 calling MPI_Abort(comm, 7): mpirun's stderr, verbatim
ABORT_5 = """\
--------------------------------------------------------------------------
MPI_ABORT was invoked on rank 4 in communicator MPI_COMM_WORLD
  Proc: [[59246,1],4]
  Errorcode: 7

NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.
You may or may not see output from other processes, depending on
exactly when Open MPI kills them.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
prterun has exited due to process rank 4 with PID 404 on node h3 calling
"abort". This may have caused other processes in the application to be
terminated by signals sent by prterun (as reported here).
--------------------------------------------------------------------------
"""


def plan(version=V5, custom=(), interface="eth0", rdma=False, ssh=SSH):
    return MpiPlan(
        hosts=HOSTS,
        processes_per_host=2,
        interface=interface,
        custom_options=tuple(custom),
        rank_command=RANK_COMMAND,
        rdma_devices=rdma,
        ssh_options=ssh,
        open_mpi=version,
    )


def params(argv, flag):
    """(name, value) of every `flag NAME VALUE` in argv."""
    return [(argv[i + 1], argv[i + 2]) for i, token in enumerate(argv) if token == flag]


@pytest.mark.parametrize(
    ("text", "version"),
    [
        (VERSION_5, OpenMpiVersion(5, 0, 7)),
        (VERSION_4, OpenMpiVersion(4, 1, 4)),
        ("mpirun (Open MPI) 4.1.5rc2\n", OpenMpiVersion(4, 1, 5)),  # HPC-X style
        ("prterun (Open MPI) 6.0\n", OpenMpiVersion(6, 0, 0)),
        ("HYDRA build details:\n    Version:                                 4.1.2\n", None),
        ("", None),
    ],
)
def test_version_parsed_from_mpirun_version(text, version):
    assert parse_mpirun_version(text) == version


def test_prrte_from_open_mpi_5_on():
    assert V5.prrte and OpenMpiVersion(6, 0).prrte
    assert not V4.prrte and not ASSUMED.prrte
    assert str(V5) == "5.0.7"


def test_detect_runs_mpirun_version_once_with_the_bound():
    calls, logged = [], []

    def run(argv, timeout):
        calls.append((tuple(argv), timeout))
        return VERSION_5

    assert detect_open_mpi(logged.append, run=run, timeout=3.0) == V5
    assert calls == [(("mpirun", "--version"), 3.0)]
    assert logged == []


@pytest.mark.parametrize(
    ("outcome", "warning"),
    [
        (OSError("no answer within 10 s"), "no answer within 10 s"),
        ("HYDRA build details:\n", "is not Open MPI's ('HYDRA build details:')"),
    ],
)
def test_detect_warns_and_assumes_open_mpi_4_when_mpirun_does_not_tell(outcome, warning):
    def run(argv, timeout):
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    logged = []
    assert detect_open_mpi(logged.append, run=run) == ASSUMED
    assert len(logged) == 1 and logged[0].startswith("warning: ") and warning in logged[0]


def test_an_image_without_mpirun_is_a_configuration_error_naming_the_fix():
    def run(argv, timeout):
        raise FileNotFoundError(2, "No such file or directory")

    with pytest.raises(ConfigError) as raised:
        detect_open_mpi([].append, run=run)
    assert raised.value.field == "image"
    assert "this image has none on PATH: install Open MPI (Debian/Ubuntu: openmpi-bin)" in str(
        raised.value
    )


def test_detect_bounds_a_hanging_mpirun(tmp_path):
    hanging = tmp_path / "mpirun"
    hanging.write_text("#!/bin/sh\nexec sleep 30\n")
    hanging.chmod(0o755)
    logged = []
    assert detect_open_mpi(logged.append, mpirun=str(hanging), timeout=0.3) == ASSUMED
    assert "no answer within 0.3 s" in logged[0]


def test_detect_reads_a_real_program_output(tmp_path):
    fake = tmp_path / "mpirun"
    fake.write_text(f"#!/bin/sh\nprintf '{VERSION_5.splitlines()[0]}\\n'\n")
    fake.chmod(0o755)
    assert detect_open_mpi(print, mpirun=str(fake)) == V5
    assert subprocess.run([str(fake), "--version"], capture_output=True, check=True).stdout


def test_open_mpi_5_options():
    argv = build_mpirun_argv(plan())
    assert argv[:6] == [
        "mpirun",
        "--allow-run-as-root",
        "-np",
        "6",
        "-H",
        ",".join(f"{host}:2" for host in HOSTS),
    ]
    assert argv[argv.index("--bind-to") + 1] == "none"
    assert argv[argv.index("--map-by") + 1] == "slot"
    assert params(argv, "--mca") == [
        ("btl", "^ofi"),  # Open MPI 5 has no openib BTL to leave out
        ("pml", "ob1"),
        ("smsc", "^cma"),
        ("btl_tcp_if_include", "eth0"),
    ]
    assert params(argv, "--prtemca") == [
        ("plm_ssh_args", "-o ControlPath=/run/rl-ssh/%C"),
        ("oob_tcp_if_include", "eth0"),
    ]
    # nothing of ORTE's: no orte_* parameter, no vader, no rsh
    assert not [token for token in argv if token.startswith(("orte_", "btl_vader", "plm_rsh"))]
    assert "-bind-to" not in argv and "-map-by" not in argv
    assert argv[-len(RANK_COMMAND) :] == list(RANK_COMMAND)


def test_open_mpi_5_pins_its_out_of_band_channel_by_network_not_by_name():
    """PRRTE 5.0.7 rejects an interface named in its include list once the kernel numbered it
    above 32767 (eth0 was interface 34045 on a long-running Docker host): the network matches.
    The BTL keeps the name."""
    argv = build_mpirun_argv(replace(plan(V5), interface_networks=("172.18.0.0/16",)))
    assert ("oob_tcp_if_include", "172.18.0.0/16") in params(argv, "--prtemca")
    assert ("btl_tcp_if_include", "eth0") in params(argv, "--mca")
    v4 = build_mpirun_argv(replace(plan(V4), interface_networks=("172.18.0.0/16",)))
    assert ("oob_tcp_if_include", "eth0") in params(v4, "--mca")  # ORTE takes the name


def test_open_mpi_4_options():
    argv = build_mpirun_argv(plan(V4))
    assert params(argv, "--mca") == [
        ("btl", "^openib,ofi"),
        ("pml", "ob1"),
        ("orte_abort_on_non_zero_status", "1"),
        ("btl_vader_single_copy_mechanism", "none"),
        ("plm_rsh_args", "-o ControlPath=/run/rl-ssh/%C"),
        ("btl_tcp_if_include", "eth0"),
        ("oob_tcp_if_include", "eth0"),
    ]
    assert "--prtemca" not in argv and "smsc" not in argv
    assert argv[argv.index("-bind-to") + 1] == "none"


def test_one_host_pins_no_interface_under_either():
    for version in (V4, V5):
        argv = build_mpirun_argv(plan(version, interface=None, ssh=()))
        names = [name for name, _ in params(argv, "--mca") + params(argv, "--prtemca")]
        assert not [name for name in names if "if_include" in name or "ssh_args" in name]


def test_btl_with_rdma_devices():
    assert default_btl(True, V5) is None  # nothing to leave out: ofi may carry data
    assert "btl" not in dict(params(build_mpirun_argv(plan(rdma=True)), "--mca"))
    assert default_btl(True, V4) == "^openib"
    assert default_btl(False, V5) == "^ofi"


@pytest.mark.parametrize(
    ("custom", "ours_gone"),
    [
        # the ssh arguments under either name, through --mca or --prtemca
        (("--mca", "plm_rsh_args", "-p 2222"), "plm_ssh_args"),
        (("--mca", "plm_ssh_args", "-p 2222"), "plm_ssh_args"),
        (("--prtemca", "plm_ssh_args", "-p 2222"), "plm_ssh_args"),
        # the out-of-band interface
        (("--mca", "oob_tcp_if_include", "eth1"), "oob_tcp_if_include"),
        (("--prtemca", "prte_if_include", "eth1"), "oob_tcp_if_include"),
        # single copy, under Open MPI 5's name or the 4.1 one
        (("--mca", "smsc", "cma"), "smsc"),
        (("--mca", "btl_sm_single_copy_mechanism", "cma"), "smsc"),
    ],
)
def test_the_users_setting_replaces_ours_under_any_of_its_names(custom, ours_gone):
    argv = build_mpirun_argv(plan(custom=custom))
    ours = params(argv, "--mca") + params(argv, "--prtemca")
    assert [value for name, value in ours if name == ours_gone] == (
        [custom[-1]] if custom[1] == ours_gone else []
    )
    assert argv[-len(RANK_COMMAND) - len(custom) : -len(RANK_COMMAND)] == list(custom)


def test_the_users_ssh_args_replace_ours_under_open_mpi_4_too():
    argv = build_mpirun_argv(plan(V4, custom=("--prtemca", "plm_ssh_args", "-p 2222")))
    assert "plm_rsh_args" not in dict(params(argv, "--mca"))


@pytest.mark.parametrize(
    ("custom", "stops"),
    [
        ((), True),
        (("--runtime-options", "error-nonzero-status=false"), False),
        (("--runtime-options", "ERROR-NONZERO-STATUS=0"), False),
        (("--runtime-options", "show-progress,error-nonz=f"), False),  # cut short, in a list
        (("--runtime-options", "error-nonzero-status"), True),  # no value: true
        (("--runtime-options", "abort-nonzero-status=false"), False),
        (("--runtime-options", "error=false"), True),  # too short to name it
        (("--mca", "state_base_error_non_zero_exit", "0"), False),
        (("--prtemca", "state_base_error_non_zero_exit", "0"), False),
        (("--prtemca", "state_base_error_non_zero_exit", "1"), True),
        # Open MPI 5 ignores ORTE's parameter (measured: the job still ended): ours still stops
        (("--mca", "orte_abort_on_non_zero_status", "0"), True),
    ],
)
def test_a_failing_rank_stops_an_open_mpi_5_job_unless_prrte_was_told_otherwise(custom, stops):
    assert stops_all_on_rank_failure(custom, V5) is stops


def test_open_mpi_4_reads_only_its_own_abort_parameter():
    assert not stops_all_on_rank_failure(("--mca", "orte_abort_on_non_zero_status", "0"), V4)
    assert stops_all_on_rank_failure(("--runtime-options", "error-nonzero-status=false"), V4)


def test_orte_options_under_open_mpi_5_are_named_as_ignored():
    custom = ("--mca", "orte_abort_on_non_zero_status", "0", "--mca", "pml", "ob1")
    (warning,) = ignored_options(custom, V5)
    assert "Open MPI 5.0.7 has no ORTE: --mca orte_abort_on_non_zero_status has no effect" in (
        warning
    )
    assert "--runtime-options error-nonzero-status=false" in warning
    assert ignored_options(custom, V4) == []


def test_mpi_abort_of_open_mpi_5_is_read():
    lines = ABORT_5.splitlines()
    assert parse_mpi_aborts(lines) == {4: 7}
    kept = [line for line in lines if MPIRUN_OUTPUT.keeps(line)]
    assert kept == [
        "MPI_ABORT was invoked on rank 4 in communicator MPI_COMM_WORLD",
        "  Errorcode: 7",
    ]
    assert MPIRUN_OUTPUT.rank_codes(kept) == {4: 7}


def test_both_wordings_in_one_output():
    lines = [
        "MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD",
        "with errorcode 3.",
        "MPI_ABORT was invoked on rank 2 in communicator MPI_COMM_WORLD",
        "  Proc: [[1,1],2]",
        "  Errorcode: -1",
    ]
    assert parse_mpi_aborts(lines) == {1: 3, 2: -1}
    # an "Errorcode:" with no report before it names nobody
    assert parse_mpi_aborts(["  Errorcode: 5"]) == {}


def strategy(version, custom="", in_container=True):
    """A one-host mpi job's strategy whose mpirun says it is Open MPI `version`."""
    topology = parse_topology({}, {"hosts": ["algo-1"], "current_host": "algo-1"})
    config = parse_job_config(
        topology,
        {
            "sagemaker_program": "train.py",
            "sagemaker_mpi_enabled": True,
            "sagemaker_mpi_custom_mpi_options": custom,
        },
        {},
    )
    logged: list[str] = []
    asked: list[int] = []

    def detect(log):
        asked.append(1)
        return version

    found = MpirunStrategy(
        config,
        lambda: ["python", "train.py"],
        2,
        logged.append,
        SshSetup(own_sshd=in_container, masters=None),
        detect_mpi=detect,
    )
    return found, logged, asked


def test_the_strategy_builds_the_options_of_the_open_mpi_it_finds():
    five, logged, asked = strategy(V5, "--mca orte_abort_on_non_zero_status 0")
    launch = five.prepare()
    assert asked == [1]
    assert "--bind-to" in launch.argv and "orte_abort_on_non_zero_status" in launch.argv  # theirs
    assert ("smsc", "^cma") in params(list(launch.argv), "--mca")
    assert launch.policy.rank_failure_stops_all  # Open MPI 5 ignores the orte_ parameter
    assert "mpirun: Open MPI 5.0.7 (PRRTE)" in logged
    assert any("has no effect" in line for line in logged)

    four, logged, _ = strategy(V4, "--mca orte_abort_on_non_zero_status 0")
    launch = four.prepare()
    assert "-bind-to" in launch.argv and "--prtemca" not in launch.argv
    assert not launch.policy.rank_failure_stops_all
    assert "mpirun: Open MPI 4.1.4 (ORTE)" in logged

    five, _, _ = strategy(V5, "--runtime-options error-nonzero-status=false")
    assert not five.prepare().policy.rank_failure_stops_all


@pytest.mark.parametrize("version", [V5, OpenMpiVersion(4, 1, 4)])
def test_single_copy_is_off_in_containers_only(version):
    in_container, _, _ = strategy(version)
    on_a_machine, _, _ = strategy(version, in_container=False)
    single_copy = {"smsc", "btl_vader_single_copy_mechanism"}
    assert single_copy & {name for name, _ in params(list(in_container.prepare().argv), "--mca")}
    assert not single_copy & {
        name for name, _ in params(list(on_a_machine.prepare().argv), "--mca")
    }
