"""The mpirun argv: our defaults, overridden (not duplicated) by custom_mpi_options."""

import pytest

from ringleader.config.mpi_options import (
    forwarded_variables,
    sagemaker_nccl_options,
    take_nccl_debug,
)
from ringleader.core.errors import ConfigError
from ringleader.launch.mpirun import (
    MpiPlan,
    build_mpirun_argv,
    has_rdma_devices,
    is_abort_line,
    parse_mpi_aborts,
    stops_all_on_rank_failure,
)

HOSTS = ("algo-1", "algo-2", "algo-3")
RANK_COMMAND = ("/usr/bin/python3", "-m", "ringleader.rank", "--", "python3", "train.py")


def plan(custom=(), interface="eth0", hosts=HOSTS, per_host=2):
    return MpiPlan(
        hosts=hosts,
        processes_per_host=per_host,
        interface=interface,
        custom_options=tuple(custom),
        rank_command=RANK_COMMAND,
    )


def value_of(argv, option):
    """The token following the only occurrence of `option`."""
    assert argv.count(option) == 1, argv
    return argv[argv.index(option) + 1]


def mca_values(argv):
    return [
        (argv[i + 1], argv[i + 2]) for i, token in enumerate(argv) if token in ("--mca", "-mca")
    ]


def test_three_hosts_two_processes():
    argv = build_mpirun_argv(plan())
    assert argv[0] == "mpirun"
    assert value_of(argv, "-np") == "6"
    assert value_of(argv, "-H") == "algo-1:2,algo-2:2,algo-3:2"
    assert value_of(argv, "-bind-to") == "none"
    assert value_of(argv, "-map-by") == "slot"
    assert "--allow-run-as-root" in argv
    mca = mca_values(argv)
    assert ("btl_tcp_if_include", "eth0") in mca
    assert ("oob_tcp_if_include", "eth0") in mca
    assert ("orte_abort_on_non_zero_status", "1") in mca
    assert len({name for name, _ in mca}) == len(mca)  # no MCA parameter twice
    assert tuple(argv[-len(RANK_COMMAND) :]) == RANK_COMMAND
    assert plan().world_size == 6


def test_no_interface_pinning_without_interface():
    argv = build_mpirun_argv(plan(interface=None, hosts=("solo",), per_host=1))
    names = [name for name, _ in mca_values(argv)]
    assert "btl_tcp_if_include" not in names
    assert "oob_tcp_if_include" not in names
    assert value_of(argv, "-H") == "solo:1"
    assert value_of(argv, "-np") == "1"


def test_bind_to_override_replaces_default():
    argv = build_mpirun_argv(plan(["-bind-to", "core"]))
    assert value_of(argv, "-bind-to") == "core"
    assert "--bind-to" not in argv


def test_long_spelling_overrides_short_default():
    argv = build_mpirun_argv(plan(["--bind-to", "socket", "--map-by", "node"]))
    assert "-bind-to" not in argv
    assert "-map-by" not in argv
    assert value_of(argv, "--bind-to") == "socket"
    assert value_of(argv, "--map-by") == "node"


def test_mca_override_replaces_only_that_parameter():
    argv = build_mpirun_argv(plan(["--mca", "btl_tcp_if_include", "eth1"]))
    mca = mca_values(argv)
    assert [value for name, value in mca if name == "btl_tcp_if_include"] == ["eth1"]
    assert [value for name, value in mca if name == "oob_tcp_if_include"] == ["eth0"]


def test_single_dash_mca_overrides_too():
    argv = build_mpirun_argv(plan(["-mca", "pml", "ucx"]))
    assert [value for name, value in mca_values(argv) if name == "pml"] == ["ucx"]


def test_np_override():
    argv = build_mpirun_argv(plan(["-np", "4"]))
    assert value_of(argv, "-np") == "4"
    assert "6" not in argv


@pytest.mark.parametrize("spelling", ["-n", "--np", "-c"])
def test_np_aliases_override(spelling):
    argv = build_mpirun_argv(plan([spelling, "3"]))
    assert "-np" not in argv
    assert value_of(argv, spelling) == "3"


def test_host_override():
    argv = build_mpirun_argv(plan(["--host", "algo-1:1,algo-2:1"]))
    assert "-H" not in argv
    assert value_of(argv, "--host") == "algo-1:1,algo-2:1"


