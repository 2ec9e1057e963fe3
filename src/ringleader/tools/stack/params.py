"""Validating the stack command's input, before anything is sent to AWS.

Every function here is pure: raw strings in (from the command line and the environment),
frozen dataclasses out, or an InvalidInput that names the option and what it expects.
"""

from __future__ import annotations

import ipaddress
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_STACK_NAME = "ringleader-training-vpc"
DEFAULT_VPC_CIDR = "10.20.0.0/16"
DEFAULT_PUBLIC_SUBNET_CIDR = "10.20.0.0/24"
DEFAULT_PRIVATE_SUBNET_A_CIDR = "10.20.16.0/20"
DEFAULT_PRIVATE_SUBNET_B_CIDR = "10.20.32.0/20"
DEFAULT_NOTEBOOK_INSTANCE_TYPE = "ml.t3.medium"
DEFAULT_FSX_S3_PREFIX = "fsx"
DEFAULT_ECR_REPOSITORY = "ringleader"
DEFAULT_CREATE_TIMEOUT = 3600  # seconds: NAT gateway, notebook and FSx each take minutes
DEFAULT_DELETE_TIMEOUT = 1800
DEFAULT_POLL_DELAY = 10  # seconds between two DescribeStacks calls of a waiter
MAX_WAIT_TIMEOUT = 24 * 3600

REGION_ENV_VARS = ("AWS_REGION", "AWS_DEFAULT_REGION")

_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$")
_STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,127}$")
# The notebook role may start only jobs named "<stack name>-...". SageMaker has written job
# names in ARNs in lower case, and the Python SDK cuts a base_job_name to 63 - 24 characters
# (a hyphen and a 23-character timestamp follow), so a new stack's name must survive both.
MAX_NEW_STACK_NAME = 39
_NEW_STACK_NAME = re.compile(r"^[a-z][a-z0-9-]*$")
_BUCKET_CHARS = re.compile(r"^[a-z0-9.-]+$")
_IPV4_LIKE = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
_BUCKET_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
_EFS_ID = re.compile(r"^fs-([0-9a-f]{8}|[0-9a-f]{17})$")
_FSX_SIZE = re.compile(r"^(0|[1-9][0-9]{3,7})$")
_S3_PREFIX_SEGMENT = re.compile(r"^[A-Za-z0-9_.-]{1,255}$")
_INSTANCE_TYPE = re.compile(r"^ml\.[a-z0-9]+\.[a-z0-9]+$")
# The template's AllowedPattern for EcrRepositoryName, character for character (a test holds
# them equal), so that create refuses here what CloudFormation would refuse later.
ECR_REPOSITORY_PATTERN = r"^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*$"
_ECR_REPOSITORY = re.compile(ECR_REPOSITORY_PATTERN)
_CODE_REPOSITORY_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
_WHOLE_NUMBER = re.compile(r"^[0-9]{1,9}$")
_MIN_PREFIX, _MAX_PREFIX = 16, 28


class InvalidInput(ValueError):
    """An option's value that the stack command refuses before calling AWS."""

    def __init__(self, option: str, expected: str, got: str | None = None) -> None:
        self.option = option
        self.expected = expected
        self.got = got
        if got is None:
            message = f"{option} is required: expected {expected}"
        else:
            message = f"{option}: expected {expected}; got {got!r}"
        super().__init__(message)


