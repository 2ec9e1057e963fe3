"""What issue 26's security costs: startup before and after, and the leader's memory with idle
connections to its control port.

Two images of ringleader: ringleader:before26, built from commit d3d5251 (the last commit before
issue 26's work: a plain hello on the control channel, one root ssh key baked into the image),
and ringleader:latest (a join/welcome handshake with HMAC proofs of the job's secret; per-job
ssh keys: every host makes an ed25519 host key with ssh-keygen before its sshd starts, the
leader makes the job's client key pair, and the keys travel in the handshake). Build the before
image from a worktree of d3d5251 with `IMAGE=ringleader:before26 scripts/setup.sh image`.

Startup: the mpi probe job of bench/startup.py (bench/probe/probe.py: one second of work per
rank) on --hosts hosts x --per-host ranks, measured by bench/startup.py's `run`:
  startup   first `docker start` -> user code running on every rank
  phases    first `docker start` -> the last host reaching each launcher phase (job.json)
Each cell is the median of --rounds runs; the two images alternate round by round (who goes
first alternates), and every run is listed below the tables.

This checkout's `ringleader local` hands every job a secret (RINGLEADER_JOB_SECRET) and its
name (TRAINING_JOB_NAME) in each container's environment; the before image ignores both and
runs the job as it always did, so both images run from the same launcher.

Memory: for each image, a long 3 x 2 mpi job (examples/mpi_allreduce.py, rounds=20 sleep=1, as
tests/container/test_security.py's long_job); once every rank runs, the leader entry point's
VmRSS and thread count (/proc/<pid>/status), then --idle TCP connections from this host to the
leader container's control port (29100) that send nothing, 2 s later VmRSS and threads again
and how many of those connections the leader has closed; then they are closed and the job runs
to its end (its exit codes are printed).

Usage: .venv/bin/python bench/security.py [--hosts 3 16] [--per-host 2] [--rounds 3]
       [--host-rounds 16=2] [--images ringleader:before26 ringleader:latest] [--idle 300]
       [--skip-memory] [--skip-startup]
"""

import argparse
import contextlib
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
from startup import Measurement, fmt, median_of, run

from ringleader.core import timeline as phases
from ringleader.tools.local.plan import LocalJobSpec, host_names, leader_host
from ringleader.tools.local.run import LocalJob, LocalJobResult

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.container.conftest import Capture  # the job output sink the container tests wait on

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CONTROL_PORT = 29100
# The phases where the handshake and the keys could show: sshd ready (the host key is made just
# before sshd starts), connected (the join/welcome), ssh checked (the host key pinned first),
# all workers up, the launcher started (the leader's client key is in place), a rank running.
PHASES = (
    phases.SSHD,
    phases.CONNECTED,
    phases.SSH_CHECKED,
    phases.WORKERS_UP,
    phases.LAUNCHED,
    phases.FIRST_RANK,
)
SHORT = {
    phases.SSHD: "sshd",
    phases.CONNECTED: "connected",
    phases.SSH_CHECKED: "ssh ok",
    phases.WORKERS_UP: "workers up",
    phases.LAUNCHED: "launched",
    phases.FIRST_RANK: "1st rank",
}

# Run by the image's Python inside the leader's container: the entry point's process (PID 1's
# child whose command line names ringleader) with its pid, VmRSS in KiB and thread count.
LEADER_STATUS = r"""
import os
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{pid}/stat").read()
        status = open(f"/proc/{pid}/status").read()
        cmdline = open(f"/proc/{pid}/cmdline").read()
    except OSError:
        continue
    if stat.rsplit(")", 1)[1].split()[1] == "1" and "ringleader" in stat + cmdline:
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        print(pid, fields["VmRSS"].split()[0], fields["Threads"].strip())
"""


