"""Everything a job needs to know, read and validated up front into one immutable object."""

import contextlib
import dataclasses
import functools
import re
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ringleader.config import horovod
from ringleader.config import hyperparameters as hp
from ringleader.config.image import IMAGE_DIR, ImageSettings, load_image_settings
from ringleader.config.metric_definitions import MetricDefinition, parse_definitions
from ringleader.config.mpi_options import forwarded_values, take_nccl_debug
from ringleader.config.output_uri import OutputUri, parse_output_uri
from ringleader.config.selection import ALL_RANKS, RANK_ZERO, RankSelection
from ringleader.config.slurm import slurm_topology, uses_slurm
from ringleader.config.timeouts import TIMEOUT_KEYS, parse_timeouts
from ringleader.config.timeouts import Timeouts as Timeouts  # where the job's parts import it
from ringleader.config.topology import Topology, parse_topology
from ringleader.core import paths
from ringleader.core.attempts import AttemptRecord, parse_history
from ringleader.core.errors import ConfigError
from ringleader.core.jsontext import parse_json
from ringleader.core.restart_policy import DEFAULT_POLICY, RestartPolicy, parse_restart_on
from ringleader.core.straggler import SAMPLE_RATE

SAGEMAKER_PREFIX = "sagemaker_"
RINGLEADER_PREFIX = "ringleader_"
DEFAULT_CODE_DIR = str(paths.CODE_DIR)

MPI = "mpi"
TORCH_DISTRIBUTED = "torch_distributed"
PARAMETER_SERVER = "parameter_server"
MULTI_WORKER_MIRRORED = "multi_worker_mirrored_strategy"
NO_DISTRIBUTION = "none"  # every host runs the program once, on its own
# What the SageMaker SDK sends for each distribution, in the order they are checked.
DISTRIBUTION_KEYS = {
    "sagemaker_mpi_enabled": MPI,
    "sagemaker_torch_distributed_enabled": TORCH_DISTRIBUTED,
    "sagemaker_parameter_server_enabled": PARAMETER_SERVER,
    "sagemaker_multi_worker_mirrored_strategy_enabled": MULTI_WORKER_MIRRORED,
}
# The hyperparameter that turns each distribution on: what a launcher of jobs writes.
ENABLED_KEYS = {name: key for key, name in DISTRIBUTION_KEYS.items()}
DISTRIBUTIONS = (*DISTRIBUTION_KEYS.values(), NO_DISTRIBUTION)  # every distribution's name
TF_DISTRIBUTIONS = (PARAMETER_SERVER, MULTI_WORKER_MIRRORED)
TF_MASTER_ROLES = "master"  # SageMaker's layout: the script runs as master and workers
TF_CHIEF_ROLES = "chief"  # TF2 ParameterServerStrategy + ClusterCoordinator
TF_ROLES = (TF_MASTER_ROLES, TF_CHIEF_ROLES)  # ringleader_tf_roles
# ringleader_ps_framework: whose parameter servers `parameter_server` means (auto: the image's)
PS_FRAMEWORK_AUTO = "auto"
PS_FRAMEWORKS = (PS_FRAMEWORK_AUTO, "tensorflow", "mxnet")
# ringleader_health_pairs: which links the gate probes before the first attempt
PAIRS_TO_LEADER = "leader"  # every worker to the leader
PAIRS_ALL = "all"  # and every pair of workers
HEALTH_PAIRS = (PAIRS_TO_LEADER, PAIRS_ALL)
# ringleader_straggler_action: what naming a straggler does
STRAGGLER_WARN = "warn"  # a warning line, and it is in job.json
STRAGGLER_STOP = "stop"  # and the job ends (exitcodes.STRAGGLER), its host named
STRAGGLER_OFF = "off"  # no stack samples, no straggler watch
STRAGGLER_ACTIONS = (STRAGGLER_WARN, STRAGGLER_STOP, STRAGGLER_OFF)
MAX_SAMPLE_RATE = 100  # py-spy's own default rate


def _output_uri(field: str, value: Any) -> OutputUri:
    if not isinstance(value, str):
        raise ConfigError(field, f"expected s3://bucket/prefix or an absolute path, got {value!r}")
    return parse_output_uri(value)


