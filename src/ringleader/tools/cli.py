"""The `ringleader` command: `local` runs a job on fake hosts, `cluster` on your own machines
over ssh, `stack` manages the VPC stack, `report` draws a job's report."""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ringleader import __version__
from ringleader.tools.cluster import cli as cluster_cli
from ringleader.tools.local.errors import UsageError
from ringleader.tools.local.plan import (
    DISTRIBUTIONS,
    LocalJobSpec,
    parse_instance_groups,
    parse_key_values,
    parse_script_args,
)
from ringleader.tools.report import cli as report_cli
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
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a ringleader_* setting, e.g. startup_timeout=60 (repeatable)",
    )
    parser.add_argument("--image", default="ringleader:latest")
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("ringleader-output"),
        help="each host's /opt/ml/output and /opt/ml/model land in "
        "OUTPUT/<job>/<host>/ (default ./ringleader-output)",
    )
    parser.add_argument(
        "--metric-definitions",
        metavar="JSON_OR_FILE",
        help='SageMaker metric definitions: [{"Name": ..., "Regex": ...}], inline or a file',
    )
    parser.add_argument("--log-ranks", help='ranks whose output is shown: "all" (default), "0,3"')
    horovod = parser.add_argument_group("Horovod (become HOROVOD_* for every rank)")
    horovod.add_argument(
        "--horovod-timeline",
        nargs="?",
        const="true",
        metavar="PATH",
        help="write the timeline (default output/data/horovod_timeline.json)",
    )
    horovod.add_argument("--horovod-timeline-mark-cycles", action="store_true")
    horovod.add_argument(
        "--horovod-autotune", action="store_true", help="autotune, logged to output/data"
    )
    horovod.add_argument("--horovod-fusion-threshold", type=int, metavar="BYTES")
    horovod.add_argument("--horovod-cycle-time", type=float, metavar="MS")
    horovod.add_argument("--horovod-hierarchical-allreduce", action="store_true")
    parser.add_argument(
        "--random-suffix",
        action="store_true",
        help="name hosts algo-N-xxxxx like the SageMaker SDK's local mode",
    )
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
        spec = LocalJobSpec(
            hosts=args.hosts if args.hosts is not None else default_hosts,
            instance_groups=groups,
            distribution_groups=tuple(
                name.strip() for name in (args.distribution_groups or "").split(",") if name
            ),
            source_dir=args.source_dir,
            entry_point=args.entry_point,
            processes_per_host=args.processes_per_host,
            distribution=_distribution(args),
            mpi_options=args.mpi_options,
            hyperparameters=hyperparameters,
            settings={**_flag_settings(args), **parse_key_values("--setting", args.setting)},
            image=args.image,
            random_suffix=args.random_suffix,
            output_dir=args.output,
        )
        return LocalJob(spec, sys.stdout).run().exit_code
    except UsageError as error:
        print(f"ringleader local: {error}", file=sys.stderr)
        return USAGE_ERROR


def _distribution(args: argparse.Namespace) -> str:
    if args.no_mpi and args.distribution not in (None, "none"):
        raise UsageError(f"--no-mpi contradicts --distribution {args.distribution}")
    return "none" if args.no_mpi else args.distribution or "mpi"


def _flag_settings(args: argparse.Namespace) -> dict[str, str]:
    """ringleader_* settings (without the prefix) given as dedicated flags."""
    settings = {}
    if args.metric_definitions:
        path = Path(args.metric_definitions)
        text = path.read_text() if path.is_file() else args.metric_definitions
        settings["metric_definitions"] = text
    if args.log_ranks:
        settings["log_ranks"] = args.log_ranks
    for name in (
        "horovod_timeline",
        "horovod_fusion_threshold",
        "horovod_cycle_time",
    ):
        if getattr(args, name) is not None:
            settings[name] = str(getattr(args, name))
    for name in (
        "horovod_timeline_mark_cycles",
        "horovod_autotune",
        "horovod_hierarchical_allreduce",
    ):
        if getattr(args, name):
            settings[name] = "true"
    return settings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ringleader", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ringleader {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    _add_local_parser(subparsers)
    cluster_cli.add_parser(subparsers)
    stack_cli.add_parser(subparsers)
    report_cli.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
