"""The mpirun command line, built by one pure function, for the Open MPI that runs it.

Our defaults come first; an option the user also gives in sagemaker_mpi_custom_mpi_options
replaces our default for it instead of being appended after it (mpirun would otherwise see both
and either reject them or take whichever it parses last). Open MPI 4 (ORTE) and Open MPI 5
(PRRTE) name some settings differently; the user's spelling of a setting under either name
replaces ours.
"""

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ringleader.config.mpi_options import Option, OptionKey, parse_options
from ringleader.launch.openmpi import ASSUMED, OpenMpiVersion

_ABORT_ON_FAILURE = "orte_abort_on_non_zero_status"  # Open MPI 4
_ERROR_ON_NON_ZERO = "state_base_error_non_zero_exit"  # Open MPI 5 (PRRTE's state framework)
# Open MPI 5's runtime directive for it (`--runtime-options error-nonzero-status=false`);
# PRRTE's help also spells it ABORT-NONZERO-STATUS.
_NON_ZERO_DIRECTIVES = ("ERROR-NONZERO-STATUS", "ABORT-NONZERO-STATUS")

# One setting, several names: ORTE's and PRRTE's, through --mca or --prtemca.
_SAME_SETTING: dict[OptionKey, str] = {
    **{
        (via, name): "ssh arguments"
        for via in ("mca", "prtemca")
        for name in ("plm_rsh_args", "plm_ssh_args")
    },
    **{
        (via, name): "out-of-band interface"
        for via in ("mca", "prtemca")
        for name in ("oob_tcp_if_include", "prte_if_include")
    },
    **{
        ("mca", name): "single copy"
        for name in (
            "btl_vader_single_copy_mechanism",
            "btl_sm_single_copy_mechanism",
            "smsc",
        )
    },
    **{(via, _ERROR_ON_NON_ZERO): "end on non-zero exit" for via in ("mca", "prtemca")},
    ("mca", _ABORT_ON_FAILURE): "end on non-zero exit",
}


def setting(key: OptionKey | None) -> object:
    """What an option sets: options that set one setting under different names compare equal."""
    return _SAME_SETTING.get(key, key) if key is not None else None


@dataclass(frozen=True)
class MpiPlan:
    hosts: tuple[str, ...]
    processes_per_host: int
    interface: str | None  # None on one host: nothing to pin
    custom_options: tuple[str, ...]
    rank_command: tuple[str, ...]  # the per-rank wrapper followed by the user's command
    exported: tuple[str, ...] = ()  # variables of ours every rank needs (`-x NAME`)
    rdma_devices: bool = False  # the host has RDMA devices (EFA, InfiniBand): see default_btl
    ssh_options: tuple[str, ...] = ()  # for mpirun's ssh (plm_rsh_args): reuse the masters
    # The image's ssh client file (`-F PATH`): kept in front of the user's own ssh arguments,
    # which replace ssh_options, since without it ssh has no key for the job's hosts.
    ssh_config: tuple[str, ...] = ()
    open_mpi: OpenMpiVersion = ASSUMED  # the Open MPI of the leader's mpirun
    # Containers lack CAP_SYS_PTRACE, so single copy between a host's ranks (CMA) fails there
    # ("Read -1, expected N, errno = 1"); a cluster machine keeps it.
    single_copy: bool = False
    # The interface's IPv4 networks (CIDR): how PRRTE's out-of-band channel is pinned to it.
    interface_networks: tuple[str, ...] = ()

    @property
    def world_size(self) -> int:
        return len(self.hosts) * self.processes_per_host