# ringleader_* hyperparameter -> (the part of JobConfig, its field, parser(field name, value))
_SETTING_KEYS: dict[str, tuple[str, str, Callable[[str, Any], Any]]] = {
    "ringleader_control_port": ("job", "control_port", hp.as_port),
    "ringleader_output_uri": ("job", "output_uri", _output_uri),
    "ringleader_mpi4py_run": ("mpi", "mpi4py_run", hp.as_bool),
    "ringleader_log_ranks": ("output", "log_ranks", RankSelection.parse),
    "ringleader_metric_ranks": ("output", "metric_ranks", RankSelection.parse),
    "ringleader_metric_definitions": ("output", "metric_definitions", parse_definitions),
    "ringleader_verbose": ("output", "verbose", hp.as_bool),
    "ringleader_master_port": ("spawn", "master_port", hp.as_port),
    "ringleader_tf_worker_port": ("spawn", "tf_worker_port", hp.as_port),
    "ringleader_tf_ps_port": ("spawn", "tf_ps_port", hp.as_port),
    "ringleader_tf_mirrored_port": ("spawn", "tf_mirrored_port", hp.as_port),
    "ringleader_tf_roles": (
        "spawn",
        "tf_roles",
        lambda field, value: _choice(field, value, TF_ROLES),
    ),
    "ringleader_ps_framework": (
        "spawn",
        "ps_framework",
        lambda field, value: _choice(field, value, PS_FRAMEWORKS),
    ),
    "ringleader_mxnet_servers_per_host": ("spawn", "mxnet_servers_per_host", hp.as_positive_int),
    "ringleader_mxnet_ps_port": ("spawn", "mxnet_ps_port", hp.as_port),
    "ringleader_max_restarts": ("restart", "max_restarts", hp.as_count),
    "ringleader_restart_backoff": ("restart", "backoff", hp.as_seconds),
    "ringleader_restart_on": ("restart", "policy", parse_restart_on),
    "ringleader_earlier_attempts": ("restart", "history", parse_history),
    "ringleader_health": ("health", "enabled", hp.as_switch),
    "ringleader_health_timeout": ("health", "timeout", hp.as_positive_seconds),
    "ringleader_min_free_disk": ("health", "min_free_disk", hp.as_size),
    "ringleader_min_shm": ("health", "min_shm", hp.as_size),
    "ringleader_min_free_memory": ("health", "min_free_memory", hp.as_size),
    "ringleader_health_check": ("health", "check", lambda field, value: _hook(field, value)),
    "ringleader_max_clock_offset": ("health", "max_clock_offset", hp.as_positive_seconds),
    "ringleader_step_regex": (
        "progress",
        "step_regex",
        lambda field, value: _step_regex(field, value),
    ),
    "ringleader_step_metric": ("progress", "step_metric", lambda field, value: _name(field, value)),
    "ringleader_total_steps": ("progress", "total_steps", hp.as_positive_int),
    "ringleader_status_interval": ("progress", "status_interval", hp.as_seconds),
    "ringleader_straggler_threshold": (
        "progress",
        "straggler_threshold",
        lambda field, value: _share(field, value),
    ),
    "ringleader_straggler_window": ("progress", "straggler_window", hp.as_positive_int),
    "ringleader_straggler_sample_rate": (
        "progress",
        "straggler_sample_rate",
        lambda field, value: _sample_rate(field, value),
    ),
    "ringleader_straggler_action": (
        "progress",
        "straggler_action",
        lambda field, value: _choice(field, value, STRAGGLER_ACTIONS),
    ),
    "ringleader_health_pairs": (
        "health",
        "pairs",
        lambda field, value: _choice(field, value, HEALTH_PAIRS),
    ),
}


def _hook(field: str, value: Any) -> tuple[str, ...]:
    """ringleader_health_check: a command line, split into words as a shell would."""
    if not isinstance(value, str):
        raise ConfigError(field, f"expected a command line, got {value!r}")
    try:
        words = tuple(shlex.split(value))
    except ValueError as error:
        raise ConfigError(field, f"cannot split {value!r}: {error}") from None
    if not words:
        raise ConfigError(field, "expected a command line, got nothing")
    return words


