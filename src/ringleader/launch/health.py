"""This host's health before an attempt (ringleader_health): free disk on the output, model and
checkpoint paths, /dev/shm's size, free memory, the job's ports this host binds, GPUs and EFA
devices where there are any, before a restart no process of the last attempt still running,
and the user's own check (ringleader_health_check). The checks run in parallel, together
bounded by ringleader_health_timeout; one that does not finish in time failed, named so.
"""

import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ringleader.config.job import (
    MULTI_WORKER_MIRRORED,
    PARAMETER_SERVER,
    TORCH_DISTRIBUTED,
    ConfigFiles,
    JobConfig,
)
from ringleader.core import paths
from ringleader.core.errors import ConfigError
from ringleader.core.health import FAILED, NOT_CHECKED, OK, CheckResult, Report
from ringleader.core.hostenvfile import read_host_env
from ringleader.core.processes import wait_ended
from ringleader.core.procfind import listening_pids, processes_carrying
from ringleader.launch.fabric import (
    SYS_CLASS_INFINIBAND,
    ec2_instance_type,
    find_efa_devices,
    known_instance_type,
)

if TYPE_CHECKING:
    import psutil

TIMEOUT_KEY = "ringleader_health_timeout"
HOOK_KEY = "ringleader_health_check"
HOOK_LINES = 5  # the last lines of the user's check kept in its result


# A check that waits (for a process, for the user's command) stops waiting this long before the
# checks' bound, so that its own finding, naming what it waited for, comes first also on a busy
# host (where ending a process and reporting can take a while): a tenth of the time left, and at
# least a second or, of a shorter time, half of it.
def _margin(left: float) -> float:
    return max(left * 0.1, min(1.0, left / 2))


# EC2 instance types with EFA devices (the largest size of each family that has them).
EFA_INSTANCE_TYPES = frozenset(
    {
        "p4d.24xlarge",
        "p4de.24xlarge",
        "p5.48xlarge",
        "p5e.48xlarge",
        "p5en.48xlarge",
        "trn1.32xlarge",
        "trn1n.32xlarge",
        "trn2.48xlarge",
        "g5.48xlarge",
        "g6e.48xlarge",
        "c5n.18xlarge",
    }
)
Check = Callable[[float], CheckResult]  # the seconds it may take -> its result


class HealthCheck(Protocol):
    """A host's checks before an attempt, with `more` of other layers' (HostChecks.run)."""

    def __call__(self, attempt: int, more: Sequence[tuple[str, Check]] = ()) -> Report: ...


@dataclass(frozen=True)
class HostChecks:
    """What this host checks before an attempt."""

    config: JobConfig
    host: str
    ml_root: Path = paths.ML_ROOT
    host_env_file: Path = paths.HOST_ENV_FILE
    proc: Path = Path("/proc")
    gpu_dir: Path = Path("/proc/driver/nvidia/gpus")
    infiniband_dir: Path = SYS_CLASS_INFINIBAND
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    def run(self, attempt: int, more: Sequence[tuple[str, Check]] = ()) -> Report:
        """Every check's result, in a fixed order; before attempt N > 0 also whether a process
        of attempt N-1 still runs; `more`: checks of other layers (the reachability probes),
        run with them; nothing with ringleader_health off. Raises ConfigError when the
        user's check cannot be run."""
        health = self.config.health
        if not health.enabled:
            return ()
        # before a restart, a port is tried once the last attempt's processes have ended: a
        # rank still ending holds its server's port (ci31: the master port, 0.1 s after the
        # launcher was killed)
        last_ended = threading.Event()
        if attempt == 0:
            last_ended.set()
        checks: list[tuple[str, Check]] = [
            *((f"free disk {path}", _disk(path, health.min_free_disk)) for path in self.paths()),
            ("/dev/shm", _shm(Path("/dev/shm"), health.min_shm)),
            ("free memory", _memory(self.proc / "meminfo", health.min_free_memory)),
            *(
                (f"port {port}", _port(port, key, last_ended))
                for port, key in job_ports(self.config, self.host)
            ),
            ("GPUs", _gpus(self.gpu_dir, self.environ.get("SM_NUM_GPUS"))),
            ("EFA", _efa(self.infiniband_dir, self._instance_type())),
        ]
        if attempt > 0:
            leftovers = _leftovers(attempt - 1, self.environ, health.timeout, last_ended)
            checks.append(("last attempt's processes", leftovers))
        if health.check:
            checks.append(("health check", _hook(health.check, self._hook_env(), self.config)))
        return run_checks([*checks, *more], health.timeout)

    def paths(self) -> list[Path]:
        """The output, model and (where there is one) checkpoint paths."""
        found = [self.ml_root / "output", self.ml_root / "model"]
        checkpoints = self.ml_root / "checkpoints"
        return [*found, checkpoints] if checkpoints.is_dir() else found

    def _instance_type(self) -> str | None:
        resource_config = None
        with contextlib.suppress(ConfigError):
            resource_config = ConfigFiles(self.ml_root / "input" / "config").read_resource_config()
        given = str((resource_config or {}).get("current_instance_type", "local"))
        return known_instance_type(given, self.environ)

    def _hook_env(self) -> dict[str, str]:
        """The ranks' environment on this host (the container's and SageMaker's variables);
        this process's before the host's preparation wrote it (`ringleader doctor`)."""
        with contextlib.suppress(OSError, ValueError, KeyError, AttributeError):
            env = read_host_env(self.host_env_file)
            if env is not None:
                return env
        return dict(self.environ)


