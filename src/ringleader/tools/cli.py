"""The `ringleader` command: `local` runs a job on fake hosts, `cluster` on your own machines
over ssh, `slurm` on each node of a Slurm job step, `stack` manages the VPC stack, `report`
draws a job's report, `image` prepares or checks a training image."""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ringleader import __version__
from ringleader.config.job import DISTRIBUTIONS, MPI, NO_DISTRIBUTION
from ringleader.tools import doctor
from ringleader.tools.cluster import cli as cluster_cli
from ringleader.tools.extras import missing_extra_message
from ringleader.tools.image import cli as image_cli
from ringleader.tools.job_options import add_job_options, job_settings
from ringleader.tools.local.errors import UsageError
from ringleader.tools.local.options import (
    DEFAULT_SHM,
    available_gpus,
    gpu_plan,
    gpus_per_host,
    parse_channels,
    parse_env,
    parse_env_file,
    parse_host_env,
)
from ringleader.tools.local.plan import (
    LocalJobSpec,
    parse_instance_groups,
    parse_key_values,
    parse_script_args,
)
from ringleader.tools.local.sweep import (
    SweepRun,
    parse_sweep,
    run_sweep,
    sweep_id,
    sweep_specs,
    write_sweep_notes,
)
from ringleader.tools.report import cli as report_cli
from ringleader.tools.report import compare_cli as report_compare
from ringleader.tools.report.runfacts import EPOCH_METRIC
from ringleader.tools.slurm import cli as slurm_cli
from ringleader.tools.stack import cli as stack_cli

USAGE_ERROR = 2


