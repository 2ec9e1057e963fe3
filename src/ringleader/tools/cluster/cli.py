"""`ringleader cluster run|attach|status|stop|exec|sync`: the command line (argparse) and
bad-input handling."""

import argparse
import io
import re
import socket
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import IO

from ringleader.config.hyperparameters import as_count
from ringleader.config.image import python_range
from ringleader.config.job import MPI, TORCH_DISTRIBUTED
from ringleader.core import exitcodes
from ringleader.core.errors import ConfigError
from ringleader.tools.cluster.hostfile import (
    ClusterHost,
    parse_host_list,
    parse_hostfile,
    processes_per_host,
)
from ringleader.tools.cluster.jobroot import default_root
from ringleader.tools.cluster.registry import NO_SUCH_JOB, WAIT_TIMED_OUT, check_job_id
from ringleader.tools.cluster.ssh import SshOptions
from ringleader.tools.local.errors import UsageError
from ringleader.tools.local.options import add_restart_options, parse_env, restart_settings

_BWLIMIT = re.compile(r"\d+(\.\d+)?[KMGkmg]?")  # rsync's --bwlimit: KiB/s, or a unit


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
            "Exit code: the job's. Ctrl-C stops the job on every host. With --detach the job "
            "runs on in the background on the leader: see attach, status and stop."
        ),
    )
    _add_hosts(run)
    run.add_argument("--processes-per-host", type=int, help="ranks per host (default: slots)")
    run.add_argument("--distribution", choices=(MPI, TORCH_DISTRIBUTED), default=MPI)
    run.add_argument(
        "--output",
        type=Path,
        help="where every host's output/ and model/ land (default ./ringleader-output/<job>)",
    )
    run.add_argument(
        "--remote-dir",
        default=default_root(),
        help=f"each host's job directory is REMOTE_DIR/<job> (default {default_root()}, with "
        "your user id; it must be yours with mode 0700 on every host, and is made so)",
    )
    run.add_argument(
        "--bootstrap",
        action="store_true",
        help="install this machine's ringleader (and what it needs that a host lacks) into "
        "~/.ringleader/venv on hosts that lack it or have another version",
    )
    _add_python(run)
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
    run.add_argument(
        "--hang-timeout",
        metavar="SECONDS",
        help="end the job as hung, with every rank's stacks, when no rank makes progress for "
        "this long (ringleader_hang_timeout; default: off)",
    )
    add_restart_options(run)
    run.add_argument(
        "--spares",
        type=_spare_count,
        default=0,
        metavar="K",
        help="the last K hosts of the hostfile stand by: a spare replaces a host that fails "
        "its preflight and, with --max-restarts N (needed for this), a host lost during the "
        "job, which then starts again on the hosts left and the spare, its attempts counted "
        "against N (default: 0)",
    )
    run.add_argument(
        "--mpi-options",
        default="",
        help="extra mpirun options (sagemaker_mpi_custom_mpi_options), e.g. '-x NCCL_DEBUG=INFO'",
    )
    run.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a variable for every rank on every host (repeatable; values are never printed)",
    )
    run.add_argument(
        "--detach",
        action="store_true",
        help="run the job in the background on the leader (it outlives this command, the "
        "terminal and the ssh session); prints the job id",
    )
    run.add_argument(
        "--start-timeout",
        type=float,
        default=60.0,
        help="--detach: seconds the leader may take to start the job (default 60)",
    )
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARG...")
    run.set_defaults(func=_guarded(_run))

    attach = commands.add_parser(
        "attach",
        help="follow a detached job's output from its beginning; exit with its code",
        description=(
            "Print a detached job's output from the beginning and follow it until the job "
            f"ends; exit with the job's exit code ({NO_SUCH_JOB_TEXT}; {TIMEOUT_TEXT}). "
            "Ctrl-C detaches again; the job goes on."
        ),
    )
    _add_hosts(attach)
    _add_job(attach)
    _add_python(attach)
    attach.add_argument(
        "--timeout", type=float, help="stop following after this many seconds (default: none)"
    )
    attach.set_defaults(func=_guarded(_attach))

    status = commands.add_parser(
        "status",
        help="list the leader's detached jobs (running/ended, exit code, results)",
        description=f"One job or every job on the leader ({NO_SUCH_JOB_TEXT}).",
    )
    _add_hosts(status)
    _add_job(status, optional=True)
    _add_python(status)
    status.set_defaults(func=_guarded(_status))

    stop = commands.add_parser(
        "stop",
        help="stop a detached job as Ctrl-C stops a foreground one (exit 143 everywhere)",
        description=(
            "SIGTERM to the job's runner on the leader, which stops the job on every host as "
            "Ctrl-C stops a foreground run; then wait for it to end. Exit 0 once it has ended "
            f"({NO_SUCH_JOB_TEXT}; {TIMEOUT_TEXT})."
        ),
    )
    _add_hosts(stop)
    _add_job(stop)
    _add_python(stop)
    stop.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the end (default 60)"
    )
    stop.set_defaults(func=_guarded(_stop))

    exec_ = commands.add_parser(
        "exec", help="run a command on every host at once", description="Output tagged by host."
    )
    _add_hosts(exec_)
    exec_.add_argument("--timeout", type=float, help="seconds per host (default: none)")
    exec_.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARG...")
    exec_.set_defaults(func=_guarded(_exec), python=None)  # runs no Python of ours

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
    _add_python(sync)
    sync.add_argument("--timeout", type=float, help="seconds per host (default: none)")
    sync.add_argument(
        "--bwlimit",
        metavar="RATE",
        help="cap each host's transfer, as rsync's --bwlimit (20M: 20 MiB/s; a directory only)",
    )
    sync.add_argument("source", help="a local directory or s3://bucket/prefix")
    sync.add_argument("destination", help="the directory on every host")
    sync.set_defaults(func=_guarded(_sync))