def job_ports(config: JobConfig, host: str) -> list[tuple[int, str]]:
    """The ports this host's part of the job binds, with the setting that names each: the
    master's on torch_distributed's first host, TensorFlow's on every host of theirs, MXNet's
    scheduler on the leader."""
    ports = _distribution_ports(config, host)
    # ringleader's own control port: a job port set to it is a configuration error, which the
    # launch names (78), not a sick host
    return [(port, key) for port, key in ports if port != config.control_port]


def _distribution_ports(config: JobConfig, host: str) -> list[tuple[int, str]]:
    spawn, leader = config.spawn, config.topology.leader
    in_job = host in config.topology.participants
    ports: list[tuple[int, str]] = []
    if config.distribution == TORCH_DISTRIBUTED and host == leader:
        ports.append((spawn.master_port, "ringleader_master_port"))
    if config.distribution == PARAMETER_SERVER and in_job:
        if spawn.ps_framework != "mxnet":
            ports.append((spawn.tf_worker_port, "ringleader_tf_worker_port"))
            ports.append((spawn.tf_ps_port, "ringleader_tf_ps_port"))
        if spawn.ps_framework != "tensorflow" and host == leader:
            ports.append((spawn.mxnet_ps_port, "ringleader_mxnet_ps_port"))
    if config.distribution == MULTI_WORKER_MIRRORED and in_job:
        ports.append((spawn.tf_mirrored_port, "ringleader_tf_mirrored_port"))
    return ports


def run_checks(checks: Sequence[tuple[str, Check]], timeout: float) -> Report:
    """Each check in a thread of its own; together bounded by `timeout`."""
    deadline = time.monotonic() + timeout
    results: dict[str, CheckResult] = {}
    errors: list[ConfigError] = []
    done = threading.Condition()

    def run(name: str, check: Check) -> None:
        try:
            left = max(deadline - time.monotonic(), 0.0)
            result = check(left - _margin(left))
        except ConfigError as error:
            errors.append(error)
            result = CheckResult(name, FAILED, str(error))
        except Exception as error:  # a check that breaks fails, named; the others go on
            result = CheckResult(name, FAILED, f"the check itself failed: {error!r}")
        with done:
            results[name] = CheckResult(name, result.status, result.detail, result.link)
            done.notify_all()

    for name, check in checks:
        threading.Thread(target=run, args=(name, check), name=f"health {name}", daemon=True).start()
    with done:
        done.wait_for(lambda: len(results) == len(checks), timeout=timeout)
        found = dict(results)
    if errors:
        raise errors[0]
    late = f"did not finish within {timeout:g} s ({TIMEOUT_KEY})"
    return tuple(found.get(name) or CheckResult(name, FAILED, late) for name, _ in checks)


def _size(count: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count / (1 << 20):.2f} MiB"


def _at_least(found: float, wanted: int, key: str, what: str) -> CheckResult:
    detail = f"{_size(found)} {what}, at least {_size(wanted)} wanted ({key})"
    return CheckResult("", OK if found >= wanted else FAILED, detail)


def _disk(path: Path, wanted: int) -> Check:
    def check(_seconds: float) -> CheckResult:
        usage = os.statvfs(_existing(path))
        free = usage.f_bavail * usage.f_frsize
        return _at_least(free, wanted, "ringleader_min_free_disk", "free")

    return check


def _existing(path: Path) -> Path:
    """`path`, or its nearest parent that exists (where it will be made)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _shm(path: Path, wanted: int) -> Check:
    def check(_seconds: float) -> CheckResult:
        try:
            usage = os.statvfs(path)
        except FileNotFoundError:
            return CheckResult("", FAILED, f"{path} does not exist (ringleader_min_shm)")
        return _at_least(usage.f_blocks * usage.f_frsize, wanted, "ringleader_min_shm", "in all")

    return check


def _memory(meminfo: Path, wanted: int) -> Check:
    def check(_seconds: float) -> CheckResult:
        for line in meminfo.read_text().splitlines():
            name, _, value = line.partition(":")
            if name == "MemAvailable":
                available = int(value.split()[0]) * 1024
                key = "ringleader_min_free_memory"
                return _at_least(available, wanted, key, "available")
        return CheckResult("", NOT_CHECKED, f"{meminfo} has no MemAvailable")

    return check


def _port(port: int, key: str, after: threading.Event) -> Check:
    """The port can be bound, tried once `after` is set (or its time is up)."""

    def check(seconds: float) -> CheckResult:
        after.wait(seconds)
        taken = port_taken(port)
        if taken is not None:
            return CheckResult("", FAILED, f"cannot be bound ({key}): {taken}")
        return CheckResult("", OK, f"free ({key})")

    return check


def port_taken(port: int) -> str | None:
    """None when this host can bind `port`; else why not, naming the process that listens on
    it when this host can tell."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # what the job's servers set too: a closed connection's TIME_WAIT is no holder
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError as error:
            return _holder(port, error)
    return None