def _add_local_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser(
        "local",
        help="run a job on N fake hosts (Docker containers algo-1..algo-N)",
        description=(
            "Run a training job on N fake hosts: one container of the image per host on a "
            "private Docker network, configured as SageMaker would. Arguments after `--` go to "
            "the script as hyperparameters (--name value)."
        ),
    )
    parser.add_argument(
        "--hosts",
        type=int,
        default=None,
        help="number of hosts (default 3, or the sum of --instance-groups)",
    )
    parser.add_argument(
        "--processes-per-host",
        type=int,
        default=None,
        help="ranks per host (default: GPUs found, else 1)",
    )
    parser.add_argument(
        "--distribution",
        choices=DISTRIBUTIONS,
        default=None,
        help="how ranks start: mpi (mpirun over ssh, the default), torch_distributed (every "
        "host starts its own ranks with torchrun's environment), parameter_server and "
        "multi_worker_mirrored_strategy (TensorFlow's, with TF_CONFIG as SageMaker lays it "
        "out), none (the script once per host)",
    )
    parser.add_argument(
        "--source-dir", type=Path, required=True, help="directory mounted as /opt/ml/code"
    )
    parser.add_argument(
        "--entry-point",
        required=True,
        help="script in the source dir, or '-m package.module' (sagemaker_program)",
    )
    parser.add_argument(
        "--mpi-options", default="", help="extra mpirun options (sagemaker_mpi_custom_mpi_options)"
    )
    parser.add_argument(
        "--instance-groups",
        metavar="NAME:COUNT,...",
        help="a heterogeneous cluster, e.g. data:1,train:2 (hosts handed out in order)",
    )
    parser.add_argument(
        "--distribution-groups",
        metavar="NAME,...",
        help="the instance groups the distributed job runs on; the other groups' hosts run "
        "the script once each (sagemaker_distribution_instance_groups)",
    )
    parser.add_argument("--no-mpi", action="store_true", help="the same as --distribution none")
    parser.add_argument(
        "--hyperparameter",
        "-p",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a hyperparameter for the script (repeatable)",
    )
    add_job_options(parser)
    parser.add_argument("--image", default="ringleader:latest")
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("ringleader-output"),
        help="each host's /opt/ml/output and /opt/ml/model land in "
        "OUTPUT/<job>/<host>/ (default ./ringleader-output)",
    )
    parser.add_argument(
        "--random-suffix",
        action="store_true",
        help="name hosts algo-N-xxxxx like the SageMaker SDK's local mode",
    )
    data = parser.add_argument_group("data, environment and resources (as SageMaker gives them)")
    data.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=PATH|s3://...",
        help="a data channel at /opt/ml/input/data/NAME on every host (SM_CHANNEL_NAME): a "
        "directory or file here (mounted read-only), or s3://bucket/prefix (downloaded once "
        "into ~/.cache/ringleader/channels, then mounted); repeatable",
    )
    data.add_argument(
        "--input-mode",
        action="append",
        default=[],
        metavar="NAME=file|pipe",
        help="pipe: stream the channel into the FIFO /opt/ml/input/data/NAME_0 (NAME_1, ... for "
        "later epochs), as SageMaker's Pipe mode",
    )
    data.add_argument(
        "--input-sharding",
        action="append",
        default=[],
        metavar="NAME=replicated|by-host",
        help="by-host: each host gets a disjoint share of the channel's files (ShardedByS3Key)",
    )
    data.add_argument(
        "--content-type", action="append", default=[], metavar="NAME=TYPE", help="ContentType"
    )
    data.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="for every host"
    )
    data.add_argument(
        "--env-file", action="append", default=[], type=Path, help="KEY=VALUE lines, every host"
    )
    data.add_argument(
        "--host-env",
        action="append",
        default=[],
        metavar="algo-N:KEY=VALUE",
        help="a variable for one host only",
    )
    data.add_argument(
        "--gpus",
        help="all (every host sees every GPU), N (each host gets N) or per-host (the machine's "
        "GPUs split between the hosts); processes per host default to each host's GPUs",
    )
    data.add_argument(
        "--shm-size",
        default=DEFAULT_SHM,
        help=f"/dev/shm per host (default {DEFAULT_SHM}: Docker's 64m breaks PyTorch DataLoader "
        "workers and NCCL)",
    )
    data.add_argument("--cpus", type=float, help="CPUs per host (docker --cpus)")
    data.add_argument("--memory", help="memory per host, e.g. 4g (docker --memory)")
    data.add_argument(
        "--checkpoint-dir",
        type=Path,
        help="mounted at /opt/ml/checkpoints: DIR/<host> per host, or DIR itself with "
        "--shared-checkpoints",
    )
    data.add_argument("--shared-checkpoints", action="store_true")
    data.add_argument(
        "--output-uri",
        help="where each host's output.tar.gz and model.tar.gz go at the end: a path on this "
        "machine or s3://bucket/prefix (endpoint and credentials with --env)",
    )
    data.add_argument(
        "--keep", action="store_true", help="leave the containers and network for inspection"
    )
    parser.add_argument(
        "--sweep",
        metavar="hosts=N,N[,N...]",
        help="run the same job at each of these host counts, one after the other, then write "
        "their comparison (ringleader report --compare) to OUTPUT/sweep-<id>/; name the "
        "throughput metric with --throughput",
    )
    report_compare.add_compare_arguments(parser)
    parser.add_argument(
        "script_args", nargs=argparse.REMAINDER, help="-- then the script's --name value arguments"
    )
    parser.set_defaults(func=_run_local)