def default_options(plan: MpiPlan) -> list[Option]:
    host_list = ",".join(f"{host}:{plan.processes_per_host}" for host in plan.hosts)
    defaults = [
        Option(("allow-run-as-root",), ("--allow-run-as-root",)),
        Option(("np",), ("-np", str(plan.world_size))),
        Option(("host",), ("-H", host_list)),
    ]
    btl = default_btl(plan.rdma_devices, plan.open_mpi)
    if plan.open_mpi.prrte:
        # PRRTE: no orted and no orte_* parameters. Its launcher's and out-of-band channel's
        # parameters are PRRTE's own (--prtemca). A rank exiting non-zero ends the job by
        # PRRTE's default (runtime option ERROR-NONZERO-STATUS), so there is nothing to set.
        # Single copy between ranks of one host moved from the vader BTL (now sm) into the
        # smsc framework, whose one component here is CMA: left out, as under Open MPI 4.
        defaults += [
            Option(("bind-to",), ("--bind-to", "none")),
            Option(("map-by",), ("--map-by", "slot")),
            *([_mca("btl", btl)] if btl is not None else []),
            _mca("pml", "ob1"),
            *([] if plan.single_copy else [_mca("smsc", "^cma")]),
        ]
        if plan.ssh_config or plan.ssh_options:
            ssh_args = " ".join((*plan.ssh_config, *plan.ssh_options))
            defaults.append(_prtemca("plm_ssh_args", ssh_args))
        if plan.interface is not None:
            # PRRTE (5.0.7) rejects an interface named in its include list once the kernel
            # has numbered it above 32767 (a long-running Docker host: eth0 was interface
            # 34045, and mpirun found "no network interfaces"); its network, in CIDR form,
            # matches. The BTL takes the name as ever.
            oob = ",".join(plan.interface_networks) or plan.interface
            defaults += [
                _mca("btl_tcp_if_include", plan.interface),
                _prtemca("oob_tcp_if_include", oob),
            ]
        return defaults
    # Open MPI 4 (ORTE). Containers lack CAP_SYS_PTRACE, so the vader BTL's CMA single copy
    # fails ("Read -1, expected N, errno = 1"): no single copy.
    defaults += [
        Option(("bind-to",), ("-bind-to", "none")),
        Option(("map-by",), ("-map-by", "slot")),
        *([_mca("btl", btl)] if btl is not None else []),
        _mca("pml", "ob1"),
        _mca(_ABORT_ON_FAILURE, "1"),
        *([] if plan.single_copy else [_mca("btl_vader_single_copy_mechanism", "none")]),
    ]
    if plan.ssh_config or plan.ssh_options:
        defaults.append(_mca("plm_rsh_args", " ".join((*plan.ssh_config, *plan.ssh_options))))
    if plan.interface is not None:
        defaults += [
            _mca("btl_tcp_if_include", plan.interface),
            _mca("oob_tcp_if_include", plan.interface),
        ]
    return defaults


def default_btl(rdma_devices: bool, open_mpi: OpenMpiVersion = ASSUMED) -> str | None:
    """Byte transfer layers to leave out (None: none). Open MPI 4: never openib (verbs,
    retired for EFA and UCX; Open MPI 5 has no openib). Without RDMA devices also never ofi:
    its libfabric provider then runs over TCP like the tcp BTL, but Open MPI 4.1's ofi BTL
    makes every rank's MPI_Finalize take one second (measured 1.01 s vs 0.05 s, 2 hosts x 2
    ranks), which every job pays at its end."""
    if open_mpi.prrte:
        return None if rdma_devices else "^ofi"
    return "^openib" if rdma_devices else "^openib,ofi"


def has_rdma_devices(sys_class: Path = Path("/sys/class/infiniband")) -> bool:
    """EFA and InfiniBand adapters appear here (sysfs, also inside containers)."""
    try:
        return any(sys_class.iterdir())
    except OSError:
        return False


def build_mpirun_argv(plan: MpiPlan) -> list[str]:
    custom = parse_options(plan.custom_options)
    overridden = {setting(option.key) for option in custom if option.key is not None}
    argv = ["mpirun"]
    for option in default_options(plan):
        if setting(option.key) not in overridden:
            argv += option.tokens
    for option in custom:
        argv += _with_ssh_config(option, plan.ssh_config)
    for name in plan.exported:
        argv += ["-x", name]
    return [*argv, *plan.rank_command]


def _with_ssh_config(option: Option, ssh_config: tuple[str, ...]) -> tuple[str, ...]:
    """The user's ssh arguments, after the image's `-F PATH` when there is one."""
    if not ssh_config or setting(option.key) != "ssh arguments" or len(option.tokens) < 3:
        return option.tokens
    *head, value = option.tokens
    return (*head, " ".join((*ssh_config, value)))