NO_SUCH_JOB_TEXT = f"exit {NO_SUCH_JOB} when the leader has no such job"
TIMEOUT_TEXT = f"exit {WAIT_TIMED_OUT} when --timeout passes first"


def _add_job(parser: argparse.ArgumentParser, optional: bool = False) -> None:
    parser.add_argument(
        "job", nargs="?" if optional else None, help="the job id `run --detach` printed"
    )
    parser.add_argument(
        "--remote-dir",
        default=default_root(),
        help=f"the --remote-dir the job was started with (default {default_root()})",
    )


def _add_python(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--python",
        metavar="PATH",
        help=f"the hosts' Python interpreter (Python {python_range()}; it need not be this "
        "machine's version), e.g. /usr/bin/python3.12 or a venv's bin/python (default: the "
        "venv --bootstrap made, else python3 on the hosts' PATH)",
    )


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


USAGE_ERROR = 2


def _spare_count(text: str) -> int:
    """--spares: a whole number of at least 0 (argparse's error, exit 2, as --max-restarts)."""
    try:
        return as_count("--spares", text)
    except ConfigError as error:
        raise argparse.ArgumentTypeError(error.problem) from None


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
    return SshOptions(args.connect_timeout, tuple(args.ssh_option), remote_python(args.python))


def remote_python(value: str | None) -> str | None:
    """The --python value, checked: a path (or a command on the hosts' PATH), one line."""
    if value is None:
        return None
    if not value.strip() or "\n" in value or "\0" in value:
        raise ConfigError(
            "--python",
            f"expected the path of the hosts' Python interpreter, e.g. /usr/bin/python3.12, "
            f"got {value!r}",
        )
    return value


def _settings(values: list[str], flags: dict[str, str] | None = None) -> dict[str, str]:
    settings = dict(flags or {})
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError("--setting", f"expected NAME=VALUE, got {item!r}")
        settings[key.removeprefix("ringleader_")] = value
    return settings


def _flag_settings(args: argparse.Namespace) -> dict[str, str]:
    """ringleader_* settings (without the prefix) given as dedicated flags."""
    settings = restart_settings(args)
    if args.hang_timeout is not None:
        settings["hang_timeout"] = args.hang_timeout
    return settings


def _run(args: argparse.Namespace) -> int:
    from ringleader.tools.cluster.run import (
        ClusterJob,
        ClusterRun,
        check_remote_dir,
        headline,
        split_spares,
        with_defaults,
    )

    env = parse_env(args.env)  # first: a bad --env starts nothing, not even ssh
    hosts = read_hosts(args)
    source = "the hostfile" if args.host_list is None else "the -H list"
    active, spares = split_spares(hosts, args.spares, source)
    job = with_defaults(
        ClusterJob(
            hosts=active,
            spares=spares,
            command=tuple(_command(args)),
            cwd="",
            processes_per_host=processes_per_host(hosts, args.processes_per_host),
            distribution=args.distribution,
            settings=_settings(args.setting, _flag_settings(args)),
            output_dir=args.output,
            remote_dir=args.remote_dir,
            ssh=_ssh(args),
            bootstrap=args.bootstrap,
            min_free_bytes=int(args.min_free_gb * (1 << 30)),
            preflight_timeout=args.preflight_timeout,
            mpi_options=args.mpi_options,
            env=env,
        )
    )
    check_remote_dir(job)
    if spares:  # each later run of the job (on spares) has a longer job id
        check_remote_dir(replace(job, job_id=f"{job.job_id}-r{len(spares)}"))
    if not args.detach:
        return ClusterRun(job).run()
    from ringleader.tools.cluster.remote import start_detached

    tee = _Tee(sys.stdout)
    launcher = ClusterRun(job, tee)
    launcher.console.line(headline(job))
    code = launcher.preflight()
    if code is not None:
        return code
    # the hosts as preflight left them (a spare in the place of a host that failed it)
    return start_detached(launcher.job, tee.lines, args.start_timeout, sys.stdout)


class _Tee(io.StringIO):
    """The launcher's own output (headline, preflight), kept for the detached job's log."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__()
        self.stream = stream

    def write(self, text: str) -> int:
        super().write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    @property
    def lines(self) -> list[str]:
        return self.getvalue().splitlines()


def _attach(args: argparse.Namespace) -> int:
    verb = ["attach", args.remote_dir, check_job_id(args.job)]
    if args.timeout is not None:
        verb += ["--timeout", str(args.timeout)]
    return _on_leader(args, verb)


def _status(args: argparse.Namespace) -> int:
    job = [] if args.job is None else [check_job_id(args.job)]
    return _on_leader(args, ["status", args.remote_dir, *job])


def _stop(args: argparse.Namespace) -> int:
    return _on_leader(
        args, ["stop", args.remote_dir, check_job_id(args.job), "--timeout", str(args.timeout)]
    )


def _on_leader(args: argparse.Namespace, verb: list[str]) -> int:
    from ringleader.tools.cluster.remote import on_leader

    return on_leader(read_hosts(args), _ssh(args), verb)


def _exec(args: argparse.Namespace) -> int:
    from ringleader.tools.cluster.fanout import Fanout, overall_exit_code

    fanout = Fanout(read_hosts(args), _ssh(args), sys.stdout)
    return overall_exit_code(fanout.exec(_command(args), args.timeout))


def _sync(args: argparse.Namespace) -> int:
    from ringleader.tools.cluster.fanout import Fanout, overall_exit_code

    if not args.source.startswith("s3://") and not Path(args.source).is_dir():
        raise ConfigError("SRC", f"{args.source!r} is not a directory (or an s3:// prefix)")
    if args.bwlimit is not None:
        if args.source.startswith("s3://"):
            raise ConfigError("--bwlimit", "rsync's limit; it does not apply to an s3:// source")
        if not _BWLIMIT.fullmatch(args.bwlimit):
            raise ConfigError("--bwlimit", f"a rate such as 800K or 20M, not {args.bwlimit!r}")
    fanout = Fanout(read_hosts(args), _ssh(args), sys.stdout)
    return overall_exit_code(fanout.sync(args.source, args.destination, args.timeout, args.bwlimit))


def _guarded(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Bad input: the field and what was expected, exit 78 (a bad flag's syntax, as for
    `ringleader local`: exit 2), nothing started."""

    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except UsageError as error:
            print(f"ringleader cluster: {error}", file=sys.stderr)
            return USAGE_ERROR
        except ConfigError as error:
            print(f"ringleader cluster: {error}", file=sys.stderr)
            return exitcodes.CONFIG_ERROR

    return run
