"""A local job's data channels on this machine: s3:// channels downloaded once into a cache,
channels split by host staged per host, and Pipe-mode channels streamed into FIFOs.

Every host gets a data directory mounted at /opt/ml/input/data; File-mode channels are mounted
read-only inside it at NAME, Pipe-mode channels appear in it as the FIFOs NAME_0, NAME_1, ...
(one per epoch: the next one exists before the current one ends, as SageMaker's Pipe mode).
"""

import contextlib
import errno
import hashlib
import os
import shutil
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ringleader.tools.local.errors import UsageError
from ringleader.tools.local.options import BY_HOST, PIPE_MODE, Channel, shard

Note = Callable[[str], None]
PIPE_CHUNK = 1 << 20


def cache_root(environ: Mapping[str, str] = os.environ) -> Path:
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ringleader" / "channels"


def fetch_s3_channel(channel: Channel, env: Mapping[str, str], cache: Path, note: Note) -> Path:
    """The channel's objects in the cache (only what is missing is downloaded), with progress.

    The endpoint and credentials are this machine's, overridden by the job's --env values."""
    from ringleader.aws.client import make_client
    from ringleader.aws.download import download_prefix
    from ringleader.aws.uri import S3UriError, split_s3_uri

    try:
        bucket, prefix = split_s3_uri(channel.source)
    except S3UriError as error:
        raise UsageError(f"--input {channel.name}: {error}") from None
    digest = hashlib.sha256(channel.source.encode()).hexdigest()[:16]
    destination = cache / f"{bucket}-{digest}"
    destination.mkdir(parents=True, exist_ok=True)
    step = [0]

    def show(done: int, total: int, key: str) -> None:
        if done == total or done * 10 // total > step[0]:
            step[0] = done * 10 // total
            note(f"channel {channel.name}: {done}/{total} objects downloaded ({key})")

    with _environment(env):
        client = make_client(
            "s3",
            endpoint_url=env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"),
            new_session=True,
        )
        copied, total = download_prefix(client, bucket, prefix, destination, show)
    note(
        f"channel {channel.name}: {channel.source} -> {destination} "
        f"({copied} downloaded, {total - copied} already cached)"
    )
    if total == 0:
        raise UsageError(f"--input {channel.name}: no objects under {channel.source}")
    return destination


@contextlib.contextmanager
def _environment(env: Mapping[str, str]):  # type: ignore[no-untyped-def]
    """boto3 reads credentials from the environment: the job's --env values, for this call."""
    names = [name for name in env if name.startswith("AWS_")]
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update({name: env[name] for name in names})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def channel_files(root: Path) -> list[str]:
    """The channel's files relative to its root (a single file is a channel of one)."""
    if root.is_file():
        return [root.name]
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())


def stage_shard(root: Path, files: Sequence[str], destination: Path) -> None:
    """Hard links to this host's files (a copy where links cannot be made)."""
    for name in files:
        source = root / name if root.is_dir() else root
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)


class HostData:
    """One host's /opt/ml/input/data: the directory, its mounts and its Pipe-mode feeders."""

    def __init__(self, base: Path, host_index: int, hosts: int) -> None:
        self._base = base
        self.directory = base / "input-data"
        self.directory.mkdir(parents=True, exist_ok=True)
        self._index, self._hosts = host_index, hosts
        self.mounts: dict[str, str] = {}  # path on this machine -> channel directory inside
        self._feeders: list[PipeFeeder] = []

    def add(self, channel: Channel, root: Path) -> None:
        files = channel_files(root)
        if channel.sharding == BY_HOST:
            files = shard(files, self._hosts, self._index)
            staged = self._base / f"shard-{channel.name}"
            stage_shard(root, files, staged)
            root = staged
        if channel.mode == PIPE_MODE:
            sources = [root / name if root.is_dir() else root for name in files]
            self._feeders.append(PipeFeeder(self.directory, channel.name, sources))
        else:
            self.mounts[str(root)] = f"/opt/ml/input/data/{channel.name}"

    def start(self) -> None:
        for feeder in self._feeders:
            feeder.start()

    def stop(self) -> None:
        for feeder in self._feeders:
            feeder.stop()


class PipeFeeder:
    """Writes a channel's files, in order, into NAME_0, then NAME_1, ... for each epoch the
    script reads. A writer waits for its reader without a timeout of its own: the job's end
    (stop) releases it."""

    def __init__(self, directory: Path, name: str, sources: Sequence[Path]) -> None:
        self._directory, self._name, self._sources = directory, name, list(sources)
        self._stopped = threading.Event()
        self._epoch = 0
        os.mkfifo(self._fifo(0), 0o644)
        self._thread = threading.Thread(target=self._feed, daemon=True)

    def _fifo(self, epoch: int) -> Path:
        return self._directory / f"{self._name}_{epoch}"

    def start(self) -> None:
        self._thread.start()

    def _feed(self) -> None:
        while not self._stopped.is_set():
            fifo = self._fifo(self._epoch)
            try:
                with open(fifo, "wb") as pipe:  # blocks until the script opens it
                    if self._stopped.is_set():
                        return
                    # The next epoch's FIFO exists before this one ends, for a reader that
                    # moves on at end of file.
                    os.mkfifo(self._fifo(self._epoch + 1), 0o644)
                    for source in self._sources:
                        with open(source, "rb") as data:
                            while chunk := data.read(PIPE_CHUNK):
                                pipe.write(chunk)
            except BrokenPipeError:
                pass  # the reader stopped reading: its choice, the next epoch is ready
            except OSError as error:
                if error.errno != errno.ENXIO:
                    raise
            self._epoch += 1

    def stop(self) -> None:
        """Release a writer waiting for a reader that will never come (the job ended). The
        read end stays open until the writer has seen the stop: a writer that reaches its
        open() only after a reader came and went would wait there for good (ci22: the thread,
        just started on a busy machine, was still alive after the stop)."""
        self._stopped.set()
        reader = None
        with contextlib.suppress(OSError):
            reader = os.open(self._fifo(self._epoch), os.O_RDONLY | os.O_NONBLOCK)
        try:
            self._thread.join(timeout=5)
        finally:
            if reader is not None:
                os.close(reader)