def stops_all_on_rank_failure(
    custom_options: Iterable[str], open_mpi: OpenMpiVersion = ASSUMED
) -> bool:
    """Whether one rank's failure ends the job (our default), unless the user told the Open
    MPI that runs it to let the other ranks run on: Open MPI 4's
    orte_abort_on_non_zero_status, Open MPI 5's ERROR-NONZERO-STATUS runtime directive or its
    state_base_error_non_zero_exit parameter (Open MPI 5 ignores the orte_ one)."""
    stops = True
    for option in parse_options(tuple(custom_options)):
        if option.key is None:
            continue
        if not open_mpi.prrte:
            if option.key == ("mca", _ABORT_ON_FAILURE):
                stops = _true(option.tokens[-1])
        elif option.key[-1] == _ERROR_ON_NON_ZERO:
            stops = _true(option.tokens[-1])
        elif option.key == ("runtime-options",):
            for directive in option.tokens[-1].split(","):
                name, equals, value = directive.strip().partition("=")
                if _names_non_zero_directive(name):
                    stops = _true(value) if equals else True
    return stops


def _true(value: str) -> bool:
    return value.strip().lower() not in ("0", "false", "no", "f", "n")


def _names_non_zero_directive(name: str) -> bool:
    """PRRTE takes a directive's name cut short as long as it is unambiguous."""
    name = name.upper()
    return len(name) >= len("ERROR-N") and any(d.startswith(name) for d in _NON_ZERO_DIRECTIVES)


def ignored_options(custom_options: Iterable[str], open_mpi: OpenMpiVersion) -> list[str]:
    """Warnings for options of the user's that the Open MPI found silently ignores."""
    if not open_mpi.prrte:
        return []
    warnings = []
    for option in parse_options(tuple(custom_options)):
        if option.key is not None and option.key[0] == "mca" and option.key[1].startswith("orte_"):
            hint = ""
            if option.key[1] == _ABORT_ON_FAILURE:
                hint = (
                    "; to let the other ranks run on after one exits non-zero, use "
                    "--runtime-options error-nonzero-status=false"
                )
            warnings.append(
                f"Open MPI {open_mpi} has no ORTE: --mca {option.key[1]} has no effect{hint}"
            )
    return warnings


def _mca(name: str, value: str) -> Option:
    return Option(("mca", name), ("--mca", name, value))


def _prtemca(name: str, value: str) -> Option:
    return Option(("prtemca", name), ("--prtemca", name, value))


_ABORT_RANK = re.compile(r"MPI_ABORT was invoked on rank (\d+)")
# Open MPI 4: "with errorcode 3." on the next line; Open MPI 5: "  Errorcode: 3" two lines on.
_ABORT_CODE = re.compile(r"with errorcode (-?\d+)|^\s*Errorcode: (-?\d+)")


def parse_mpi_aborts(lines: Iterable[str]) -> dict[int, int]:
    """rank -> error code, from mpirun's "MPI_ABORT was invoked on rank N ..." reports and the
    error code that follows (Open MPI 4: "with errorcode C.", Open MPI 5: "Errorcode: C")."""
    aborts: dict[int, int] = {}
    rank: int | None = None
    for line in lines:
        if (found := _ABORT_RANK.search(line)) is not None:
            rank = int(found.group(1))
        elif rank is not None and (code := _ABORT_CODE.search(line)) is not None:
            aborts.setdefault(rank, int(code.group(1) or code.group(2)))
            rank = None
    return aborts


def is_abort_line(line: str) -> bool:
    """A line parse_mpi_aborts needs."""
    return "MPI_ABORT was invoked" in line or _ABORT_CODE.search(line) is not None


class _MpirunOutput:
    """mpirun's MPI_Abort reports: which rank called it, with which code."""

    def keeps(self, line: str) -> bool:
        return is_abort_line(line)

    def rank_codes(self, kept: Sequence[str]) -> dict[int, int]:
        return parse_mpi_aborts(kept)


MPIRUN_OUTPUT = _MpirunOutput()