def test_x_variable_and_unknown_options_are_appended_in_order_before_the_rank_command():
    custom = ["-x", "FOO=1", "--oversubscribe", "--report-bindings", "-x", "NCCL_DEBUG"]
    argv = build_mpirun_argv(plan(custom))
    tail = argv[-(len(custom) + len(RANK_COMMAND)) :]
    assert tail == [*custom, *RANK_COMMAND]
    # defaults stayed
    assert value_of(argv, "-np") == "6"
    assert value_of(argv, "-bind-to") == "none"


def test_custom_options_come_after_defaults():
    argv = build_mpirun_argv(plan(["--tag-output"]))
    assert argv.index("--tag-output") > argv.index("-H")
    assert argv.index("--tag-output") == len(argv) - len(RANK_COMMAND) - 1


def test_forwarded_variables():
    custom = ["-x", "FOO=1", "--mca", "pml", "ob1", "-x", "BAR", "--oversubscribe"]
    assert forwarded_variables(custom) == ["FOO", "BAR"]
    assert forwarded_variables([]) == []


@pytest.mark.parametrize(
    "custom",
    [["-np"], ["-x"], ["--mca", "btl"], ["-x", "-np", "4"], ["-bind-to", "--oversubscribe"]],
)
def test_missing_option_values(custom):
    with pytest.raises(ConfigError) as caught:
        build_mpirun_argv(plan(custom))
    assert caught.value.field == "sagemaker_mpi_custom_mpi_options"
    assert custom[0] in caught.value.problem


def test_forwarded_variables_reports_missing_values_too():
    with pytest.raises(ConfigError) as caught:
        forwarded_variables(["-x"])
    assert caught.value.field == "sagemaker_mpi_custom_mpi_options"


def test_mpi_aborts_parsed_from_mpirun_messages():
    lines = [
        "--------------------------------------------------------------------------",
        "MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD",
        "with errorcode 3.",
        "",
        "NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.",
        "MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD",
        "with errorcode 143.",
        "MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD",
        "with errorcode 9.",  # a later report of the same rank does not replace the first
    ]
    assert parse_mpi_aborts(lines) == {3: 3, 1: 143}
    assert [line for line in lines if is_abort_line(line)] == [lines[1], lines[2], *lines[5:]]


def test_ofi_btl_only_with_rdma_devices():
    # the ofi BTL over TCP costs every rank a second in MPI_Finalize; with EFA it may carry data
    assert ("btl", "^openib,ofi") in mca_values(build_mpirun_argv(plan()))
    with_fabric = MpiPlan(HOSTS, 2, "eth0", (), RANK_COMMAND, rdma_devices=True)
    assert ("btl", "^openib") in mca_values(build_mpirun_argv(with_fabric))
    custom = build_mpirun_argv(plan(custom=["--mca", "btl", "self,tcp"]))
    assert ("btl", "self,tcp") in mca_values(custom) and len(mca_values(custom)) == len(
        {name for name, _ in mca_values(custom)}
    )


def test_rdma_devices_seen_in_sysfs(tmp_path):
    assert not has_rdma_devices(tmp_path / "missing")
    assert not has_rdma_devices(tmp_path)
    (tmp_path / "rdmap0s6").mkdir()
    assert has_rdma_devices(tmp_path)


@pytest.mark.parametrize(
    ("custom", "stops"),
    [
        ((), True),
        (("--mca", "orte_abort_on_non_zero_status", "0"), False),
        (("-mca", "orte_abort_on_non_zero_status", "false"), False),
        (("--mca", "orte_abort_on_non_zero_status", "1", "-x", "A"), True),
        (("--mca", "btl_tcp_if_include", "eth0"), True),
    ],
)
def test_a_failing_rank_stops_the_job_unless_the_user_turned_the_abort_off(custom, stops):
    assert stops_all_on_rank_failure(custom) is stops