def _run_local(args: argparse.Namespace) -> int:
    from ringleader.tools.local.run import LocalJob  # imports the Docker SDK

    script_args = args.script_args[1:] if args.script_args[:1] == ["--"] else args.script_args
    try:
        hyperparameters: dict[str, str] = parse_key_values("--hyperparameter", args.hyperparameter)
        hyperparameters.update(parse_script_args(script_args))
        groups = parse_instance_groups(args.instance_groups) if args.instance_groups else ()
        default_hosts = sum(count for _, count in groups) if groups else 3
        sizes = parse_sweep(args.sweep) if args.sweep else ()
        _check_compare_options(args)
        hosts = max(sizes) if sizes else args.hosts if args.hosts is not None else default_hosts
        env: dict[str, str] = {}
        for env_file in args.env_file:
            try:
                env.update(parse_env_file(env_file.read_text(), str(env_file)))
            except OSError as error:
                raise UsageError(f"--env-file: cannot read {env_file}: {error.strerror}") from None
        env.update(parse_env(args.env))
        processes_per_host = args.processes_per_host
        if args.gpus is not None:  # checked here: no container starts for a machine without
            available = available_gpus()
            per_host = gpus_per_host(gpu_plan(args.gpus, available, hosts), available)
            processes_per_host = processes_per_host or per_host
        spec = LocalJobSpec(
            hosts=hosts,
            instance_groups=groups,
            distribution_groups=tuple(
                name.strip() for name in (args.distribution_groups or "").split(",") if name
            ),
            source_dir=args.source_dir,
            entry_point=args.entry_point,
            processes_per_host=processes_per_host,
            distribution=_distribution(args),
            mpi_options=args.mpi_options,
            hyperparameters=hyperparameters,
            settings={**job_settings(args), **parse_key_values("--setting", args.setting)},
            image=args.image,
            random_suffix=args.random_suffix,
            output_dir=args.output,
            channels=parse_channels(
                args.input, args.input_mode, args.input_sharding, args.content_type
            ),
            env=env,
            host_env=parse_host_env(args.host_env, [f"algo-{n}" for n in range(1, hosts + 1)]),
            gpus=args.gpus,
            shm_size=args.shm_size,
            cpus=args.cpus,
            memory=args.memory,
            checkpoint_dir=args.checkpoint_dir,
            shared_checkpoints=args.shared_checkpoints,
            output_uri=args.output_uri,
            keep=args.keep,
        )
        if sizes:
            return _sweep(args, sweep_specs(spec, sizes))
        return LocalJob(spec, sys.stdout).run().exit_code
    except UsageError as error:
        print(f"ringleader local: {error}", file=sys.stderr)
        return USAGE_ERROR


def _check_compare_options(args: argparse.Namespace) -> None:
    if args.sweep and args.hosts is not None:
        raise UsageError("--hosts: the sweep sets the host counts (--sweep hosts=...)")
    if args.sweep:
        return
    for option, given in (
        ("--throughput", args.throughput is not None),
        ("--per-rank", args.per_rank),
        ("--price", bool(args.price)),
        ("--instance-type", args.instance_type is not None),
        ("--epoch-metric", args.epoch_metric != EPOCH_METRIC),
    ):
        if given:
            raise UsageError(f"{option}: only with --sweep (or ringleader report --compare)")


def _sweep(args: argparse.Namespace, specs: list[LocalJobSpec]) -> int:
    from ringleader.tools.local.run import LocalJob  # imports the Docker SDK

    def run_job(spec: LocalJobSpec) -> SweepRun:
        job = LocalJob(spec, sys.stdout)
        result = job.run()
        return SweepRun(spec.hosts, result.exit_code, result.output_dir, job.interrupted)

    out_dir = args.output / sweep_id()

    def compare(runs: Sequence[Path]) -> int:
        request = report_compare.request_from(args, [str(run) for run in runs], out_dir)
        return report_compare.run_compare(request, sys.stdout, sys.stderr)

    return run_sweep(specs, run_job, compare, write_sweep_notes(sys.stdout))


def _distribution(args: argparse.Namespace) -> str:
    if args.no_mpi and args.distribution not in (None, NO_DISTRIBUTION):
        raise UsageError(f"--no-mpi contradicts --distribution {args.distribution}")
    return NO_DISTRIBUTION if args.no_mpi else args.distribution or MPI


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ringleader", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ringleader {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    _add_local_parser(subparsers)
    cluster_cli.add_parser(subparsers)
    slurm_cli.add_parser(subparsers)
    stack_cli.add_parser(subparsers)
    report_cli.add_parser(subparsers)
    image_cli.add_parser(subparsers)
    doctor.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except ModuleNotFoundError as error:
        message = missing_extra_message(error, args.command)
        if message is None:
            raise
        print(f"ringleader: error: {message}", file=sys.stderr)
        return USAGE_ERROR
    return code


if __name__ == "__main__":
    sys.exit(main())
