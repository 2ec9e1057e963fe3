"""The options that set ringleader_* settings of a job, shared by `ringleader local` and
`ringleader slurm`: metrics, shown ranks, the hang watch, restarts and Horovod's knobs."""

import argparse
from pathlib import Path

from ringleader.tools.local.options import add_restart_options, restart_settings

_HOROVOD_VALUES = ("horovod_timeline", "horovod_fusion_threshold", "horovod_cycle_time")
_HOROVOD_FLAGS = (
    "horovod_timeline_mark_cycles",
    "horovod_autotune",
    "horovod_hierarchical_allreduce",
)


def add_job_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a ringleader_* setting, e.g. startup_timeout=60 (repeatable)",
    )
    parser.add_argument(
        "--hang-timeout",
        metavar="SECONDS",
        help="end the job as hung, with every rank's stacks and the culprit named, when no "
        "rank makes progress (output, ringleader.progress()) for this long "
        "(ringleader_hang_timeout; default: off). Ctrl-\\ shows every rank's stacks anytime",
    )
    add_restart_options(parser)
    parser.add_argument(
        "--metric-definitions",
        metavar="JSON_OR_FILE",
        help='SageMaker metric definitions: [{"Name": ..., "Regex": ...}], inline or a file',
    )
    parser.add_argument("--log-ranks", help='ranks whose output is shown: "all" (default), "0,3"')
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="also print the details every host keeps in logs/<host>/ringleader.log, such as "
        "the pulse statistics at the end (ringleader_verbose)",
    )
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


def job_settings(args: argparse.Namespace) -> dict[str, str]:
    """ringleader_* settings (without the prefix) given as dedicated flags."""
    settings = {}
    if args.metric_definitions:
        settings["metric_definitions"] = _inline_or_file(args.metric_definitions)
    if args.log_ranks:
        settings["log_ranks"] = args.log_ranks
    if args.hang_timeout is not None:
        settings["hang_timeout"] = args.hang_timeout
    if args.verbose:
        settings["verbose"] = "true"
    settings.update(restart_settings(args))
    for name in _HOROVOD_VALUES:
        if getattr(args, name) is not None:
            settings[name] = str(getattr(args, name))
    for name in _HOROVOD_FLAGS:
        if getattr(args, name):
            settings[name] = "true"
    return settings


def _inline_or_file(value: str) -> str:
    """A file's text when `value` names one, else `value` itself (inline JSON, which can be
    longer than a file name may be)."""
    try:
        return Path(value).read_text() if Path(value).is_file() else value
    except OSError:
        return value