def _step_regex(field: str, value: Any) -> str:
    """ringleader_step_regex: a regex whose first group is the step number."""
    if not isinstance(value, str) or not value:
        raise ConfigError(field, f"expected a regex, got {value!r}")
    try:
        pattern = re.compile(value)
    except re.error as error:
        raise ConfigError(field, f"cannot compile {value!r}: {error}") from None
    if pattern.groups < 1:
        raise ConfigError(field, f"{value!r} has no group: put ( ) around the step number")
    return value


def _share(field: str, value: Any) -> float:
    """A share strictly between 0 and 1 (0.2: twenty percent)."""
    try:
        share = float(value)
    except (TypeError, ValueError):
        share = float("nan")
    if not 0 < share < 1:
        raise ConfigError(field, f"expected a share between 0 and 1 (0.2 for 20%), got {value!r}")
    return share


def _sample_rate(field: str, value: Any) -> int:
    """Stack samples a second: whole (py-spy's rate), 1 to MAX_SAMPLE_RATE."""
    rate = hp.as_positive_int(field, value)
    if rate > MAX_SAMPLE_RATE:
        raise ConfigError(
            field, f"expected samples a second from 1 to {MAX_SAMPLE_RATE}, got {value!r}"
        )
    return rate


def _name(field: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(field, f"expected a name, got {value!r}")
    return value


def _choice(field: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(field, f"expected one of {', '.join(choices)}, got {value!r}")
    return str(value)


METRIC_DEFINITIONS_ENV = "RINGLEADER_METRIC_DEFINITIONS"
DEFAULT_CONTROL_PORT = 29100
PROCESSES_PER_HOST_KEY = "ringleader_processes_per_host"
COMMAND_KEY = "ringleader_command"
DISTRIBUTION_GROUPS_KEY = "sagemaker_distribution_instance_groups"
DEFAULT_MASTER_PORT = 7777  # SageMaker's PyTorch container uses it for torch_distributed


@dataclass(frozen=True)
class SourceConfig:
    """What runs, and where its code comes from (source/, launch/hostprep.py)."""

    program: str  # sagemaker_program: a script in code_dir, or "-m package.module"
    code_dir: str = DEFAULT_CODE_DIR
    # sagemaker_submit_directory when it is a sourcedir tarball (s3:// or a local file): it is
    # fetched and extracted into code_dir before the job starts (ringleader.source.usercode).
    code_archive: str | None = None
    # ringleader_command: a whole command line instead of a program in the code directory
    # (`ringleader cluster run -- COMMAND...`); it runs as given, in the code directory.
    command: tuple[str, ...] = ()
    # The interpreter of the user's program: the one `ringleader image setup --python` named
    # (config/image.py), else ringleader's own.
    python: str = sys.executable

    @property
    def program_path(self) -> Path:
        return Path(self.code_dir) / self.program

    @property
    def module(self) -> str | None:
        """`sagemaker_program: "-m package.module"` runs a module, as `torchrun -m` does."""
        return module_name(self.program)


@dataclass(frozen=True)
class MpiConfig:
    """What mpirun is given (launch/mpirun_strategy.py)."""

    processes_per_host: int | None = None  # sagemaker_mpi_num_of_processes_per_host
    custom_options: tuple[str, ...] = ()  # for mpirun: less SageMaker's own --NCCL_DEBUG
    nccl_debug: str | None = None  # `--NCCL_DEBUG=X` in sagemaker_mpi_custom_mpi_options
    # Run Python scripts as `python -m mpi4py script.py`: an exception or sys.exit(N) in one
    # rank then calls MPI_Abort instead of hanging in MPI_Finalize while peers wait for it.
    mpi4py_run: bool = True


@dataclass(frozen=True)
class SpawnConfig:
    """Ports and roles of the distributions whose hosts start their own ranks
    (launch/spawn_strategy.py)."""

    master_port: int = DEFAULT_MASTER_PORT  # torch_distributed's MASTER_PORT
    # TensorFlow (SageMaker's ports): master/chief and workers, parameter servers, and
    # multi_worker_mirrored_strategy's workers; the roles of the parameter_server layout.
    tf_worker_port: int = 2222
    tf_ps_port: int = 2223
    tf_mirrored_port: int = 8890
    tf_roles: str = TF_MASTER_ROLES
    ps_framework: str = PS_FRAMEWORK_AUTO
    # MXNet's parameter servers: servers on each host, and the scheduler's port on the leader
    mxnet_servers_per_host: int = 1
    mxnet_ps_port: int = 8000


@dataclass(frozen=True)
class OutputConfig:
    """What the leader shows, meters and keeps (output/, supervise/lead.py)."""

    log_ranks: RankSelection = ALL_RANKS  # whose output the leader prints
    metric_ranks: RankSelection = RANK_ZERO  # so metrics are not multiplied by the ranks
    metric_definitions: tuple[MetricDefinition, ...] = ()
    kept_files: tuple[str, ...] = ()  # timeline/autotune log, copied into output/data
    verbose: bool = False  # ringleader_verbose: details (pulse statistics) on stdout too


@dataclass(frozen=True)
class RestartConfig:
    """Restarts in place after a rank fails or the job hangs (core/attempts.py)."""

    max_restarts: int = 0  # ringleader_max_restarts: attempts after the first, at most
    backoff: float = 1.0  # ringleader_restart_backoff: seconds between two attempts
    policy: RestartPolicy = DEFAULT_POLICY  # ringleader_restart_on: the causes it may cure
    # ringleader_earlier_attempts: the job's attempts before this run (a cluster's runner
    # starts the job again on a spare host after a host loss); this run's first is the next.
    history: tuple[AttemptRecord, ...] = ()

    @property
    def enabled(self) -> bool:
        return self.max_restarts > 0


@dataclass(frozen=True)
class HealthConfig:
    """The health gate before every attempt (launch/health.py): what each host checks."""

    enabled: bool = True  # ringleader_health: on or off
    timeout: float = 30.0  # ringleader_health_timeout: every check of a host, together
    min_free_disk: int = 1 << 30  # ringleader_min_free_disk: output, model and checkpoints
    # ringleader_min_shm: /dev/shm's size; Docker's default (64 MiB) passes, less does not
    min_shm: int = 64 << 20
    min_free_memory: int = 256 << 20  # ringleader_min_free_memory: MemAvailable
    check: tuple[str, ...] = ()  # ringleader_health_check: the user's own, run on every host
    pairs: str = PAIRS_TO_LEADER  # ringleader_health_pairs: the links probed (HEALTH_PAIRS)
    # ringleader_max_clock_offset: a worker's clock against the leader's, measured at its hello
    # (S3 refuses requests signed more than 15 minutes off; NTP keeps hosts within milliseconds)
    max_clock_offset: float = 60.0


@dataclass(frozen=True)
class ProgressConfig:
    """Each rank's steps and the leader's status line (core/progress.py, rank/steps.py)."""

    step_regex: str | None = None  # ringleader_step_regex: its first group is the step
    step_metric: str | None = None  # ringleader_step_metric: a metric definition's name
    total_steps: int | None = None  # ringleader_total_steps (else a rank's total=)
    status_interval: float = 60.0  # ringleader_status_interval; 0: no status line
    # The straggler watch (core/straggler.py), judged at each status line: a rank whose wait
    # share over the last `straggler_window` intervals is below the median rank's by
    # `straggler_threshold` or more.
    straggler_threshold: float = 0.15
    straggler_window: int = 3
    straggler_sample_rate: int = SAMPLE_RATE  # ringleader_straggler_sample_rate
    # Off unless asked for: the samples that can name a straggler cost a TensorFlow rank more
    # than 1% of its time (docs/progress.md), and fewer samples name none.
    straggler_action: str = STRAGGLER_OFF

    @property
    def sample_period(self) -> float | None:
        """The straggler watch records each rank's stacks in periods of one status interval
        (rank/waits.py: one py-spy a period, `straggler_sample_rate` samples a second); None
        without it."""
        if self.status_interval <= 0 or self.straggler_action == STRAGGLER_OFF:
            return None
        return self.status_interval

    def step_pattern(self, definitions: Sequence[MetricDefinition]) -> str | None:
        """The regex the ranks' output is matched with for their step: ringleader_step_regex,
        else the regex of the metric definition ringleader_step_metric names."""
        if self.step_regex is not None or self.step_metric is None:
            return self.step_regex
        for definition in definitions:
            if definition.name == self.step_metric:
                return str(definition.pattern.pattern)
        return None


@dataclass(frozen=True)
class JobConfig:
    """The whole job's settings, in the parts each consumer reads."""

    topology: Topology
    source: SourceConfig
    hyperparameters: Mapping[str, Any]  # all of them, decoded: sagemaker-training wants them
    distribution: str = NO_DISTRIBUTION  # one of DISTRIBUTION_KEYS' values, or NO_DISTRIBUTION
    mpi: MpiConfig = field(default_factory=MpiConfig)
    spawn: SpawnConfig = field(default_factory=SpawnConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    timeouts: Timeouts = field(default_factory=Timeouts)
    restart: RestartConfig = field(default_factory=RestartConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    progress: ProgressConfig = field(default_factory=ProgressConfig)
    control_port: int = DEFAULT_CONTROL_PORT
    horovod_env: Mapping[str, str] = field(default_factory=dict)  # HOROVOD_* for every rank
    # Outside SageMaker: where each host's output.tar.gz and model.tar.gz go at the end.
    output_uri: OutputUri | None = None
    own_processes_per_host: int | None = None  # ringleader_processes_per_host

    def ranks_per_host(self, gpus: int) -> int:
        """For mpi, sagemaker_mpi_num_of_processes_per_host wins; then the ringleader setting
        (the SDK sends no such field for torch_distributed), the GPUs found, else 1."""
        if self.distribution == MPI and self.mpi.processes_per_host is not None:
            return self.mpi.processes_per_host
        return self.own_processes_per_host or gpus or 1

    @property
    def user_hyperparameters(self) -> dict[str, Any]:
        """What the user's script receives as --key value: neither sagemaker_* nor ringleader_*."""
        return {
            key: value
            for key, value in self.hyperparameters.items()
            if not key.startswith((SAGEMAKER_PREFIX, RINGLEADER_PREFIX))
        }


MODULE_PREFIX = "-m "
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def module_name(program: str) -> str | None:
    if not program.startswith(MODULE_PREFIX):
        return None
    return program[len(MODULE_PREFIX) :].strip()


def parse_job_config(
    topology: Topology, raw_hyperparameters: Mapping[str, Any], environ: Mapping[str, str]
) -> JobConfig:
    """Pure validation of the decoded inputs; does not look at the file system."""
    values = hp.decode_all(raw_hyperparameters)
    command = _command(values.get(COMMAND_KEY))
    program = values.get("sagemaker_program", environ.get("SAGEMAKER_PROGRAM"))
    if command and program is None:
        program = shlex.join(command)  # for the log; nothing is looked up in the code directory
    if program is None or (isinstance(program, str) and not program.strip()):
        raise ConfigError(
            "sagemaker_program",
            "missing: set the hyperparameter sagemaker_program to the script to run "
            "(relative to the code directory, e.g. train.py)",
        )
    if not isinstance(program, str):
        raise ConfigError("sagemaker_program", f"expected a file name, got {program!r}")
    module = None if command else module_name(program)
    if module is not None and not _MODULE.fullmatch(module):
        raise ConfigError(
            "sagemaker_program", f"{program!r}: expected -m followed by a dotted module name"
        )
    distribution, topology = _job_topology(topology, values)
    per_host_value = values.get("sagemaker_mpi_num_of_processes_per_host")
    processes_per_host = (
        None
        if per_host_value is None
        else hp.as_positive_int("sagemaker_mpi_num_of_processes_per_host", per_host_value)
    )
    nccl_debug, custom_options = take_nccl_debug(
        _split_custom_options(values.get("sagemaker_mpi_custom_mpi_options", ""))
    )
    timeouts, settings = _parse_ringleader_keys(values, environ)
    horovod_vars = horovod.horovod_env(values)
    kept_files = horovod.files_to_keep(horovod_vars, forwarded_values(custom_options))
    code_dir, code_archive = _code_source(values.get("sagemaker_submit_directory"))
    return JobConfig(
        topology=topology,
        source=SourceConfig(program, code_dir, code_archive, command),
        hyperparameters=MappingProxyType(values),
        distribution=distribution,
        mpi=MpiConfig(processes_per_host, custom_options, nccl_debug, **settings["mpi"]),
        spawn=SpawnConfig(**settings["spawn"]),
        output=OutputConfig(**settings["output"], kept_files=kept_files),
        timeouts=timeouts,
        restart=RestartConfig(**settings["restart"]),
        health=HealthConfig(**settings["health"]),
        progress=ProgressConfig(**settings["progress"]),
        horovod_env=MappingProxyType(horovod_vars),
        own_processes_per_host=_own_processes_per_host(
            topology, values.get(PROCESSES_PER_HOST_KEY)
        ),
        **settings["job"],
    )


def check_values(raw_hyperparameters: Mapping[str, Any]) -> None:
    """What parse_job_config checks that does not depend on the hosts: the distribution,
    mpirun's options and processes per host, every ringleader_* setting. Raises ConfigError."""
    values = hp.decode_all(raw_hyperparameters)
    mpi_enabled = hp.as_bool("sagemaker_mpi_enabled", values.get("sagemaker_mpi_enabled", False))
    _distribution(mpi_enabled, values)
    per_host = values.get("sagemaker_mpi_num_of_processes_per_host")
    if per_host is not None:
        hp.as_positive_int("sagemaker_mpi_num_of_processes_per_host", per_host)
    _split_custom_options(values.get("sagemaker_mpi_custom_mpi_options", ""))
    _parse_ringleader_keys(values, {})
    own = values.get(PROCESSES_PER_HOST_KEY)
    if own is not None and not isinstance(own, dict):
        hp.as_positive_int(PROCESSES_PER_HOST_KEY, own)


def _job_topology(topology: Topology, values: Mapping[str, Any]) -> tuple[str, Topology]:
    """The distribution, and the hosts it runs on: with instance groups, its groups' hosts,
    whose first host leads."""
    mpi_enabled = hp.as_bool("sagemaker_mpi_enabled", values.get("sagemaker_mpi_enabled", False))
    distribution = _distribution(mpi_enabled, values)
    topology.check_groups_cover_hosts()
    if distribution != NO_DISTRIBUTION:
        topology = _distribution_topology(topology, values)
    return distribution, topology


def _command(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(part, str) and part for part in value)
    ):
        raise ConfigError(
            COMMAND_KEY, f"expected a non-empty list of non-empty strings, got {value!r}"
        )
    return tuple(value)


def _distribution_topology(topology: Topology, values: Mapping[str, Any]) -> Topology:
    """Heterogeneous clusters: the distributed job runs on the hosts of these groups."""
    field = DISTRIBUTION_GROUPS_KEY
    names = values.get(field)
    if names is None:
        return topology
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(field, f"expected a list of instance group names, got {names!r}")
    if not topology.instance_groups:
        raise ConfigError(field, "set, but resourceconfig.json has no instance_groups")
    return topology.with_distribution_groups(field, tuple(names))


def _own_processes_per_host(topology: Topology, value: Any) -> int | None:
    """ringleader_processes_per_host: a number, or {instance group: number} for
    heterogeneous clusters, where the distribution's groups must agree."""
    field = PROCESSES_PER_HOST_KEY
    if value is None:
        return None
    if not isinstance(value, dict):
        return hp.as_positive_int(field, value)
    counts = {str(name): hp.as_positive_int(field, count) for name, count in value.items()}
    groups = [g.name for g in topology.instance_groups if set(g.hosts) & set(topology.participants)]
    missing = [name for name in groups if name not in counts]
    if not groups or missing:
        raise ConfigError(field, f"no count for the distribution's instance group(s) {missing}")
    chosen = {name: counts[name] for name in groups}
    if len(set(chosen.values())) > 1:
        raise ConfigError(
            field,
            f"the distribution's instance groups disagree: {chosen}; every host of the "
            "distribution must run the same number of processes",
        )
    return chosen[groups[0]]


def _distribution(mpi_enabled: bool, values: Mapping[str, Any]) -> str:
    enabled = [
        key
        for key in DISTRIBUTION_KEYS
        if (
            mpi_enabled
            if key == "sagemaker_mpi_enabled"
            else hp.as_bool(key, values.get(key, False))
        )
    ]
    if len(enabled) > 1:
        first, second = enabled[-1], enabled[0]  # the more specific one is named
        raise ConfigError(
            first,
            f"true together with {second}: choose one distribution "
            f"({', '.join(sorted(DISTRIBUTION_KEYS.values()))})",
        )
    return DISTRIBUTION_KEYS[enabled[0]] if enabled else NO_DISTRIBUTION


def _split_custom_options(value: Any) -> tuple[str, ...]:
    field_name = "sagemaker_mpi_custom_mpi_options"
    if value is None:
        return ()
    if not isinstance(value, str):
        raise ConfigError(field_name, f"expected a string of mpirun options, got {value!r}")
    try:
        return tuple(shlex.split(value))
    except ValueError as error:
        raise ConfigError(field_name, f"cannot split {value!r}: {error}") from None


def _parse_ringleader_keys(
    values: Mapping[str, Any], environ: Mapping[str, str]
) -> tuple[Timeouts, dict[str, dict[str, Any]]]:
    """The timeouts, and the other settings by the part of JobConfig they belong to."""
    known = {
        **TIMEOUT_KEYS,
        **_SETTING_KEYS,
        **dict.fromkeys(horovod.KEYS),
        PROCESSES_PER_HOST_KEY: None,
        COMMAND_KEY: None,
    }
    unknown = sorted(
        key for key in values if key.startswith(RINGLEADER_PREFIX) and key not in known
    )
    if unknown:
        raise ConfigError(unknown[0], f"unknown ringleader setting; known ones are {sorted(known)}")
    timeouts = parse_timeouts(values)
    settings: dict[str, dict[str, Any]] = {
        "job": {},
        "mpi": {},
        "spawn": {},
        "output": {},
        "restart": {},
        "health": {},
        "progress": {},
    }
    for key, (part, target, parse) in _SETTING_KEYS.items():
        if key in values:
            settings[part][target] = parse(key, values[key])
    output = settings["output"]
    if "metric_definitions" not in output and METRIC_DEFINITIONS_ENV in environ:
        output["metric_definitions"] = parse_definitions(
            METRIC_DEFINITIONS_ENV, environ[METRIC_DEFINITIONS_ENV]
        )
    _check_step_metric(settings["progress"].get("step_metric"), output.get("metric_definitions"))
    return timeouts, settings


def _check_step_metric(name: str | None, definitions: Sequence[MetricDefinition] | None) -> None:
    """ringleader_step_metric must name one of the job's metric definitions."""
    if name is None:
        return
    known = [definition.name for definition in definitions or ()]
    if name not in known:
        defined = ", ".join(repr(each) for each in known) or "none"
        raise ConfigError(
            "ringleader_step_metric",
            f"no metric definition is named {name!r} (the job's: {defined})",
        )


ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")


def _code_source(submit_directory: Any) -> tuple[str, str | None]:
    """(code directory, sourcedir tarball to extract into it or None)."""
    if submit_directory is None or submit_directory == "":
        return DEFAULT_CODE_DIR, None
    if not isinstance(submit_directory, str):
        raise ConfigError(
            "sagemaker_submit_directory", f"expected a path, got {submit_directory!r}"
        )
    if submit_directory.startswith("s3://"):
        return DEFAULT_CODE_DIR, submit_directory
    path = submit_directory.removeprefix("file://")
    if "://" in path:
        raise ConfigError(
            "sagemaker_submit_directory",
            f"{submit_directory!r}: expected an s3:// sourcedir tarball or a local path",
        )
    if path.endswith(ARCHIVE_SUFFIXES):
        return DEFAULT_CODE_DIR, path
    return path, None


@dataclass(frozen=True)
class ConfigFiles:
    """Where SageMaker puts its configuration; tests point this at a temporary directory."""

    config_dir: Path = paths.CONFIG_DIR
    image_dir: Path = IMAGE_DIR  # what `ringleader image setup` recorded
    # SDK v3's jobs (config/sdk3.py): its hyperparameters as a v2 estimator's.
    translate: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None

    def raw_hyperparameters(self) -> dict[str, Any]:
        """hyperparameters.json's values, undecoded ({} when there is none); for SDK v3's
        jobs, with the program, its code and Ringleader(...)'s fields."""
        raw = read_json_object(self.hyperparameters, "hyperparameters.json") or {}
        return raw if self.translate is None else self.translate(raw)

    @property
    def resource_config(self) -> Path:
        return self.config_dir / "resourceconfig.json"

    @property
    def hyperparameters(self) -> Path:
        return self.config_dir / "hyperparameters.json"

    @property
    def input_data_config(self) -> Path:
        return self.config_dir / "inputdataconfig.json"

    def read_resource_config(self) -> dict[str, Any] | None:
        """resourceconfig.json's object (None when there is none), read once per process:
        the host list, the error report's leader and SM_RESOURCE_CONFIG all come from it."""
        outcome = self._resource_config
        if isinstance(outcome, ConfigError):
            raise outcome
        return None if outcome is None else dict(outcome)

    def image_settings(self) -> ImageSettings | None:
        """The image's settings (None: not prepared by `image setup`), read once per process."""
        outcome = self._image_settings
        if isinstance(outcome, ConfigError):
            raise outcome
        return outcome

    @functools.cached_property
    def _image_settings(self) -> ImageSettings | ConfigError | None:
        try:
            return load_image_settings(self.image_dir)
        except ConfigError as error:
            return error

    @functools.cached_property
    def _resource_config(self) -> dict[str, Any] | ConfigError | None:
        try:
            return read_json_object(self.resource_config, "resourceconfig.json")
        except ConfigError as error:
            return error


def read_json_object(path: Path, field_name: str) -> dict[str, Any] | None:
    """The JSON object in `path`, or None when the file does not exist."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ConfigError(field_name, f"cannot read {path}: {error}") from None
    try:
        value = parse_json(text)
    except ValueError as error:
        raise ConfigError(field_name, f"{path} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise ConfigError(field_name, f"{path} must hold a JSON object, got {type(value).__name__}")
    return value


def load_topology(environ: Mapping[str, str], files: ConfigFiles) -> Topology:
    """From Slurm's variables when `ringleader slurm` started this host, else SageMaker's."""
    if uses_slurm(environ):
        return slurm_topology(environ)
    resource_config = None
    if "SM_HOSTS" not in environ:
        resource_config = files.read_resource_config()
    return parse_topology(environ, resource_config)


def load_job_config(
    topology: Topology, environ: Mapping[str, str], files: ConfigFiles
) -> JobConfig:
    config = parse_job_config(topology, files.raw_hyperparameters(), environ)
    image = files.image_settings()
    if image is not None:
        config = dataclasses.replace(
            config, source=dataclasses.replace(config.source, python=image.python)
        )
    # An archive is checked once extracted (ringleader.source.usercode.prepare).
    if (
        not (source := config.source).command
        and source.code_archive is None
        and source.module is None
        and not source.program_path.is_file()
    ):
        raise ConfigError(
            "sagemaker_program",
            f"{source.program!r} not found in the code directory {source.code_dir}",
        )
    return config


@dataclass(frozen=True)
class ReportingSettings:
    """What error reporting needs when the configuration as a whole is invalid."""

    timeouts: Timeouts = field(default_factory=Timeouts)
    control_port: int = DEFAULT_CONTROL_PORT
    leader: str | None = None  # the job's leader, as the main path would choose it


def reporting_settings(files: ConfigFiles, topology: Topology | None = None) -> ReportingSettings:
    """The user's timeouts and control port, each where it is valid, else its default: a
    configuration error elsewhere must not make its own report ignore them. With the host
    list, the job's leader: the first host of the distribution's instance groups where they
    can be read (every host then reports to the host that leads the job), else the first
    host."""
    try:
        values = hp.decode_all(files.raw_hyperparameters())
    except ConfigError:
        values = {}
    port = DEFAULT_CONTROL_PORT
    with contextlib.suppress(ConfigError, KeyError):
        port = hp.as_port("ringleader_control_port", values["ringleader_control_port"])
    leader = None
    if topology is not None:
        leader = topology.leader
        with contextlib.suppress(ConfigError):
            leader = _job_topology(topology, values)[1].leader
    return ReportingSettings(parse_timeouts(values, lenient=True), port, leader)
