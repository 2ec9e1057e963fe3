"""Runs a planned local job with the Docker SDK: network, containers, logs, results, cleanup."""

import concurrent.futures
import contextlib
import datetime
import json
import os
import queue
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import docker
import docker.errors

from ringleader.config.timeouts import DEFAULTS, LEADER_TIMEOUT_KEY
from ringleader.core import exitcodes
from ringleader.core.runfile import RUN_FILE, RunInfo, write_run_file
from ringleader.output.console import LinePrinter
from ringleader.output.lines import LineSplitter
from ringleader.tools.local.data import HostData, cache_root, fetch_s3_channel
from ringleader.tools.local.errors import UsageError
from ringleader.tools.local.options import (
    available_gpus,
    gpu_plan,
    input_data_config,
    parse_size,
    resource_warnings,
)
from ringleader.tools.local.plan import (
    YIELD_OPTION,
    HostPlan,
    LocalJobSpec,
    host_names,
    job_id,
    leader_host,
    output_uri_inside,
    oversubscribed,
    plan_hosts,
    shared_machine_leader_timeout,
    validate,
)
from ringleader.wire.auth import new_secret

STOP_TIMEOUT_MARGIN = 15  # seconds docker waits after our grace period before SIGKILL
# After the containers exit, their logs are read to the end for as long as lines keep coming;
# a stream that brings nothing for this long is given up.
LOG_STALL_SECONDS = 30
_LOG_CHECK_SECONDS = 0.5
# The job's exit code when a host's exit could not be learned (Docker API error while waiting)
# and the leader did not already exit with a non-zero code of its own.
LOST_HOST_EXIT_CODE = 1


@dataclass(frozen=True)
class HostResult:
    name: str
    exit_code: int | None  # None: the host was never started, or `error` says why not known
    seconds: float
    started_at: float = 0.0  # wall clock (time.time()) just before `docker start`
    finished_at: float = 0.0  # wall clock of the container's exit, as Docker recorded it
    error: str | None = None  # waiting for the container failed (a Docker API error)


@dataclass(frozen=True)
class LocalJobResult:
    job_id: str
    exit_code: int
    hosts: tuple[HostResult, ...]
    output_dir: Path


