"""The mpirun command line, built by one pure function.

Our defaults come first; an option the user also gives in sagemaker_mpi_custom_mpi_options
replaces our default for it instead of being appended after it (mpirun would otherwise see both
and either reject them or take whichever it parses last).
"""

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ringleader.config.mpi_options import Option, parse_options

_ABORT_ON_FAILURE = "orte_abort_on_non_zero_status"


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

    @property
    def world_size(self) -> int:
        return len(self.hosts) * self.processes_per_host


def default_options(plan: MpiPlan) -> list[Option]:
    host_list = ",".join(f"{host}:{plan.processes_per_host}" for host in plan.hosts)
    defaults = [
        Option(("allow-run-as-root",), ("--allow-run-as-root",)),
        Option(("np",), ("-np", str(plan.world_size))),
        Option(("host",), ("-H", host_list)),
        Option(("bind-to",), ("-bind-to", "none")),
        Option(("map-by",), ("-map-by", "slot")),
        _mca("btl", default_btl(plan.rdma_devices)),
        _mca("pml", "ob1"),
        _mca(_ABORT_ON_FAILURE, "1"),
    ]
    if plan.ssh_options:
        defaults.append(_mca("plm_rsh_args", " ".join(plan.ssh_options)))
    if plan.interface is not None:
        defaults += [
            _mca("btl_tcp_if_include", plan.interface),
            _mca("oob_tcp_if_include", plan.interface),
        ]
    return defaults


def default_btl(rdma_devices: bool) -> str:
    """Byte transfer layers: never openib (verbs, retired for EFA and UCX). Without RDMA
    devices also never ofi: its libfabric provider then runs over TCP like the tcp BTL, but
    Open MPI 4.1's ofi BTL makes every rank's MPI_Finalize take one second (measured 1.01 s
    vs 0.05 s, 2 hosts x 2 ranks), which every job pays at its end."""
    return "^openib" if rdma_devices else "^openib,ofi"


def has_rdma_devices(sys_class: Path = Path("/sys/class/infiniband")) -> bool:
    """EFA and InfiniBand adapters appear here (sysfs, also inside containers)."""
    try:
        return any(sys_class.iterdir())
    except OSError:
        return False


def build_mpirun_argv(plan: MpiPlan) -> list[str]:
    custom = parse_options(plan.custom_options)
    overridden = {option.key for option in custom if option.key is not None}
    argv = ["mpirun"]
    for option in default_options(plan):
        if option.key not in overridden:
            argv += option.tokens
    for option in custom:
        argv += option.tokens
    for name in plan.exported:
        argv += ["-x", name]
    return [*argv, *plan.rank_command]


def stops_all_on_rank_failure(custom_options: Iterable[str]) -> bool:
    """Whether one rank's failure ends the job (our default), unless the user turned
    orte_abort_on_non_zero_status off to let the other ranks run on."""
    for option in parse_options(tuple(custom_options)):
        if option.key == ("mca", _ABORT_ON_FAILURE):
            return option.tokens[-1].lower() not in ("0", "false", "no", "f", "n")
    return True


def _mca(name: str, value: str) -> Option:
    return Option(("mca", name), ("--mca", name, value))


_ABORT_RANK = re.compile(r"MPI_ABORT was invoked on rank (\d+)")
_ABORT_CODE = re.compile(r"with errorcode (-?\d+)")


def parse_mpi_aborts(lines: Iterable[str]) -> dict[int, int]:
    """rank -> error code, from mpirun's "MPI_ABORT was invoked on rank N ... with errorcode
    C." messages (the code is on the line after the rank)."""
    aborts: dict[int, int] = {}
    rank: int | None = None
    for line in lines:
        if (found := _ABORT_RANK.search(line)) is not None:
            rank = int(found.group(1))
        elif rank is not None and (code := _ABORT_CODE.search(line)) is not None:
            aborts.setdefault(rank, int(code.group(1)))
            rank = None
    return aborts


def is_abort_line(line: str) -> bool:
    """A line parse_mpi_aborts needs."""
    return "MPI_ABORT was invoked" in line or "with errorcode" in line


class _MpirunOutput:
    """mpirun's MPI_Abort reports: which rank called it, with which code."""

    def keeps(self, line: str) -> bool:
        return is_abort_line(line)

    def rank_codes(self, kept: Sequence[str]) -> dict[int, int]:
        return parse_mpi_aborts(kept)


MPIRUN_OUTPUT = _MpirunOutput()