def _holder(port: int, error: OSError) -> str:
    """Who listens on the port, when this host can tell."""
    import psutil  # only when a port is held: the entry point starts without it

    for pid in listening_pids(port)[:1]:
        with contextlib.suppress(psutil.Error):
            return f"held by {_described(psutil.Process(pid))}"
    return error.strerror or str(error)


def _described(process: "psutil.Process") -> str:
    import psutil

    try:
        return f"pid {process.pid} ({' '.join(process.cmdline())[:120] or process.name()})"
    except psutil.Error:
        return f"pid {process.pid}"


def _gpus(gpu_dir: Path, expected: str | None) -> Check:
    def check(_seconds: float) -> CheckResult:
        present = len(list(gpu_dir.glob("*"))) if gpu_dir.is_dir() else 0
        if present == 0:
            return CheckResult("", NOT_CHECKED, "no GPU on this host")
        if expected and expected.isdigit() and present < int(expected):
            return CheckResult("", FAILED, f"{present} visible, {expected} expected (SM_NUM_GPUS)")
        return CheckResult("", OK, f"{present} visible")

    return check


def _efa(infiniband_dir: Path, instance_type: str | None) -> Check:
    def check(_seconds: float) -> CheckResult:
        if ec2_instance_type(instance_type) not in EFA_INSTANCE_TYPES:
            kind = instance_type or "not known"
            return CheckResult("", NOT_CHECKED, f"instance type {kind}: no EFA expected")
        devices = find_efa_devices(infiniband_dir)
        if not devices:
            return CheckResult("", FAILED, f"none in {infiniband_dir}; {instance_type} has EFA")
        return CheckResult("", OK, f"{len(devices)} device(s): {', '.join(devices)}")

    return check


def _leftovers(
    attempt: int, environ: Mapping[str, str], timeout: float, ended: threading.Event
) -> Check:
    """No process of `attempt` (RINGLEADER_ATTEMPT, and this job's mark on a shared machine)
    runs any more: each is waited for, as long as the checks may take, then named; `ended` is
    set once that is known either way."""
    carried = {paths.ATTEMPT_VARIABLE: str(attempt)}
    mark = environ.get(paths.JOB_MARK_VARIABLE)
    if mark is not None:
        carried[paths.JOB_MARK_VARIABLE] = mark

    def check(seconds: float) -> CheckResult:
        try:
            return waited(seconds)
        finally:
            ended.set()

    def waited(seconds: float) -> CheckResult:
        left = processes_carrying(carried)
        if not left:
            return CheckResult("", OK, f"none of attempt {attempt} left")
        alive = wait_ended(left, seconds)
        if not alive:
            return CheckResult("", OK, f"{len(left)} of attempt {attempt} ended meanwhile")
        named = ", ".join(_described(process) for process in alive[:3])
        waited = f"still running at the end of {TIMEOUT_KEY} ({timeout:g} s)"
        return CheckResult("", FAILED, f"{len(alive)} of attempt {attempt} {waited}: {named}")

    return check


def _hook(argv: tuple[str, ...], env: Mapping[str, str], config: JobConfig) -> Check:
    timeout = config.health.timeout

    def check(seconds: float) -> CheckResult:
        if not Path(config.source.code_dir).is_dir():
            raise ConfigError(
                HOOK_KEY, f"it runs in {config.source.code_dir}, which does not exist"
            )
        try:
            done = subprocess.run(
                argv,
                env=dict(env),
                cwd=config.source.code_dir,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=seconds,
                check=False,
            )
        except FileNotFoundError:
            raise ConfigError(
                HOOK_KEY,
                f"{argv[0]!r} was not found (it runs in {config.source.code_dir}, found on PATH "
                "as a shell would find it: a script there is ./script)",
            ) from None
        except PermissionError:
            raise ConfigError(HOOK_KEY, f"{argv[0]!r} is not executable") from None
        except subprocess.TimeoutExpired:
            late = f"{argv[0]} did not end within {TIMEOUT_KEY} ({timeout:g} s)"
            return CheckResult("", FAILED, late)
        lines = done.stdout.decode(errors="replace").strip().splitlines()[-HOOK_LINES:]
        said = f": {' | '.join(lines)}" if lines else ""
        if done.returncode != 0:
            return CheckResult("", FAILED, f"{argv[0]} exited with code {done.returncode}{said}")
        return CheckResult("", OK, f"{argv[0]} exited 0{said}")

    return check