def progress(text: str) -> None:
    print(f"... {time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def short_image(image: str) -> str:
    return image.split(":", 1)[-1]


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def ratio(after: float | None, before: float | None) -> str:
    if after is None or before is None or before <= 0:
        return "n/a"
    return f"{after / before:.2f}x"


def image_revision(client: docker.DockerClient, image: str) -> str:
    try:
        found = client.images.get(image)
    except docker.errors.ImageNotFound:
        sys.exit(f"image {image} is not built (see this script's docstring)")
    created = str(found.attrs.get("Created", ""))[:19].replace("T", " ")
    return f"{found.short_id.removeprefix('sha256:')}, built {created} UTC"


# ----------------------------------------------------------------------------------- startup


def startup_rounds(
    args: argparse.Namespace, workdir: Path
) -> dict[tuple[int, str], list[Measurement]]:
    runs: dict[tuple[int, str], list[Measurement]] = {}
    for hosts in args.hosts:
        rounds = args.host_rounds.get(hosts, args.rounds)
        for round_number in range(1, rounds + 1):
            # who goes first alternates: the second must not always get a warmer machine
            for image in args.images[:: 1 if round_number % 2 else -1]:
                progress(
                    f"startup: {hosts} hosts x {args.per_host}, {image}, "
                    f"round {round_number}/{rounds}"
                )
                began = time.monotonic()
                measured = run(
                    "ringleader", hosts, False, workdir, per_host=args.per_host, image=image
                )
                runs.setdefault((hosts, image), []).append(measured)
                codes = " ".join(str(code) for code in measured.codes)
                progress(
                    f"  startup {fmt(measured.startup).strip()} s, the job took "
                    f"{time.monotonic() - began:.0f} s, exit codes {codes}"
                )
    return runs


def print_startup(args: argparse.Namespace, runs: dict[tuple[int, str], list[Measurement]]) -> None:
    before, after = args.images
    cells = {key: median_of(measured) for key, measured in runs.items()}
    print(
        f"Startup, {args.per_host} ranks per host: seconds from the first docker start "
        "(median of alternating rounds)"
    )
    print("  startup: until user code runs on every rank; the phases: until the last host")
    print("  reached it (job.json's timeline)")
    header = f"{'hosts':>5}  {'image':<10} {'rounds':>6} {'startup':>8}" + "".join(
        f" {SHORT[phase]:>10}" for phase in PHASES
    )
    print(header)
    for hosts in args.hosts:
        for image in args.images:
            if (hosts, image) not in cells:
                continue
            cell = cells[(hosts, image)]
            print(
                f"{hosts:>5}  {short_image(image):<10} {len(runs[(hosts, image)]):>6} "
                f"{fmt(cell.startup):>8}"
                + "".join(f" {fmt(cell.phases.get(phase)):>10}" for phase in PHASES)
            )
        if (hosts, before) in cells and (hosts, after) in cells:
            old, new = cells[(hosts, before)], cells[(hosts, after)]
            print(
                f"{hosts:>5}  {'after/bef.':<10} {'':>6} {ratio(new.startup, old.startup):>8}"
                + "".join(
                    f" {ratio(new.phases.get(phase), old.phases.get(phase)):>10}"
                    for phase in PHASES
                )
            )
    print(f"  (sshd: {phases.SSHD}; connected: {phases.CONNECTED}; ssh ok: {phases.SSH_CHECKED};")
    print(
        f"   workers up: {phases.WORKERS_UP}; launched: {phases.LAUNCHED}; "
        f"1st rank: {phases.FIRST_RANK})"
    )
    print()
    print(
        f"| hosts x ranks | startup {short_image(before)} | startup {short_image(after)} "
        "| after/before | difference |"
    )
    print("|---|---|---|---|---|")
    for hosts in args.hosts:
        if (hosts, before) in cells and (hosts, after) in cells:
            was, now = cells[(hosts, before)].startup, cells[(hosts, after)].startup
            difference = f"{now - was:+.2f} s" if was is not None and now is not None else "n/a"
            print(
                f"| {hosts} x {args.per_host} | {fmt(was).strip()} s | {fmt(now).strip()} s | "
                f"{ratio(now, was)} | {difference} |"
            )
    print()
    print("every run (startup s / launched s / exit codes), in the order run:")
    for (hosts, image), measured in runs.items():
        listed = "  ".join(
            f"{fmt(one.startup).strip()}/{fmt(one.phases.get(phases.LAUNCHED)).strip()}/"
            + ("0" if all(code == 0 for code in one.codes) else ",".join(map(str, one.codes)))
            for one in measured
        )
        print(f"  {hosts:>3} {short_image(image):<10} {listed}")


# ------------------------------------------------------------------------------------ memory


@dataclass(frozen=True)
class LeaderStatus:
    pid: int
    rss_kib: int
    threads: int


@dataclass(frozen=True)
class MemoryResult:
    image: str
    before: LeaderStatus | None
    during: LeaderStatus | None
    opened: int
    closed_by_leader: int
    codes: tuple[int | None, ...]
    seconds: float
    note: str = ""


def leader_status(client: docker.DockerClient, container: str) -> LeaderStatus | None:
    python = "/opt/ringleader/venv/bin/python3"
    result = client.containers.get(container).exec_run([python, "-c", LEADER_STATUS])
    words = result.output.decode(errors="replace").split()
    if result.exit_code != 0 or len(words) != 3:
        progress(f"  reading the leader's status failed: {result.output!r}")
        return None
    pid, rss, threads = (int(word) for word in words)
    return LeaderStatus(pid, rss, threads)


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the leader has closed this connection (what it sent before is read and
    dropped)."""
    sock.setblocking(False)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def idle_connections(
    args: argparse.Namespace, image: str, workdir: Path, client: docker.DockerClient
) -> MemoryResult:
    spec = LocalJobSpec(
        hosts=3,
        processes_per_host=2,
        source_dir=EXAMPLES,
        entry_point="mpi_allreduce.py",
        image=image,
        output_dir=workdir,
        hyperparameters={"rounds": "20", "sleep": "1"},
        settings={"startup_timeout": "60"},
    )
    out = Capture()
    job = LocalJob(spec, out, client)
    leader = leader_host(spec, host_names(spec.hosts, spec.random_suffix))
    results: list[LocalJobResult] = []
    began = time.monotonic()
    runner = threading.Thread(target=lambda: results.append(job.run()), daemon=True)
    runner.start()
    before = during = None
    opened = closed = 0
    note = ""
    idle: list[socket.socket] = []
    try:
        try:
            out.wait_for(lambda text: "round 1:" in text, timeout=120)
        except AssertionError:
            note = "no rank reached round 1 within 120 s"
        else:
            container = job.container_ids[leader]
            attrs = client.api.inspect_container(container)
            address = attrs["NetworkSettings"]["Networks"][f"{job.job_id}-net"]["IPAddress"]
            before = leader_status(client, container)
            progress(f"  every rank runs; leader {address}: {before}")
            for _ in range(args.idle):
                try:
                    idle.append(socket.create_connection((address, CONTROL_PORT), timeout=10))
                except OSError as error:
                    note = f"connection {len(idle) + 1} failed: {error}"
                    break
            opened = len(idle)
            progress(f"  {opened} idle connections open; waiting 2 s")
            time.sleep(2)
            during = leader_status(client, container)
            closed = sum(closed_by_peer(sock) for sock in idle)
            progress(f"  with them: {during}, {closed} of them closed by the leader")
    finally:
        for sock in idle:
            with contextlib.suppress(OSError):
                sock.close()
    runner.join(timeout=300)
    if runner.is_alive() or not results:
        note = (note + "; " if note else "") + "the job did not end within 300 s"
        for container_id in job.container_ids.values():
            with contextlib.suppress(docker.errors.APIError):
                client.api.remove_container(container_id, force=True)
        codes: tuple[int | None, ...] = ()
    else:
        codes = tuple(host.exit_code for host in results[0].hosts)
    seconds = time.monotonic() - began
    text = out.getvalue()
    # The leader logs the first connection it turns away and then every hundredth.
    counts = [
        int(found) for found in re.findall(r"turned a connection away: .*?\((\d+) so far\)", text)
    ]
    if counts:
        note = (note + "; " if note else "") + (
            f"the leader's last 'turned a connection away' line says {max(counts)} so far"
        )
    return MemoryResult(image, before, during, opened, closed, codes, seconds, note)


def print_memory(args: argparse.Namespace, results: list[MemoryResult]) -> None:
    print(
        f"Leader entry point with {args.idle} idle connections to its control port "
        "(3 x 2 mpi job, examples/mpi_allreduce.py rounds=20 sleep=1)"
    )
    print(
        f"{'image':<10} {'RSS before':>11} {f'RSS {args.idle} idle':>13} {'growth':>10} "
        f"{'threads':>11} {'closed by leader':>16} {'job s':>6}  exit codes"
    )
    for result in results:
        b, d = result.before, result.during
        rss_before = f"{b.rss_kib / 1024:.1f} MiB" if b else "n/a"
        rss_during = f"{d.rss_kib / 1024:.1f} MiB" if d else "n/a"
        growth = f"{(d.rss_kib - b.rss_kib) / 1024:+.1f} MiB" if b and d else "n/a"
        threads = f"{b.threads} -> {d.threads}" if b and d else "n/a"
        codes = " ".join(str(code) for code in result.codes) or "n/a"
        print(
            f"{short_image(result.image):<10} {rss_before:>11} {rss_during:>13} {growth:>10} "
            f"{threads:>11} {f'{result.closed_by_leader} of {result.opened}':>16} "
            f"{result.seconds:>6.0f}  {codes}"
        )
    for result in results:
        if result.note:
            print(f"  {short_image(result.image)}: {result.note}")
    print("  (RSS: VmRSS of the leader's entry point 2 s after the connections opened; threads:")
    print("   before -> with them; closed by leader: connections it had closed by then)")


# -------------------------------------------------------------------------------------- main


def host_rounds(text: str) -> tuple[int, int]:
    hosts, _, rounds = text.partition("=")
    try:
        return int(hosts), int(rounds)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HOSTS=ROUNDS, got {text!r}") from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[3, 16])
    parser.add_argument("--per-host", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="runs per cell (median)")
    parser.add_argument(
        "--host-rounds",
        type=host_rounds,
        action="append",
        default=[],
        metavar="HOSTS=ROUNDS",
        help="another number of rounds for one host count, e.g. 16=2",
    )
    parser.add_argument("--images", nargs=2, default=["ringleader:before26", "ringleader:latest"])
    parser.add_argument("--idle", type=int, default=300, help="idle connections to the leader")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-startup", action="store_true")
    args = parser.parse_args()
    args.host_rounds = dict(args.host_rounds)
    client = docker.from_env()
    started = time.monotonic()
    for image in args.images:
        print(f"{image}: {image_revision(client, image)}")
    print()
    with tempfile.TemporaryDirectory(prefix="rl-bench-security-") as workdir:
        runs = {} if args.skip_startup else startup_rounds(args, Path(workdir))
        memory: list[MemoryResult] = []
        if not args.skip_memory:
            for image in args.images:
                progress(f"memory: 3 x 2 job in {image}, {args.idle} idle connections")
                memory.append(idle_connections(args, image, Path(workdir), client))
    if runs:
        print_startup(args, runs)
        print()
    if memory:
        print_memory(args, memory)
        print()
    print(f"benchmark took {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
