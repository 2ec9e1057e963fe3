"""Job for the disk and launcher faults (tests/container/test_disks_and_ports.py, bench/faults.py).

Every rank prints --megabytes of numbered lines (`R<rank> L<index> xxx... END<index>`), then:
  --fill DIR        rank 0 writes DIR/checkpoint.bin until the disk under DIR is full (a
                    checkpoint that fills /opt/ml/output), before the others go on
  --fail-rank N     rank N exits with --fail-code at the end (the others finish)
  --wedge-host H    once every rank has finalized MPI, local rank 0 on host H stops its MPI
                    daemon (orted) with SIGSTOP: every rank ends, but mpirun never hears of it
"""

import argparse
import errno
import os
import signal
import socket
import sys
import time
from pathlib import Path

from mpi4py import MPI

LINE_BYTES = 1000
MARKERS = Path("/tmp/disk-job-finalized")  # one file per rank of this host that finalized MPI
WAIT_SECONDS = 30.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--megabytes", type=float, default=1.0)
    parser.add_argument("--fill", default="")
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-code", type=int, default=1)
    parser.add_argument("--wedge-host", default="")
    args, _ = parser.parse_known_args()
    return args


def fill(directory: str) -> int:
    """Write until the disk is full; the bytes written."""
    written, block = 0, b"\0" * 65536
    with open(Path(directory) / "checkpoint.bin", "wb", buffering=0) as checkpoint:
        while True:
            try:
                written += checkpoint.write(block)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                return written


def orted_pid() -> int:
    """This rank's MPI daemon: the nearest ancestor named orted."""
    pid = os.getppid()
    while pid > 1:
        stat = Path(f"/proc/{pid}/stat").read_text()
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if name == "orted":
            return pid
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
    raise RuntimeError("no orted among this rank's ancestors")


def wedge(local_rank: int, local_size: int) -> None:
    """Mark this rank finalized; local rank 0 stops orted once every local rank is."""
    MARKERS.mkdir(exist_ok=True)
    (MARKERS / str(local_rank)).touch()
    if local_rank != 0:
        return
    deadline = time.monotonic() + WAIT_SECONDS
    while len(list(MARKERS.iterdir())) < local_size and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = orted_pid()
    os.kill(pid, signal.SIGSTOP)
    print(f"stopped orted {pid} with SIGSTOP", flush=True)


def main() -> None:
    args = parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    host = socket.gethostname()  # a fake host's container is named after it
    payload = "x" * LINE_BYTES
    for index in range(int(args.megabytes * 1_000_000 / LINE_BYTES)):
        sys.stdout.write(f"R{rank} L{index} {payload} END{index}\n")
    sys.stdout.flush()
    print(f"rank {rank} printed everything", flush=True)
    if args.fill and rank == 0:
        print(f"filled the disk under {args.fill} with {fill(args.fill)} bytes", flush=True)
    comm.Barrier()
    if rank == args.fail_rank:
        print(f"rank {rank} failing on purpose with code {args.fail_code}", file=sys.stderr)
        sys.exit(args.fail_code)
    MPI.Finalize()
    if host == args.wedge_host:
        local_rank = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
        wedge(local_rank, int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1")))


if __name__ == "__main__":
    main()
