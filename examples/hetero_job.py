r"""A heterogeneous-cluster job: one script, two roles chosen by the host's instance group.

Hosts of the distribution's instance groups (SM_DISTRIBUTION_INSTANCE_GROUPS) run the
distributed part: an allreduce of every rank's number with mpi4py (mpi) or torch.distributed
(torch_distributed). Hosts of the other groups run the script once, on their own, the way a
data-preprocessing group would. On fake hosts:

  .venv/bin/ringleader local --instance-groups data:1,train:2 --distribution-groups train \
      --processes-per-host 2 --source-dir examples --entry-point hetero_job.py

(add `--image ringleader:horovod --distribution torch_distributed` for the torch version, and
`-- --framework torch`). `--plain-exit-code N` makes the plain hosts fail with N.
"""

import argparse
import json
import os
import sys
import time


def distributed_part(framework: str, seconds: float) -> None:
    if framework == "torch":
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        total = torch.tensor([float(rank)])
        dist.all_reduce(total)
        value = total.item()
        # A gloo group still open at interpreter exit can abort in its destructor (SIGABRT,
        # "terminate called without an active exception") after the work succeeded.
        dist.barrier()
        dist.destroy_process_group()
    else:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank, world = comm.Get_rank(), comm.Get_size()
        value = comm.allreduce(float(rank))
    time.sleep(seconds)
    expected = world * (world - 1) / 2
    print(
        f"distributed rank {rank} of {world} in group {os.environ['SM_CURRENT_INSTANCE_GROUP']}: "
        f"allreduce={value:g} {'ok' if value == expected else 'WRONG'}",
        flush=True,
    )
    if value != expected:
        sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=("mpi", "torch"), default="mpi")
    parser.add_argument("--seconds", type=float, default=0.0, help="how long each part runs")
    parser.add_argument("--plain-exit-code", type=int, default=0)
    args = parser.parse_args()
    group = os.environ["SM_CURRENT_INSTANCE_GROUP"]
    distribution_groups = json.loads(os.environ["SM_DISTRIBUTION_INSTANCE_GROUPS"])
    if group in distribution_groups:
        distributed_part(args.framework, args.seconds)
        return
    time.sleep(args.seconds)
    print(
        f"plain host {os.environ['SM_CURRENT_HOST']} in group {group} "
        f"(hetero={os.environ['SM_IS_HETERO']}, groups={os.environ['SM_INSTANCE_GROUPS']})",
        flush=True,
    )
    sys.exit(args.plain_exit_code)


if __name__ == "__main__":
    main()
