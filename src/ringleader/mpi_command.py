"""The mpirun command line, built by one pure function.

Our defaults come first; an option the user also gives in sagemaker_mpi_custom_mpi_options
replaces our default for it instead of being appended after it (mpirun would otherwise see both
and either reject them or take whichever it parses last).
"""

from collections.abc import Sequence
from dataclasses import dataclass

from ringleader.errors import ConfigError

OptionKey = tuple[str, ...]

# Spellings mpirun accepts for the options we set, mapped to one name, with their value counts.
_ALIASES: dict[str, tuple[str, int]] = {
    "-np": ("np", 1),
    "--np": ("np", 1),
    "-n": ("np", 1),
    "-c": ("np", 1),
    "-H": ("host", 1),
    "-host": ("host", 1),
    "--host": ("host", 1),
    "-bind-to": ("bind-to", 1),
    "--bind-to": ("bind-to", 1),
    "-map-by": ("map-by", 1),
    "--map-by": ("map-by", 1),
    "--allow-run-as-root": ("allow-run-as-root", 0),
    "-allow-run-as-root": ("allow-run-as-root", 0),
    "-mca": ("mca", 2),
    "--mca": ("mca", 2),
    "-x": ("x", 1),
}


@dataclass(frozen=True)
class MpiPlan:
    hosts: tuple[str, ...]
    processes_per_host: int
    interface: str | None  # None on one host: nothing to pin
    custom_options: tuple[str, ...]
    rank_command: tuple[str, ...]  # the per-rank wrapper followed by the user's command

    @property
    def world_size(self) -> int:
        return len(self.hosts) * self.processes_per_host


@dataclass(frozen=True)
class _Option:
    key: OptionKey | None  # None: an option we do not know; kept verbatim
    tokens: tuple[str, ...]


def parse_options(tokens: Sequence[str]) -> list[_Option]:
    """Group mpirun tokens into options; unknown tokens pass through one by one."""
    options: list[_Option] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token not in _ALIASES:
            options.append(_Option(None, (token,)))
            index += 1
            continue
        canonical, count = _ALIASES[token]
        values = tuple(tokens[index + 1 : index + 1 + count])
        if len(values) < count or (count and values[0].startswith("-")):
            raise ConfigError(
                "sagemaker_mpi_custom_mpi_options",
                f"option {token} needs {count} value(s), got {list(values)}",
            )
        key: OptionKey = (canonical,)
        if canonical == "mca":
            key = ("mca", values[0])
        elif canonical == "x":
            key = ("x", values[0].partition("=")[0])
        options.append(_Option(key, (token, *values)))
        index += 1 + count
    return options


def forwarded_variables(custom_options: Sequence[str]) -> list[str]:
    """Names the user forwards with -x; the rank wrapper lets these win over host values."""
    return [
        option.key[1]
        for option in parse_options(custom_options)
        if option.key is not None and option.key[0] == "x"
    ]


def forwarded_values(custom_options: Sequence[str]) -> dict[str, str]:
    """NAME -> VALUE for every `-x NAME=VALUE` in the custom options."""
    values = {}
    for option in parse_options(custom_options):
        if option.key is not None and option.key[0] == "x" and "=" in option.tokens[1]:
            name, _, value = option.tokens[1].partition("=")
            values[name] = value
    return values


def default_options(plan: MpiPlan) -> list[_Option]:
    host_list = ",".join(f"{host}:{plan.processes_per_host}" for host in plan.hosts)
    defaults = [
        _Option(("allow-run-as-root",), ("--allow-run-as-root",)),
        _Option(("np",), ("-np", str(plan.world_size))),
        _Option(("host",), ("-H", host_list)),
        _Option(("bind-to",), ("-bind-to", "none")),
        _Option(("map-by",), ("-map-by", "slot")),
        _mca("btl", "^openib"),
        _mca("pml", "ob1"),
        _mca("orte_abort_on_non_zero_status", "1"),
    ]
    if plan.interface is not None:
        defaults += [
            _mca("btl_tcp_if_include", plan.interface),
            _mca("oob_tcp_if_include", plan.interface),
        ]
    return defaults


def build_mpirun_argv(plan: MpiPlan) -> list[str]:
    custom = parse_options(plan.custom_options)
    overridden = {option.key for option in custom if option.key is not None}
    argv = ["mpirun"]
    for option in default_options(plan):
        if option.key not in overridden:
            argv += option.tokens
    for option in custom:
        argv += option.tokens
    return [*argv, *plan.rank_command]


def _mca(name: str, value: str) -> _Option:
    return _Option(("mca", name), ("--mca", name, value))
