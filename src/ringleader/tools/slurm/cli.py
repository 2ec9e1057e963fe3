"""`ringleader slurm`: the command line and bad-input handling. Run once per node of a job
step (`srun --ntasks-per-node=1 ringleader slurm [options] -- PROGRAM [ARGS]`)."""

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ringleader.config.job import DISTRIBUTIONS, MPI, TF_DISTRIBUTIONS
from ringleader.config.slurm import SlurmStep, read_step
from ringleader.core import exitcodes
from ringleader.core.errors import ConfigError
from ringleader.tools.hostjob import command_hyperparameters
from ringleader.tools.job_options import add_job_options, job_settings
from ringleader.tools.local.errors import UsageError
from ringleader.tools.local.options import parse_env
from ringleader.tools.local.plan import parse_key_values

if TYPE_CHECKING:
    from ringleader.tools.slurm.node import NodeJob

USAGE_ERROR = 2
DEFAULT_OUTPUT = "ringleader-output"
SIGTERM_GRACE = "10"  # ringleader_sigterm_grace under Slurm, unless --setting says otherwise


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser(
        "slurm",
        help="run a job inside a Slurm allocation: srun --ntasks-per-node=1 ringleader slurm ...",
        description=(
            "Run once per node of a Slurm job step (srun --ntasks-per-node=1 ringleader slurm "
            "[options] -- PROGRAM [ARGS]). The step's nodes are the job's hosts; the first in "
            "sorted order leads, as on SageMaker. Every node exits with the job's exit code, "
            "so srun, the batch script and the job's ExitCode carry it. See docs/slurm.md."
        ),
    )
    parser.add_argument(
        "--distribution",
        choices=DISTRIBUTIONS,
        default=MPI,
        help="how ranks start: mpi (mpirun from the first node over the nodes' sshd, the "
        "default), torch_distributed, parameter_server, multi_worker_mirrored_strategy, "
        "none (the program once per node)",
    )
    parser.add_argument(
        "--processes-per-host",
        type=int,
        help="ranks per node (default: SLURM_GPUS_ON_NODE, else the node's GPUs, else 1)",
    )
    parser.add_argument(
        "--mpi-options", default="", help="extra mpirun options (sagemaker_mpi_custom_mpi_options)"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a variable for every rank on every node (repeatable; values are never printed)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        help=f"each node's output/ and model/ land in OUTPUT/<job id>/<node>/ (default "
        f"./{DEFAULT_OUTPUT}: in the step's working directory, the submit directory unless "
        "sbatch or srun --chdir say otherwise)",
    )
    parser.add_argument(
        "--network-interface",
        metavar="NAME",
        help="the interface mpirun and NCCL use (default eth0, else the one that reaches the "
        "other nodes)",
    )
    add_job_options(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- PROGRAM ARG...")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Bad input: the field and what was expected; a bad option's syntax exits 2, a wrong
    value or a missing Slurm step 78; nothing started."""
    from ringleader.tools.slurm.node import NodeRun

    try:
        job = node_job(args, read_step(os.environ), os.getcwd())
    except UsageError as error:
        print(f"ringleader slurm: {error}", file=sys.stderr)
        return USAGE_ERROR
    except ConfigError as error:
        print(f"ringleader slurm: {error}", file=sys.stderr)
        return exitcodes.CONFIG_ERROR
    return NodeRun(job, sys.stdout).run()


def node_job(args: argparse.Namespace, step: SlurmStep, cwd: str) -> "NodeJob":
    from ringleader.tools.slurm.node import NodeJob

    command: list[str] = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise UsageError("PROGRAM: missing; give it after --, e.g. -- python train.py")
    env = parse_env(args.env)  # before anything is made: a bad option makes nothing
    per_host = processes_per_host(args, step)
    # Within Slurm's KillWait (30 s by default) after a SIGTERM, with room for the verdict.
    settings = {"sigterm_grace": SIGTERM_GRACE, **job_settings(args)}
    for key, value in parse_key_values("--setting", args.setting).items():
        settings[key.removeprefix("ringleader_")] = value
    base = args.output or Path(cwd) / DEFAULT_OUTPUT
    output_dir = base.absolute() / step.job_id / step.node
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError("--output", f"cannot make {output_dir}: {error.strerror}") from None
    return NodeJob(
        step=step,
        output_dir=output_dir,
        cwd=cwd,
        hyperparameters=command_hyperparameters(
            command,
            cwd,
            args.distribution,
            per_host,
            args.mpi_options,
            settings,
        ),
        env=env,
        network_interface=args.network_interface,
    )


def processes_per_host(args: argparse.Namespace, step: SlurmStep) -> int | None:
    """--processes-per-host, else the GPUs Slurm gave the node; None: the supervision's
    default (the GPUs it finds, else 1). TensorFlow's distributions run fixed tasks."""
    wanted = args.processes_per_host
    if wanted is None:
        return None if args.distribution in TF_DISTRIBUTIONS else step.gpus_on_node
    if args.distribution in TF_DISTRIBUTIONS:
        raise UsageError(
            f"--processes-per-host: {args.distribution} runs fixed tasks per host "
            "(TensorFlow's, see docs/distributions/tensorflow.md), not a number of processes"
        )
    if wanted < 1:
        raise UsageError(f"--processes-per-host: expected at least 1, got {wanted}")
    given = (
        ("GPUs", "SLURM_GPUS_ON_NODE", step.gpus_on_node)
        if step.gpus_on_node
        else ("CPUs", "SLURM_CPUS_ON_NODE", step.cpus_on_node)
    )
    kind, variable, count = given
    if count is not None and wanted > count:
        raise ConfigError(
            "--processes-per-host",
            f"{wanted} ranks on {step.node}, but the allocation gave it {count} {kind} "
            f"({variable}); ask Slurm for more or start fewer ranks",
        )
    return int(wanted)