class LocalJob:
    def __init__(self, spec: LocalJobSpec, out: TextIO, client: Any = None) -> None:
        validate(spec)
        self.spec = spec
        self.job_id = job_id()
        self._client = client or docker.from_env()
        self._print = LinePrinter(out)
        names = host_names(spec.hosts, spec.random_suffix)
        cpus = os.cpu_count() or 1
        shape = f"{spec.hosts} host(s) x {spec.processes_per_host or 1} rank(s) on {cpus} core(s)"
        if oversubscribed(spec, cpus) and "mpi_yield_when_idle" not in spec.mpi_options:
            self._note(f"{shape}: ranks yield while they wait ({YIELD_OPTION})")
        if leader_timeout := shared_machine_leader_timeout(spec, cpus):
            self._note(
                f"{shape}: {LEADER_TIMEOUT_KEY} {leader_timeout} s (fake hosts crowding one "
                "machine can starve each other's pulses for tens of seconds; a frozen host is "
                "named after 3 x that; --setting leader_timeout=SECONDS to choose)"
            )
        memory = parse_size("--memory", spec.memory) if spec.memory else None
        machine_memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        for warning in resource_warnings(spec.hosts, spec.cpus, memory, cpus, machine_memory):
            self._note(f"warning: {warning}")
        self.hosts = plan_hosts(spec, self.job_id, names, cpus, new_secret())
        self._width = max(len(name) for name in names)
        self._containers: dict[str, str] = {}  # host -> container id
        self._started_at: dict[str, float] = {}
        self._started_wall: dict[str, float] = {}
        self._log_streams: list[threading.Thread] = []
        self._logs_given_up = threading.Event()  # a stalled log stream prints no more
        self._network: Any = None
        self._config_root = Path(tempfile.mkdtemp(prefix=f"{self.job_id}-config-"))
        self._data: dict[str, HostData] = {}
        self._gpu_plan = gpu_plan(spec.gpus, available_gpus(), spec.hosts)
        self.output_dir = spec.output_dir.resolve() / self.job_id
        self.interrupted = False  # Ctrl-C (or SIGTERM) stopped the job

    @property
    def container_ids(self) -> dict[str, str]:
        """host -> container id of every created container."""
        return dict(self._containers)

    def _note(self, text: str) -> None:
        self._print.line(text, "==> ")

    def run(self) -> LocalJobResult:
        # Signal handlers only exist in the main thread (tests run jobs in other threads).
        in_main = threading.current_thread() is threading.main_thread()
        previous = {
            signum: signal.signal(signum, _raise_interrupt)
            for signum in (signal.SIGTERM, signal.SIGINT)
            if in_main
        }
        if in_main:
            previous[signal.SIGQUIT] = signal.signal(signal.SIGQUIT, self._on_quit)
        try:
            self._check_image()
            self._prepare_data()
            self._create()
            results = self._wait_all(self._start())
            return self._finish(results)
        except KeyboardInterrupt:
            self.interrupted = True
            # A second Ctrl-C must not abandon the containers half-stopped.
            for signum in (signal.SIGTERM, signal.SIGINT):
                if signum in previous:
                    signal.signal(signum, signal.SIG_IGN)
            self._note("interrupted: stopping every host (they exit 143)")
            self._stop_all()
            results = self._wait_all(self._started_at)
            return self._finish(results)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._cleanup()

    def request_stacks(self) -> None:
        """Every rank's stacks, grouped, to the leader's output (Ctrl-\\); the job goes on."""
        leader = leader_host(self.spec, [host.name for host in self.hosts])
        container = self._containers.get(leader)
        if container is None:
            self._note("no stacks to take: the leader's container is not running yet")
            return
        self._note(f"taking every rank's stacks (SIGQUIT to {leader})")
        try:
            self._client.api.kill(container, signal="SIGQUIT")
        except docker.errors.APIError as error:
            self._note(f"could not signal {leader}: {_describe(error)}")

    def _on_quit(self, _signum: int, _frame: object) -> None:
        # Docker's API is slow and takes locks the interrupted main thread may hold.
        threading.Thread(target=self.request_stacks, daemon=True).start()

    def _check_image(self) -> None:
        try:
            self._client.images.get(self.spec.image)
        except docker.errors.ImageNotFound:
            raise UsageError(
                f"--image: {self.spec.image} is not built; run `make image` first"
            ) from None

    def _prepare_data(self) -> None:
        """Channels on this machine first: a download or a missing file fails before any
        container exists."""
        roots: dict[str, Path] = {}
        for channel in self.spec.channels:
            if channel.from_s3:
                roots[channel.name] = fetch_s3_channel(
                    channel, {**os.environ, **self.spec.env}, cache_root(), self._note
                )
            else:
                roots[channel.name] = Path(channel.source).resolve()
        for index, host in enumerate(self.hosts):
            data = HostData(self._config_root / "data" / host.name, index, len(self.hosts))
            for channel in self.spec.channels:
                data.add(channel, roots[channel.name])
            self._data[host.name] = data

    def _binds(self, host: HostPlan, config_dir: Path, output: Path) -> dict[str, Any]:
        spec = self.spec
        binds: dict[str, Any] = {
            str(config_dir): {"bind": "/opt/ml/input/config", "mode": "ro"},
            str(spec.source_dir.resolve()): {"bind": "/opt/ml/code", "mode": "ro"},
            str(output / "output"): {"bind": "/opt/ml/output", "mode": "rw"},
            str(output / "model"): {"bind": "/opt/ml/model", "mode": "rw"},
        }
        data = self._data.get(host.name)
        if data is not None and spec.channels:
            binds[str(data.directory)] = {"bind": "/opt/ml/input/data", "mode": "rw"}
            for source, inside in data.mounts.items():
                binds[source] = {"bind": inside, "mode": "ro"}
        if spec.checkpoint_dir is not None:
            checkpoints = spec.checkpoint_dir.resolve()
            if not spec.shared_checkpoints:
                checkpoints = checkpoints / host.name
            checkpoints.mkdir(parents=True, exist_ok=True)
            binds[str(checkpoints)] = {"bind": "/opt/ml/checkpoints", "mode": "rw"}
        if spec.output_uri is not None and not spec.output_uri.lower().startswith("s3://"):
            path = output_uri_inside(spec.output_uri)
            Path(path).mkdir(parents=True, exist_ok=True)
            binds[path] = {"bind": path, "mode": "rw"}
        return binds

    def _resources(self, index: int) -> dict[str, Any]:
        """Docker's host configuration for one host: shared memory, GPUs, CPU and memory."""
        spec = self.spec
        resources: dict[str, Any] = {"shm_size": parse_size("--shm-size", spec.shm_size)}
        gpus = self._gpu_plan[index]
        if isinstance(gpus, list):
            resources["device_requests"] = [
                docker.types.DeviceRequest(device_ids=gpus, capabilities=[["gpu"]])
            ]
        elif gpus is not None:
            resources["device_requests"] = [
                docker.types.DeviceRequest(count=gpus, capabilities=[["gpu"]])
            ]
        if spec.cpus is not None:
            resources["nano_cpus"] = int(spec.cpus * 1e9)
        if spec.memory is not None:
            resources["mem_limit"] = parse_size("--memory", spec.memory)
        return resources

    def _create(self) -> None:
        api = self._client.api
        network_name = f"{self.job_id}-net"
        self._note(
            f"job {self.job_id}: {len(self.hosts)} host(s) on network {network_name}, "
            f"image {self.spec.image}, output in {self.output_dir}"
        )
        self._network = self._client.networks.create(network_name, driver="bridge")
        write_run_file(self.output_dir / RUN_FILE, self._run_info())
        for host in self.hosts:
            if host.name in self.spec.absent_hosts:
                continue
            config_dir = self._write_config(host)
            output = self.output_dir / host.name
            (output / "output").mkdir(parents=True, exist_ok=True)
            (output / "model").mkdir(parents=True, exist_ok=True)
            binds = self._binds(host, config_dir, output)
            endpoint = api.create_endpoint_config(aliases=[host.name])
            container = api.create_container(
                self.spec.image,
                command=list(self.spec.command),
                entrypoint=list(self.spec.entrypoint) if self.spec.entrypoint else None,
                name=host.container_name,
                hostname=host.name,
                environment=host.environment,
                host_config=api.create_host_config(
                    binds=binds,
                    network_mode=network_name,
                    **self._resources(self.hosts.index(host)),
                ),
                networking_config=api.create_networking_config({network_name: endpoint}),
                labels={"ringleader.job": self.job_id},
            )
            self._containers[host.name] = container["Id"]

    def _run_info(self) -> RunInfo:
        """What `ringleader report --compare` needs to know of this run (core/runfile.py)."""
        spec = self.spec
        return RunInfo(
            program=spec.entry_point,
            instance_type=str(self.hosts[0].resource_config["current_instance_type"]),
            hosts=spec.hosts,
            processes_per_host=spec.processes_per_host,
            distribution=spec.distribution,
            image=spec.image,
        )

    def _write_config(self, host: HostPlan) -> Path:
        config_dir = self._config_root / host.name
        config_dir.mkdir(parents=True)
        (config_dir / "resourceconfig.json").write_text(json.dumps(host.resource_config))
        (config_dir / "hyperparameters.json").write_text(json.dumps(host.hyperparameters))
        (config_dir / "inputdataconfig.json").write_text(
            json.dumps(input_data_config(self.spec.channels))
        )
        for file_name, text in self.spec.config_overrides.get(host.name, {}).items():
            (config_dir / file_name).write_text(text)
        return config_dir

    def _start(self) -> dict[str, float]:
        self._note(f"starting {len(self._containers)} container(s) at once")

        def start(host: str) -> None:
            self._started_wall[host] = time.time()
            self._client.api.start(self._containers[host])
            self._started_at[host] = time.monotonic()
            streamer = threading.Thread(target=self._stream_logs, args=(host,), daemon=True)
            self._log_streams.append(streamer)
            streamer.start()

        self._in_parallel(start, list(self._containers))
        for data in self._data.values():
            data.start()
        return self._started_at

    def _stream_logs(self, host: str) -> None:
        prefix = f"{host:<{self._width}} | "
        for lines in _line_batches(
            self._client.api.logs(self._containers[host], stream=True, follow=True)
        ):
            if self._logs_given_up.is_set():
                return  # the job's result is being printed: nothing after it
            self._print.lines(prefix, lines)

    def _wait_all(self, started: dict[str, float]) -> dict[str, HostResult]:
        """Every started container's exit; Ctrl-C stays deliverable while waiting.

        Each waiter puts exactly one result, also when the Docker API fails (the result then
        has no exit code and names the error), so this never waits for a result that cannot
        come."""
        done: queue.Queue[HostResult] = queue.Queue()

        def wait(host: str) -> None:
            try:
                result = self._wait_one(host, started[host])
            except Exception as error:
                result = HostResult(
                    host,
                    None,
                    time.monotonic() - started[host],
                    self._started_wall.get(host, 0.0),
                    time.time(),
                    error=_describe(error),
                )
            done.put(result)

        hosts = [host for host in self._containers if host in started]
        for host in hosts:
            threading.Thread(target=wait, args=(host,), daemon=True).start()
        results: dict[str, HostResult] = {}
        while len(results) < len(hosts):
            result = done.get()
            results[result.name] = result
        return results

    def _wait_one(self, host: str, started: float) -> HostResult:
        container = self._containers[host]
        status = self._client.api.wait(container)
        code = int(status["StatusCode"])
        seconds = time.monotonic() - started
        try:
            finished = _docker_time(
                self._client.api.inspect_container(container)["State"]["FinishedAt"]
            )
        except Exception:  # only for the timeline: the exit code is what matters
            finished = time.time()
        return HostResult(host, code, seconds, self._started_wall.get(host, 0.0), finished)

    def _stop_all(self) -> None:
        grace = float(self.spec.settings.get("sigterm_grace", DEFAULTS.sigterm_grace))
        timeout = int(grace) + STOP_TIMEOUT_MARGIN

        def stop(host: str) -> None:
            with contextlib.suppress(docker.errors.APIError):
                self._client.api.stop(self._containers[host], timeout=timeout)

        self._in_parallel(stop, list(self._containers))

    def _drain_logs(self) -> None:
        """Wait for the rest of the containers' logs (a job that printed faster than Docker
        hands logs over is still being read when it ends) while lines keep arriving."""
        progress, progress_at = self._print.count, time.monotonic()
        while alive := [streamer for streamer in self._log_streams if streamer.is_alive()]:
            alive[0].join(_LOG_CHECK_SECONDS)
            if self._print.count != progress:
                progress, progress_at = self._print.count, time.monotonic()
            elif time.monotonic() - progress_at >= LOG_STALL_SECONDS:
                self._note(
                    f"warning: no log line for {LOG_STALL_SECONDS} s from "
                    f"{len(alive)} stream(s) still open; the rest of their logs is not shown"
                )
                self._logs_given_up.set()
                return

    def _finish(self, results: dict[str, HostResult]) -> LocalJobResult:
        # A stopped container's log stream still holds what Docker had not handed over yet;
        # removing the container first would cut the end of the job's output off.
        self._drain_logs()
        rows = [results.get(host.name, HostResult(host.name, None, 0.0)) for host in self.hosts]
        leader_name = leader_host(self.spec, [host.name for host in self.hosts])
        leader = next(row for row in rows if row.name == leader_name)
        lost = [row for row in rows if row.error is not None]
        # Hosts planned absent never ran; one whose wait failed has no code (and fails the job).
        started = [row.exit_code for row in rows if row.exit_code is not None or row.error]
        exit_code = exitcodes.job_exit_code(
            leader.exit_code, started, lost=LOST_HOST_EXIT_CODE, unknown_fails=True
        )
        self._note("results")
        self._print.line(f"  {'host':<{self._width}}  exit  seconds  error")
        for row in rows:
            code = "-" if row.exit_code is None else str(row.exit_code)
            self._print.line(
                f"  {row.name:<{self._width}}  {code:>4}  {row.seconds:7.1f}  "
                f"{row.error or ''}".rstrip()
            )
        for row in lost:
            self._note(
                f"error: host {row.name}: waiting for its container failed, its exit code is "
                f"unknown: {row.error}"
            )
        codes = {row.exit_code for row in rows if row.exit_code is not None}
        if len(codes) > 1:
            self._note(f"warning: hosts disagree on the exit code: {sorted(codes)}")
        failure = self.output_dir / leader_name / "output" / "failure"
        if failure.is_file():
            self._note("failure file of the leader:")
            for line in failure.read_text(errors="replace").splitlines():
                self._print.line(line, "  ")
        self._note(f"job exit code {exit_code}; outputs in {self.output_dir}")
        return LocalJobResult(self.job_id, exit_code, tuple(rows), self.output_dir)

    def _cleanup(self) -> None:
        for data in self._data.values():
            data.stop()
        if self.spec.keep and self._containers:
            self._note(
                f"kept {len(self._containers)} container(s) and network {self.job_id}-net "
                f"(--keep): docker ps -a --filter label=ringleader.job={self.job_id}; remove "
                f"them with docker rm -f $(docker ps -aq --filter label=ringleader.job="
                f"{self.job_id}) && docker network rm {self.job_id}-net && rm -r "
                f"{self._config_root}"
            )
            return

        def remove(host: str) -> None:
            with contextlib.suppress(docker.errors.APIError):
                self._client.api.remove_container(self._containers[host], force=True)

        self._in_parallel(remove, list(self._containers))
        if self._network is not None:
            with contextlib.suppress(docker.errors.APIError):
                self._network.remove()
        shutil.rmtree(self._config_root, ignore_errors=True)

    @staticmethod
    def _in_parallel(action: Callable[[str], None], hosts: list[str]) -> None:
        if not hosts:
            return
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(hosts)) as pool:
            for future in [pool.submit(action, host) for host in hosts]:
                future.result()


def _line_batches(chunks: Iterable[bytes]) -> Iterator[list[str]]:
    """Docker's log stream (chunks of bytes, lines ending in \\n) as the text lines each chunk
    completes.

    The toolkit's line splitter: a lone \\r (a progress bar's update) also ends a line, and a
    line longer than its limit is cut into pieces.
    """
    splitter = LineSplitter()
    for chunk in chunks:
        yield [line.decode(errors="replace") for line in splitter.feed(chunk)]
    yield [line.decode(errors="replace") for line in splitter.flush()]


def _describe(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _docker_time(text: str) -> float:
    """Docker's RFC 3339 time with nanoseconds, e.g. 2026-11-22T05:04:07.123456789Z."""
    whole, _, fraction = text.rstrip("Z").partition(".")
    seconds = (
        datetime.datetime.fromisoformat(whole).replace(tzinfo=datetime.timezone.utc).timestamp()
    )
    return seconds + float(f"0.{fraction or 0}")


def _raise_interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt
