"""`ringleader cluster run|exec|sync`: the command line (argparse) and bad-input handling."""

import argparse
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from ringleader.core import exitcodes
from ringleader.core.errors import ConfigError
from ringleader.tools.cluster.hostfile import (
    ClusterHost,
    parse_host_list,
    parse_hostfile,
    processes_per_host,
)
from ringleader.tools.cluster.ssh import SshOptions


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser(
        "cluster",
        help="run, exec or sync on your own machines over ssh (a hostfile)",
        description=(
            "A plain cluster (EC2 or Deep Learning AMI machines, or any Linux hosts reached "
            "with ssh): run a job with the same supervision as on SageMaker, run a command on "
            "every host, or copy a directory to every host. See docs/cluster.md."
        ),
    )
    commands = parser.add_subparsers(dest="cluster_command", required=True)

    run = commands.add_parser(
        "run",
        help="run a training command on every host under ringleader",
        description=(
            "Preflight every host, start a ringleader agent on each over ssh and run COMMAND "
            "as the job's ranks. The first host in sorted order leads (as on SageMaker). "
            "Exit code: the job's. Ctrl-C stops the job on every host."
        ),
    )
    _add_hosts(run)
    run.add_argument("--processes-per-host", type=int, help="ranks per host (default: slots)")
    run.add_argument("--distribution", choices=("mpi", "torch_distributed"), default="mpi")
    run.add_argument(
        "--output",
        type=Path,
        help="where every host's output/ and model/ land (default ./ringleader-output/<job>)",
    )
    run.add_argument(
        "--remote-dir",
        default="/tmp/ringleader-jobs",
        help="each host's job directory is REMOTE_DIR/<job> (default /tmp/ringleader-jobs)",
    )
    run.add_argument(
        "--bootstrap",
        action="store_true",
        help="install this machine's ringleader (and what it needs that a host lacks) into "
        "~/.ringleader/venv on hosts that lack it or have another version",
    )
    run.add_argument("--min-free-gb", type=float, default=1.0, help="free disk each host needs")
    run.add_argument(
        "--preflight-timeout",
        type=float,
        default=30.0,
        help="seconds each host's preflight check may take before it counts as unreachable",
    )
    run.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a ringleader_* setting, e.g. sigterm_grace=10 (repeatable)",
    )
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARG...")
    run.set_defaults(func=_guarded(_run))

    exec_ = commands.add_parser(
        "exec", help="run a command on every host at once", description="Output tagged by host."
    )
    _add_hosts(exec_)
    exec_.add_argument("--timeout", type=float, help="seconds per host (default: none)")
    exec_.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARG...")
    exec_.set_defaults(func=_guarded(_exec))

    sync = commands.add_parser(
        "sync",
        help="copy a directory (or s3:// prefix) to every host at once",
        description=(
            "rsync over ssh from this machine (SRC a directory), or each host downloads from "
            "s3:// with its own credentials. Only what is missing or changed is sent, so an "
            "interrupted sync is resumed by running it again."
        ),
    )
    _add_hosts(sync)
    sync.add_argument("--timeout", type=float, help="seconds per host (default: none)")
    sync.add_argument("source", help="a local directory or s3://bucket/prefix")
    sync.add_argument("destination", help="the directory on every host")
    sync.set_defaults(func=_guarded(_sync))


def _add_hosts(parser: argparse.ArgumentParser) -> None:
    hosts = parser.add_mutually_exclusive_group(required=True)
    hosts.add_argument("--hostfile", type=Path, help="lines of `HOST [slots=N]`")
    hosts.add_argument("-H", "--hosts", dest="host_list", help="HOST:SLOTS,... e.g. a:4,b:4")
    parser.add_argument(
        "--ssh-option",
        action="append",
        default=[],
        metavar="OPTION=VALUE",
        help="an ssh -o option for every connection (repeatable), e.g. Port=2222",
    )
    parser.add_argument(
        "--connect-timeout", type=float, default=10.0, help="ssh ConnectTimeout, seconds"
    )


Resolver = Callable[[str, int], object]


def read_hosts(
    args: argparse.Namespace, resolve: Resolver = socket.getaddrinfo
) -> tuple[ClusterHost, ...]:
    this_machine = socket.gethostname()
    if args.host_list is not None:
        hosts = parse_host_list(args.host_list, this_machine)
    else:
        path: Path = args.hostfile
        try:
            text = path.read_text()
        except OSError as error:
            raise ConfigError("--hostfile", f"cannot read {path}: {error.strerror}") from None
        hosts = parse_hostfile(text, str(path), this_machine)
    for host in hosts:
        try:
            resolve(host.address, 22)
        except socket.gaierror as error:
            raise ConfigError(
                f"{host.origin} host", f"cannot resolve {host.address!r}: {error.strerror}"
            ) from None
    return hosts


def _command(args: argparse.Namespace) -> list[str]:
    command: list[str] = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise ConfigError("COMMAND", "missing: give it after --, e.g. -- python train.py")
    return command


def _ssh(args: argparse.Namespace) -> SshOptions:
    return SshOptions(args.connect_timeout, tuple(args.ssh_option))


def _settings(values: list[str]) -> dict[str, str]:
    settings = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError("--setting", f"expected NAME=VALUE, got {item!r}")
        settings[key.removeprefix("ringleader_")] = value
    return settings


def _run(args: argparse.Namespace) -> int:
    from ringleader.tools.cluster.run import ClusterJob, ClusterRun, with_defaults

    hosts = read_hosts(args)
    job = with_defaults(
        ClusterJob(
            hosts=hosts,
            command=tuple(_command(args)),
            cwd="",
            processes_per_host=processes_per_host(hosts, args.processes_per_host),
            distribution=args.distribution,
            settings=_settings(args.setting),
            output_dir=args.output,
            remote_dir=args.remote_dir,
            ssh=_ssh(args),
            bootstrap=args.bootstrap,
            min_free_bytes=int(args.min_free_gb * (1 << 30)),
            preflight_timeout=args.preflight_timeout,
        )
    )
    return ClusterRun(job).run()


def _exec(args: argparse.Namespace) -> int:
    from ringleader.tools.cluster.fanout import Fanout, overall_exit_code

    fanout = Fanout(read_hosts(args), _ssh(args), sys.stdout)
    return overall_exit_code(fanout.exec(_command(args), args.timeout))


def _sync(args: argparse.Namespace) -> int:
    from ringleader.tools.cluster.fanout import Fanout, overall_exit_code

    if not args.source.startswith("s3://") and not Path(args.source).is_dir():
        raise ConfigError("SRC", f"{args.source!r} is not a directory (or an s3:// prefix)")
    fanout = Fanout(read_hosts(args), _ssh(args), sys.stdout)
    return overall_exit_code(fanout.sync(args.source, args.destination, args.timeout))


def _guarded(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Bad input: the field and what was expected, exit 78, nothing started."""

    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except ConfigError as error:
            print(f"ringleader cluster: {error}", file=sys.stderr)
            return exitcodes.CONFIG_ERROR

    return run