def test_mpirun_ssh_reuses_the_check_masters_unless_the_user_sets_ssh_arguments():
    assert "plm_rsh_args" not in dict(mca_values(build_mpirun_argv(plan())))
    options = ("-o", "ControlPath=/tmp/rl-ssh-x/%C")
    reusing = MpiPlan(HOSTS, 2, "eth0", (), RANK_COMMAND, ssh_options=options)
    assert ("plm_rsh_args", "-o ControlPath=/tmp/rl-ssh-x/%C") in mca_values(
        build_mpirun_argv(reusing)
    )
    own = MpiPlan(
        HOSTS, 2, "eth0", ("--mca", "plm_rsh_args", "-p 2222"), RANK_COMMAND, ssh_options=options
    )
    assert [
        value for name, value in mca_values(build_mpirun_argv(own)) if name == "plm_rsh_args"
    ] == ["-p 2222"]


def test_the_images_ssh_config_stays_in_front_of_the_users_own_ssh_arguments():
    config = ("-F", "/etc/ringleader/ssh/ssh_config")
    options = ("-o", "ControlPath=/tmp/rl-ssh-x/%C")
    ours = MpiPlan(HOSTS, 2, "eth0", (), RANK_COMMAND, ssh_options=options, ssh_config=config)
    assert (
        "plm_rsh_args",
        "-F /etc/ringleader/ssh/ssh_config -o ControlPath=/tmp/rl-ssh-x/%C",
    ) in mca_values(build_mpirun_argv(ours))
    own = MpiPlan(
        HOSTS,
        2,
        "eth0",
        ("--mca", "plm_rsh_args", "-p 2222"),
        RANK_COMMAND,
        ssh_options=options,
        ssh_config=config,
    )
    assert [
        value for name, value in mca_values(build_mpirun_argv(own)) if name == "plm_rsh_args"
    ] == ["-F /etc/ringleader/ssh/ssh_config -p 2222"]


# SageMaker's own option inside custom_mpi_options, and its NCCL variables


@pytest.mark.parametrize(
    ("tokens", "value", "rest"),
    [
        (("-verbose", "--NCCL_DEBUG=INFO"), "INFO", ("-verbose",)),  # the MXNet post, verbatim
        (("--NCCL_DEBUG", "WARN", "-x", "A=1"), "WARN", ("-x", "A=1")),
        (("-x", "A=1"), None, ("-x", "A=1")),
        (("--NCCL_DEBUG=INFO", "--NCCL_DEBUG=TRACE"), "TRACE", ()),  # the last one wins
    ],
)
def test_nccl_debug_is_sagemakers_option_not_mpiruns(tokens, value, rest):
    assert take_nccl_debug(tokens) == (value, rest)


@pytest.mark.parametrize(
    "tokens", [("--NCCL_DEBUG",), ("--NCCL_DEBUG=",), ("--NCCL_DEBUG", "-verbose")]
)
def test_nccl_debug_without_a_value_names_the_field(tokens):
    with pytest.raises(ConfigError) as caught:
        take_nccl_debug(tokens)
    assert caught.value.field == "sagemaker_mpi_custom_mpi_options"
    assert "--NCCL_DEBUG needs a value" in str(caught.value)


def test_sagemaker_nccl_defaults_for_every_rank():
    assert sagemaker_nccl_options((), None, "eth0", {}) == (
        "-x",
        "NCCL_DEBUG=INFO",
        "-x",
        "NCCL_SOCKET_IFNAME=eth0",
    )
    assert sagemaker_nccl_options((), "WARN", None, {}) == ("-x", "NCCL_DEBUG=WARN")


def test_the_users_nccl_values_win():
    # the job's environment
    assert sagemaker_nccl_options((), None, "eth0", {"NCCL_DEBUG": "WARN"}) == (
        "-x",
        "NCCL_SOCKET_IFNAME=eth0",
    )
    assert sagemaker_nccl_options((), None, "eth0", {"NCCL_SOCKET_IFNAME": "ens5"}) == (
        "-x",
        "NCCL_DEBUG=INFO",
    )
    # an explicit --NCCL_DEBUG wins over the environment; the user's own -x over both
    assert sagemaker_nccl_options((), "TRACE", None, {"NCCL_DEBUG": "WARN"}) == (
        "-x",
        "NCCL_DEBUG=TRACE",
    )
    custom = ("-x", "NCCL_DEBUG=WARN", "-x", "NCCL_SOCKET_IFNAME")
    assert sagemaker_nccl_options(custom, "TRACE", "eth0", {}) == ()
