"""ringleader's demo job: every rank allreduces its rank number and prints what it got.

Each round every rank first works through --batch-size synthetic samples (a SHA-256 of
--sample-bytes each, plain CPU work) and prints its own rate, `samples_per_sec_per_rank=R`,
so a sweep over host counts (`ringleader local --sweep hosts=1,2,4`) has a throughput to
compare; `round N:` marks an epoch.

Options make a chosen rank fail, for trying out how failures are reported:
  --fail-rank 4 --fail-code 3      rank 4 exits with code 3 after the first round
  --fail-rank 4 --fail-signal KILL rank 4 kills itself with SIGKILL
  --sleep 60                       every rank waits 60 s per round (to try `docker stop`)
  --leave-child 1                  every rank starts a helper in its own session that keeps
                                   the rank's stdout open, and leaves it running at the end
"""

import argparse
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time

from mpi4py import MPI


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds to wait per round")
    parser.add_argument("--fail-rank", type=int, default=None)
    parser.add_argument("--fail-code", type=int, default=1)
    parser.add_argument("--fail-signal", default=None, help="e.g. KILL, SEGV")
    parser.add_argument("--leave-child", type=int, default=0, help="1: leave a helper running")
    parser.add_argument("--batch-size", type=int, default=256, help="samples per round per rank")
    parser.add_argument("--sample-bytes", type=int, default=16384, help="work per sample")
    return parser.parse_args()


def on_sigterm(signum: int, _frame: object) -> None:
    rank = MPI.COMM_WORLD.Get_rank()
    print(f"rank {rank} received SIGTERM, exiting", flush=True)
    sys.exit(128 + signum)


def main() -> None:
    args = parse_args()
    signal.signal(signal.SIGTERM, on_sigterm)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    host = os.environ.get("SM_CURRENT_HOST", "?")
    print(f"rank {rank}/{size} on {host} (container {socket.gethostname()}) started", flush=True)
    expected = size * (size - 1) // 2
    if args.leave_child:
        helper = subprocess.Popen(["sleep", "600"], start_new_session=True)
        print(f"rank {rank} left helper {helper.pid} running", flush=True)
    sample = bytes(args.sample_bytes)
    for round_number in range(1, args.rounds + 1):
        started = time.perf_counter()
        for index in range(args.batch_size):
            hashlib.sha256(index.to_bytes(8, "little") + sample).digest()
        total = comm.allreduce(rank, op=MPI.SUM)
        rate = args.batch_size / (time.perf_counter() - started)
        status = "ok" if total == expected else f"WRONG, expected {expected}"
        print(
            f"round {round_number}: allreduce_sum={total} {status} "
            f"samples_per_sec_per_rank={rate:.1f}",
            flush=True,
        )
        if rank == args.fail_rank:
            if args.fail_signal:
                print(f"rank {rank} raising SIG{args.fail_signal}", file=sys.stderr, flush=True)
                os.kill(os.getpid(), getattr(signal, f"SIG{args.fail_signal.upper()}"))
            print(f"rank {rank} failing on purpose with code {args.fail_code}", file=sys.stderr)
            sys.exit(args.fail_code)
        if args.sleep:
            time.sleep(args.sleep)
    comm.Barrier()
    if rank == 0:
        print(f"done: {args.rounds} rounds on {size} ranks", flush=True)


if __name__ == "__main__":
    main()