@dataclass(frozen=True)
class WaitPolicy:
    """A bounded waiter: at most max_attempts polls, delay seconds apart."""

    delay: int
    max_attempts: int

    @classmethod
    def for_timeout(cls, timeout: int, delay: int = DEFAULT_POLL_DELAY) -> WaitPolicy:
        delay = max(1, min(delay, timeout))
        return cls(delay=delay, max_attempts=timeout // delay + 1)


@dataclass(frozen=True)
class Target:
    """Which stack: every sub-command needs these two."""

    region: str
    stack_name: str


@dataclass(frozen=True)
class Network:
    vpc_cidr: str
    public_subnet_cidr: str
    private_subnet_a_cidr: str
    private_subnet_b_cidr: str


@dataclass(frozen=True)
class CreateParams:
    target: Target
    bucket: str
    network: Network
    create_efs: bool
    existing_efs_id: str | None
    fsx_storage_gib: int  # 0: no FSx file system
    fsx_s3_prefix: str
    export_deletions: bool  # only with FSx
    ecr_repository: str
    git_repository: str | None
    notebook_instance_type: str
    wait_timeout: int

    def cfn_parameters(self) -> dict[str, str]:
        """The template's parameters, every one given explicitly."""
        return {
            "BucketName": self.bucket,
            "VpcCidr": self.network.vpc_cidr,
            "PublicSubnetCidr": self.network.public_subnet_cidr,
            "PrivateSubnetACidr": self.network.private_subnet_a_cidr,
            "PrivateSubnetBCidr": self.network.private_subnet_b_cidr,
            "CreateEfsFileSystem": "true" if self.create_efs else "false",
            "ExistingEfsId": self.existing_efs_id or "",
            "FsxStorageCapacity": str(self.fsx_storage_gib),
            "FsxS3Prefix": self.fsx_s3_prefix,
            "ExportDeletions": "true" if self.export_deletions else "false",
            "EcrRepositoryName": self.ecr_repository,
            "NotebookInstanceType": self.notebook_instance_type,
            "GitRepository": self.git_repository or "",
        }


@dataclass(frozen=True)
class RawCreateOptions:
    """The create command's options as typed, None where not given."""

    region: str | None = None
    stack_name: str | None = None
    bucket: str | None = None
    efs_id: str | None = None
    create_efs: bool = False
    fsx: str | None = None
    fsx_s3_prefix: str | None = None
    export_deletions: bool = False
    ecr_repository: str | None = None
    git_repository: str | None = None
    vpc_cidr: str | None = None
    public_subnet_cidr: str | None = None
    private_subnet_a_cidr: str | None = None
    private_subnet_b_cidr: str | None = None
    notebook_instance_type: str | None = None
    wait_timeout: str | None = None


def parse_target(region: str | None, stack_name: str | None, env: Mapping[str, str]) -> Target:
    return Target(region=parse_region(region, env), stack_name=parse_stack_name(stack_name))


def parse_region(value: str | None, env: Mapping[str, str]) -> str:
    expected = "an AWS region such as us-east-1"
    if value is None:
        value = next((env[name] for name in REGION_ENV_VARS if env.get(name)), None)
        if value is None:
            raise InvalidInput("--region", f"{expected} (or AWS_REGION / AWS_DEFAULT_REGION set)")
        if not _REGION.match(value):
            raise InvalidInput("--region", f"{expected} (taken from the environment)", value)
        return value
    if not _REGION.match(value):
        raise InvalidInput("--region", expected, value)
    return value


def parse_stack_name(value: str | None) -> str:
    if value is None:
        return DEFAULT_STACK_NAME
    if not _STACK_NAME.match(value):
        raise InvalidInput(
            "--stack-name",
            "a CloudFormation stack name: a letter, then letters, digits and hyphens, "
            "at most 128 characters",
            value,
        )
    return value


def check_new_stack_name(name: str) -> str:
    """A name for a stack about to be created: it also prefixes the names of its jobs."""
    if len(name) > MAX_NEW_STACK_NAME or not _NEW_STACK_NAME.match(name):
        raise InvalidInput(
            "--stack-name",
            "for a new stack, a lowercase letter, then lowercase letters, digits and hyphens, "
            f"at most {MAX_NEW_STACK_NAME} characters (it prefixes the names of its training "
            "jobs, which the notebook role is limited to)",
            name,
        )
    return name


def bucket_name_problem(name: str) -> str | None:
    """Which of S3's rules for general purpose bucket names the name breaks, if any."""
    if not 3 <= len(name) <= 63:
        return f"it has {len(name)} characters, not 3 to 63"
    if not _BUCKET_CHARS.match(name):
        bad = sorted({c for c in name if not _BUCKET_CHARS.match(c)})
        return (
            f"it contains {''.join(bad)!r}; only lowercase letters, digits, '.' and '-' are allowed"
        )
    if not (name[0].isalnum() and name[-1].isalnum()):
        return "it must begin and end with a lowercase letter or a digit"
    if ".." in name:
        return "it has two adjacent periods"
    if _IPV4_LIKE.match(name):
        return "it is formatted as an IP address"
    for prefix in _BUCKET_RESERVED_PREFIXES:
        if name.startswith(prefix):
            return f"the prefix {prefix!r} is reserved"
    for suffix in _BUCKET_RESERVED_SUFFIXES:
        if name.endswith(suffix):
            return f"the suffix {suffix!r} is reserved"
    return None


def parse_bucket(value: str | None) -> str:
    expected = "the name of an existing S3 bucket (3-63 characters: a-z, 0-9, '.', '-')"
    if value is None or value == "":
        raise InvalidInput("--bucket", expected)
    if value.startswith("s3://"):
        raise InvalidInput("--bucket", f"{expected}, without s3://", value)
    problem = bucket_name_problem(value)
    if problem is not None:
        raise InvalidInput("--bucket", f"{expected}, but {problem}", value)
    return value


def parse_efs_id(value: str | None) -> str | None:
    if value is None:
        return None
    if not _EFS_ID.match(value):
        raise InvalidInput(
            "--efs-id",
            "an EFS file system id: fs- followed by 17 (or, for older file systems, 8) "
            "lowercase hexadecimal digits",
            value,
        )
    return value


def parse_fsx_size(value: str | None) -> int:
    if value is None:
        return 0
    expected = "an FSx for Lustre size in GiB: 1200 or a multiple of 2400 (0 for none)"
    if not _FSX_SIZE.match(value):
        raise InvalidInput("--fsx", expected, value)
    size = int(value)
    if size not in (0, 1200) and size % 2400 != 0:
        raise InvalidInput("--fsx", expected, value)
    return size


def parse_s3_prefix(value: str | None) -> str:
    if value is None:
        return DEFAULT_FSX_S3_PREFIX
    expected = "a key prefix in the bucket such as data/train: letters, digits, '_', '.', '-', '/'"
    stripped = value.strip("/")
    segments = stripped.split("/")
    if not stripped or len(segments) > 21:
        raise InvalidInput("--fsx-s3-prefix", expected, value)
    for segment in segments:
        if not _S3_PREFIX_SEGMENT.match(segment) or segment in (".", ".."):
            raise InvalidInput("--fsx-s3-prefix", expected, value)
    return stripped


def parse_ecr_repository(value: str | None) -> str:
    if value is None:
        return DEFAULT_ECR_REPOSITORY
    expected = (
        "the name of an ECR repository in the stack's account and region, such as ringleader "
        "or team/ringleader: lowercase letters and digits, separated by single '.', '_', '-' "
        "or '/'"
    )
    # A registry host also fits the pattern, and the job role would then name a repository
    # that does not exist: jobs would fail only when they pull.
    if ".dkr.ecr." in value.split("/", 1)[0]:
        raise InvalidInput(
            "--ecr-repository", f"{expected} (the name only, without the registry host)", value
        )
    # fullmatch: re.match's "$" also matches before a trailing newline.
    if not _ECR_REPOSITORY.fullmatch(value):
        raise InvalidInput("--ecr-repository", f"{expected} (no tag or digest)", value)
    return value


def parse_git_repository(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    expected = "an https:// Git URL without credentials, or the name of a SageMaker code repository"
    if _CODE_REPOSITORY_NAME.match(value):
        return value
    if len(value) > 1024 or any(c.isspace() for c in value):
        raise InvalidInput("--git-repository", expected, value)
    parts = urlsplit(value)
    if parts.scheme != "https" or not parts.hostname:
        raise InvalidInput("--git-repository", expected, value)
    if "@" in parts.netloc:
        raise InvalidInput("--git-repository", f"{expected} (it must not embed a user)", value)
    try:
        port = parts.port
    except ValueError:
        raise InvalidInput("--git-repository", expected, value) from None
    if port is not None and not 1 <= port <= 65535:
        raise InvalidInput("--git-repository", expected, value)
    return value


def parse_instance_type(value: str | None) -> str:
    if value is None:
        return DEFAULT_NOTEBOOK_INSTANCE_TYPE
    if not _INSTANCE_TYPE.match(value):
        raise InvalidInput(
            "--notebook-instance-type", "a SageMaker instance type such as ml.t3.medium", value
        )
    return value


def parse_timeout(value: str | None, default: int, option: str = "--wait-timeout") -> int:
    if value is None:
        return default
    expected = f"a whole number of seconds from 1 to {MAX_WAIT_TIMEOUT}"
    if not _WHOLE_NUMBER.match(value) or not 1 <= int(value) <= MAX_WAIT_TIMEOUT:
        raise InvalidInput(option, expected, value)
    return int(value)


def _parse_cidr(option: str, value: str) -> ipaddress.IPv4Network:
    expected = f"an IPv4 CIDR block with a prefix length from /{_MIN_PREFIX} to /{_MAX_PREFIX}"
    if "/" not in value:
        raise InvalidInput(option, expected, value)
    try:
        interface = ipaddress.IPv4Interface(value)
    except ValueError:
        raise InvalidInput(option, expected, value) from None
    network = interface.network
    if interface.ip != network.network_address:
        raise InvalidInput(
            option, f"{expected} without host bits set (did you mean {network}?)", value
        )
    if str(network) != value:
        raise InvalidInput(option, f"{expected}, written as {network}", value)
    if not _MIN_PREFIX <= network.prefixlen <= _MAX_PREFIX:
        raise InvalidInput(option, expected, value)
    return network


def default_subnets(vpc: ipaddress.IPv4Network) -> tuple[ipaddress.IPv4Network, ...]:
    """Public, private A and private B subnets when none are given.

    The default VPC gets the documented defaults; any other VPC is carved into quarters:
    a small public subnet at the start of the first quarter, the private subnets in the
    second and third (the fourth is left free).
    """
    if str(vpc) == DEFAULT_VPC_CIDR:
        defaults = (
            DEFAULT_PUBLIC_SUBNET_CIDR,
            DEFAULT_PRIVATE_SUBNET_A_CIDR,
            DEFAULT_PRIVATE_SUBNET_B_CIDR,
        )
        return tuple(ipaddress.IPv4Network(cidr) for cidr in defaults)
    if vpc.prefixlen > _MAX_PREFIX - 2:
        raise InvalidInput(
            "--vpc-cidr",
            f"a VPC of /{_MAX_PREFIX - 2} or larger, so that three subnets of "
            f"/{_MAX_PREFIX} or larger fit; or give the three subnet CIDRs",
            str(vpc),
        )
    quarters = list(vpc.subnets(prefixlen_diff=2))
    public = next(quarters[0].subnets(new_prefix=max(quarters[0].prefixlen, 24)))
    return (public, quarters[1], quarters[2])


def parse_network(
    vpc: str | None, public: str | None, private_a: str | None, private_b: str | None
) -> Network:
    vpc_net = _parse_cidr("--vpc-cidr", vpc or DEFAULT_VPC_CIDR)
    given = {
        "--public-subnet-cidr": public,
        "--private-subnet-a-cidr": private_a,
        "--private-subnet-b-cidr": private_b,
    }
    defaults = default_subnets(vpc_net) if None in given.values() else None
    subnets: dict[str, ipaddress.IPv4Network] = {}
    for index, (option, value) in enumerate(given.items()):
        if value is not None:
            subnets[option] = _parse_cidr(option, value)
        else:
            assert defaults is not None
            subnets[option] = defaults[index]
    for option, net in subnets.items():
        if not net.subnet_of(vpc_net):
            raise InvalidInput(option, f"a CIDR inside --vpc-cidr {vpc_net}", str(net))
    for (first, a), (second, b) in itertools.combinations(subnets.items(), 2):
        if a.overlaps(b):
            raise InvalidInput(second, f"a CIDR that does not overlap {first} {a}", str(b))
    return Network(
        vpc_cidr=str(vpc_net),
        public_subnet_cidr=str(subnets["--public-subnet-cidr"]),
        private_subnet_a_cidr=str(subnets["--private-subnet-a-cidr"]),
        private_subnet_b_cidr=str(subnets["--private-subnet-b-cidr"]),
    )


def parse_create(raw: RawCreateOptions, env: Mapping[str, str]) -> CreateParams:
    """All of the create command's checks, in the order the options are usually read."""
    target = parse_target(raw.region, raw.stack_name, env)
    check_new_stack_name(target.stack_name)
    bucket = parse_bucket(raw.bucket)
    existing_efs_id = parse_efs_id(raw.efs_id)
    if existing_efs_id is not None and raw.create_efs:
        raise InvalidInput(
            "--efs-id", "either --efs-id (mount an existing file system) or --create-efs, not both"
        )
    fsx_size = parse_fsx_size(raw.fsx)
    fsx_prefix = parse_s3_prefix(raw.fsx_s3_prefix)
    if raw.fsx_s3_prefix is not None and fsx_size == 0:
        raise InvalidInput("--fsx", "a size when --fsx-s3-prefix is given")
    if raw.export_deletions and fsx_size == 0:
        # Without FSx there is no data repository association to export anything.
        raise InvalidInput(
            "--fsx",
            "an FSx for Lustre size in GiB (not 0) when --export-deletions is given: "
            "deletions are exported from FSx to S3",
            raw.fsx,
        )
    return CreateParams(
        target=target,
        bucket=bucket,
        network=parse_network(
            raw.vpc_cidr,
            raw.public_subnet_cidr,
            raw.private_subnet_a_cidr,
            raw.private_subnet_b_cidr,
        ),
        create_efs=raw.create_efs,
        existing_efs_id=existing_efs_id,
        fsx_storage_gib=fsx_size,
        fsx_s3_prefix=fsx_prefix,
        export_deletions=raw.export_deletions,
        ecr_repository=parse_ecr_repository(raw.ecr_repository),
        git_repository=parse_git_repository(raw.git_repository),
        notebook_instance_type=parse_instance_type(raw.notebook_instance_type),
        wait_timeout=parse_timeout(raw.wait_timeout, DEFAULT_CREATE_TIMEOUT),
    )
