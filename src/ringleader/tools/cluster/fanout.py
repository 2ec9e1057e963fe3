"""`ringleader cluster exec` and `ringleader cluster sync`: one command on every host at once,
output tagged by host, a table of what each host did, non-zero when any host failed."""

import concurrent.futures
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO

from ringleader.core.exitcodes import first_failure
from ringleader.output.console import LinePrinter
from ringleader.tools.cluster.hostfile import ClusterHost
from ringleader.tools.cluster.ssh import SshOptions

PROGRESS_EVERY = 2.0  # seconds between a host's progress lines during a sync
_PERCENT = re.compile(r"(\d+)%")


@dataclass(frozen=True)
class HostResult:
    host: ClusterHost
    exit_code: int
    seconds: float
    detail: str = ""


def overall_exit_code(results: Sequence[HostResult]) -> int:
    """0 when every host succeeded, else the first failing host's code (in hostfile order)."""
    return first_failure(result.exit_code for result in results)


def result_table(results: Sequence[HostResult]) -> list[str]:
    width = max(len(result.host.address) for result in results)
    lines = [f"{'host':<{width}}  exit  seconds  detail"]
    for result in results:
        lines.append(
            f"{result.host.address:<{width}}  {result.exit_code:>4}  {result.seconds:>7.1f}  "
            f"{result.detail}"
        )
    return lines


class Fanout:
    def __init__(self, hosts: Sequence[ClusterHost], ssh: SshOptions, stream: IO[str]) -> None:
        self.hosts, self.ssh = hosts, ssh
        self._out = LinePrinter(stream)

    def say(self, text: str) -> None:
        self._out.line(text)

    def each(self, work: Callable[[ClusterHost], HostResult]) -> list[HostResult]:
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(32, len(self.hosts))) as pool:
            results = list(pool.map(work, self.hosts))
        for line in result_table(results):
            self.say(line)
        return results

    def _stream_lines(
        self, argv: Sequence[str], on_line: Callable[[str], None], timeout: float | None
    ) -> int:
        """Run `argv`, each output line (\\r or \\n ended) to `on_line`; its exit code."""
        process = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        timer = None
        if timeout is not None:
            timer = threading.Timer(timeout, process.kill)
            timer.daemon = True
            timer.start()
        assert process.stdout is not None
        pending = b""
        while chunk := os.read(process.stdout.fileno(), 65536):
            pending += chunk
            *lines, pending = re.split(rb"[\r\n]", pending)
            for line in lines:
                if line.strip():
                    on_line(line.decode(errors="replace"))
        if pending.strip():
            on_line(pending.decode(errors="replace"))
        code = process.wait()
        if timer is not None:
            timer.cancel()
        return code

    def exec(self, command: Sequence[str], timeout: float | None) -> list[HostResult]:
        def work(host: ClusterHost) -> HostResult:
            started = time.monotonic()
            last: list[str] = []

            def show(line: str) -> None:
                last[:] = [line]
                self.say(f"[{host.address}] {line}")

            code = self._stream_lines(self.ssh.command(host.address, command), show, timeout)
            detail = "" if code == 0 else (last[0][:80] if last else "")
            return HostResult(host, code, time.monotonic() - started, detail)

        return self.each(work)

    def sync(
        self, source: str, destination: str, timeout: float | None, bwlimit: str | None = None
    ) -> list[HostResult]:
        """rsync over ssh (only what is missing or changed is sent; a re-run resumes), or from
        s3:// on each host with its own credentials. `bwlimit` caps each host's rsync."""

        def work(host: ClusterHost) -> HostResult:
            started = time.monotonic()
            if source.startswith("s3://"):
                argv = self.ssh.python(
                    host.address, ["-m", "ringleader.tools.cluster.s3sync", source, destination]
                )
            else:
                argv = rsync_argv(self.ssh, source, host.address, destination, bwlimit)
            shown = [0.0]
            summary: list[str] = []

            def progress(line: str) -> None:
                now = time.monotonic()
                if line.startswith(("sent ", "total size", "Number of", "rsync", "copied ")):
                    summary.append(line.strip())
                if _PERCENT.search(line) and now - shown[0] < PROGRESS_EVERY:
                    return
                shown[0] = now
                self.say(f"[{host.address}] {line.strip()}")

            code = self._stream_lines(argv, progress, timeout)
            detail = summary[-1] if summary else ""
            return HostResult(host, code, time.monotonic() - started, detail[:100])

        return self.each(work)


def rsync_argv(
    ssh: SshOptions, source: str, address: str, destination: str, bwlimit: str | None = None
) -> list[str]:
    """A directory's contents (trailing slash) into `destination`, created if missing;
    --partial keeps half-sent files so an interrupted sync resumes."""
    src = source if source.endswith("/") else source + "/"
    limit = [f"--bwlimit={bwlimit}"] if bwlimit else []
    return [
        "rsync",
        *limit,
        "--archive",
        "--partial",
        "--mkpath",
        "--info=progress2,stats1",
        "--no-inc-recursive",
        "-e",
        ssh.rsync_shell(),
        src,
        f"{address}:{destination}",
    ]
