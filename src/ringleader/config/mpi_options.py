"""sagemaker_mpi_custom_mpi_options, parsed: the options they set, the variables they forward."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ringleader.core.errors import ConfigError

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
    # Open MPI 5: parameters of PRRTE (its launcher, out-of-band channel, job state) and its
    # comma-separated runtime directives.
    "--prtemca": ("prtemca", 2),
    "-prtemca": ("prtemca", 2),
    "--runtime-options": ("runtime-options", 1),
    "-x": ("x", 1),
}


@dataclass(frozen=True)
class Option:
    key: OptionKey | None  # None: an option we do not know; kept verbatim
    tokens: tuple[str, ...]


def parse_options(tokens: Sequence[str]) -> list[Option]:
    """Group mpirun tokens into options; unknown tokens pass through one by one."""
    options: list[Option] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token not in _ALIASES:
            options.append(Option(None, (token,)))
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
        if canonical in ("mca", "prtemca"):
            key = (canonical, values[0])
        elif canonical == "x":
            key = ("x", values[0].partition("=")[0])
        options.append(Option(key, (token, *values)))
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


NCCL_DEBUG_OPTION = "--NCCL_DEBUG"
CUSTOM_OPTIONS_FIELD = "sagemaker_mpi_custom_mpi_options"


def take_nccl_debug(tokens: Sequence[str]) -> tuple[str | None, tuple[str, ...]]:
    """SageMaker's MPI runner reads `--NCCL_DEBUG=X` (or `--NCCL_DEBUG X`) in the custom
    options as its own option, not mpirun's: its value, and the tokens left for mpirun."""
    value: str | None = None
    rest: list[str] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        name, equals, given = token.partition("=")
        if name != NCCL_DEBUG_OPTION:
            rest.append(token)
            index += 1
            continue
        if not equals:
            following = tokens[index + 1] if index + 1 < len(tokens) else ""
            given = "" if following.startswith("-") else following
            index += 1 + bool(given)
        else:
            index += 1
        if not given:
            raise ConfigError(
                CUSTOM_OPTIONS_FIELD,
                f"{NCCL_DEBUG_OPTION} needs a value (e.g. {NCCL_DEBUG_OPTION}=INFO or WARN)",
            )
        value = given
    return value, tuple(rest)


def sagemaker_nccl_options(
    custom_options: Sequence[str],
    nccl_debug: str | None,
    interface: str | None,
    environ: Mapping[str, str],
) -> tuple[str, ...]:
    """`-x` options for the NCCL variables SageMaker's MPI runner sets for every rank:
    NCCL_DEBUG (`--NCCL_DEBUG`'s value, else INFO) and NCCL_SOCKET_IFNAME (the job's
    interface). The user's own `-x` always wins, and so does a value in the job's environment
    unless `--NCCL_DEBUG` asked for another."""
    given = set(forwarded_variables(custom_options))
    values: dict[str, str] = {}
    if nccl_debug is not None or "NCCL_DEBUG" not in environ:
        values["NCCL_DEBUG"] = nccl_debug or "INFO"
    if interface is not None and "NCCL_SOCKET_IFNAME" not in environ:
        values["NCCL_SOCKET_IFNAME"] = interface
    return tuple(
        token
        for name, value in values.items()
        if name not in given
        for token in ("-x", f"{name}={value}")
    )
