"""cfn/training-vpc.yaml and `ringleader stack` against moto, in-process (never AWS).

What moto (5.x) does with this template, found by reading moto/cloudformation/parsing.py and
pinned by test_what_moto_skips_and_cannot_do below:
- It creates the VPC, subnets, internet and NAT gateways, EIP, route tables and routes, the S3
  gateway endpoint, the security group and its self-ingress rule, the KMS key and alias (its
  DescribeKey then fails on the key policy CloudFormation passed as an object), the
  IAM role and policies, EFS file systems and mount targets, and the notebook instance and its
  lifecycle configuration, and resolves every output.
- It skips AWS::EC2::SecurityGroupEgress and AWS::FSx::DataRepositoryAssociation (a warning,
  no resource), ignores the security group's inline egress (moto's group keeps its default
  allow-all egress), and creates the notebook from InstanceType and RoleArn only (SubnetId,
  SecurityGroupIds, DirectInternetAccess, KmsKeyId, LifecycleConfigName are dropped); the
  policy test (test_cfn_policy.py) checks those properties on the template instead.
- It has an FSx API backend but no CloudFormation model for AWS::FSx::FileSystem: a stack
  with FSx fails. The fsx_on_moto fixture maps that type onto moto's own FSx backend so that
  the FSx combinations run (StorageCapacity, subnets, group, key and Lustre configuration
  reach moto's FSx file system); its LustreMountName is made up, as moto's FSx has none.
- It creates a stack synchronously inside CreateStack: a resource it rejects makes CreateStack
  itself fail, leaving a stack in CREATE_IN_PROGRESS with no resource events; there is no
  rollback. The cloudformation_rollback fixture turns such a failure into what CloudFormation
  does (CREATE_FAILED event of the resource, ROLLBACK_COMPLETE), so the command's rollback
  path is exercised with moto's real rejection of a resource property.
- It records subnet route table associations but leaves them out of DescribeRouteTables, so
  which table a subnet uses is checked on the template (test_cfn_policy.py).
- Its DeleteStack never deletes AWS::EC2::RouteTable, so deleting this template's stack fails
  with DependencyViolation on the VPC; the delete command is tested on a one-VPC stack.
"""

from __future__ import annotations

import ast
import base64
import json
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

import boto3
import pytest
from moto import mock_aws
from moto.cloudformation import models as cfn_models
from moto.cloudformation import parsing
from moto.core.models import DEFAULT_ACCOUNT_ID as ACCOUNT
from moto.fsx.models import fsx_backends
from moto.sagemaker.models import sagemaker_backends

from ringleader.tools.cli import main
from ringleader.tools.stack.client import StackClient
from ringleader.tools.stack.params import Target, WaitPolicy
from ringleader.tools.stack.render import outputs_from_api, parse_outputs
from ringleader.tools.stack.template import load_template

pytestmark = pytest.mark.filterwarnings(
    "ignore:Tried to parse .* not supported by moto.s CloudFormation:UserWarning"
)

REGION = "us-east-1"
BUCKET = "ringleader-test-data"
TEMPLATE = load_template()
JOB_ROLE_POLICIES = {"ringleader-training"}
NOTEBOOK_ROLE_POLICIES = {"ringleader-notebook"}


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    with mock_aws():
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
        yield


@pytest.fixture
def api_calls(aws: None) -> list[tuple[str, dict[str, Any]]]:
    """(operation, parameters) of every CloudFormation call made through boto3's default
    session, which is what the command uses."""
    calls: list[tuple[str, dict[str, Any]]] = []

    def record(params: dict[str, Any], model: Any, **kwargs: Any) -> None:
        calls.append((model.name, dict(params)))

    boto3.setup_default_session()
    assert boto3.DEFAULT_SESSION is not None
    boto3.DEFAULT_SESSION.events.register("provide-client-params.cloudformation", record)
    return calls


class FsxLustreOnMoto:
    """AWS::FSx::FileSystem for moto's CloudFormation, backed by moto's own FSx backend."""

    ATTRIBUTES = ("DNSName", "LustreMountName")

    def __init__(self, file_system: Any, region_name: str, account_id: str) -> None:
        self.file_system = file_system
        self.region_name = region_name
        self.account_id = account_id

    @classmethod
    def has_cfn_attr(cls, attr: str) -> bool:
        return attr in cls.ATTRIBUTES

    @classmethod
    def create_from_cloudformation_json(
        cls,
        resource_name: str,
        cloudformation_json: dict[str, Any],
        account_id: str,
        region_name: str,
        **kwargs: Any,
    ) -> FsxLustreOnMoto:
        props = cloudformation_json["Properties"]
        file_system = fsx_backends[account_id][region_name].create_file_system(
            client_request_token=resource_name,
            file_system_type=props["FileSystemType"],
            storage_capacity=int(props["StorageCapacity"]),
            storage_type=props.get("StorageType", "SSD"),
            subnet_ids=props["SubnetIds"],
            security_group_ids=props.get("SecurityGroupIds", []),
            tags=props.get("Tags"),
            kms_key_id=props.get("KmsKeyId"),
            windows_configuration=None,
            lustre_configuration=props.get("LustreConfiguration"),
            ontap_configuration=None,
            file_system_type_version=props.get("FileSystemTypeVersion"),
            open_zfs_configuration=None,
        )
        return cls(file_system, region_name, account_id)

    @property
    def physical_resource_id(self) -> str:
        return str(self.file_system.file_system_id)

    def get_cfn_attribute(self, name: str) -> str:
        if name == "DNSName":
            return str(self.file_system.dns_name)
        if name == "LustreMountName":
            return self.mount_name(self.physical_resource_id)
        raise KeyError(name)

    @staticmethod
    def mount_name(file_system_id: str) -> str:
        return file_system_id.removeprefix("fs-")[:8]

    def is_created(self) -> bool:
        return True

    def delete(self, account_id: str, region_name: str) -> None:
        fsx_backends[account_id][region_name].file_systems.pop(self.physical_resource_id)


@pytest.fixture
def fsx_on_moto(monkeypatch: pytest.MonkeyPatch) -> None:
    models = parsing.get_model_map()

    def with_fsx() -> dict[str, Any]:
        return {**models, "AWS::FSx::FileSystem": FsxLustreOnMoto}

    monkeypatch.setattr(parsing, "get_model_map", with_fsx)


class ResourceFailed(Exception):
    def __init__(self, logical_id: str, resource_type: str, error: Exception) -> None:
        super().__init__(f"{logical_id}: {error}")
        self.logical_id = logical_id
        self.resource_type = resource_type
        self.error = error


class NoOutputs:
    """A rolled-back stack has no outputs."""

    exports: ClassVar[list[Any]] = []

    def values(self) -> list[Any]:
        return []


def roll_back(stack: Any, failed: ResourceFailed) -> None:
    """What CloudFormation records when a resource fails to create."""

    def resource_event(status: str, reason: str | None = None) -> None:
        stack.events.append(
            cfn_models.Event(
                stack_id=stack.stack_id,
                stack_name=stack.name,
                logical_resource_id=failed.logical_id,
                physical_resource_id="",
                resource_type=failed.resource_type,
                resource_status=status,
                resource_status_reason=reason,
                resource_properties=None,
            )
        )

    resource_event("CREATE_IN_PROGRESS")
    resource_event("CREATE_FAILED", str(failed.error))
    stack._add_stack_event(
        "ROLLBACK_IN_PROGRESS",
        f"The following resource(s) failed to create: [{failed.logical_id}]. "
        "Rollback requested by user.",
    )
    stack.output_map = NoOutputs()
    stack.status = "ROLLBACK_COMPLETE"
    stack._add_stack_event("ROLLBACK_COMPLETE")


@pytest.fixture
def cloudformation_rollback(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto's synchronous resource failure, turned into CloudFormation's rollback."""
    create_resource = parsing.parse_and_create_resource

    def create_or_fail(
        logical_id: str, resource_json: dict[str, Any], *args: Any, **kwargs: Any
    ) -> Any:
        try:
            return create_resource(logical_id, resource_json, *args, **kwargs)
        except ResourceFailed:
            raise
        except Exception as error:
            raise ResourceFailed(logical_id, resource_json["Type"], error) from error

    create_resources = cfn_models.Stack.create_resources

    def create_or_roll_back(stack: Any) -> None:
        try:
            create_resources(stack)
        except ResourceFailed as failed:
            roll_back(stack, failed)

    monkeypatch.setattr(parsing, "parse_and_create_resource", create_or_fail)
    monkeypatch.setattr(cfn_models.Stack, "create_resources", create_or_roll_back)


@pytest.fixture
def slow_stacks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stacks that stay CREATE_IN_PROGRESS, like one that outlasts --wait-timeout."""
    monkeypatch.setattr(cfn_models.Stack, "mark_creation_complete", lambda stack: None)


# ---------------------------------------------------------------------------- helpers
def create_stack(name: str, parameters: dict[str, str]) -> dict[str, str]:
    cfn = boto3.client("cloudformation", region_name=REGION)
    cfn.create_stack(
        StackName=name,
        TemplateBody=TEMPLATE.body,
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
        Capabilities=["CAPABILITY_IAM"],
    )
    stack = cfn.describe_stacks(StackName=name)["Stacks"][0]
    assert stack["StackStatus"] == "CREATE_COMPLETE"
    return outputs_from_api(stack.get("Outputs", []))


def by_logical_id(resources: Sequence[Mapping[str, Any]], logical_id: str) -> Mapping[str, Any]:
    matches = [
        r
        for r in resources
        if {"Key": "aws:cloudformation:logical-id", "Value": logical_id} in r.get("Tags", [])
    ]
    assert len(matches) == 1, logical_id
    return matches[0]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["stack", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


BASE_OUTPUTS = {
    "VpcId",
    "PrivateSubnetIds",
    "EstimatorSubnets",
    "SecurityGroupId",
    "EstimatorSecurityGroupIds",
    "ExecutionRoleArn",
    "NotebookRoleArn",
    "TrainingJobBaseName",
    "KmsKeyArn",
    "BucketName",
    "NotebookInstanceName",
}
FSX_OUTPUTS = {
    "FsxFileSystemId",
    "FsxMountName",
    "FsxDnsName",
    "FsxFileSystemPath",
    "FsxDataRepositoryPath",
    "FsxSubnetId",
}


# ---------------------------------------------------------------------------- the template
def check_network(outputs: dict[str, str], cidrs: dict[str, str]) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc_id = outputs["VpcId"]
    assert ec2.describe_vpcs(VpcIds=[vpc_id])["Vpcs"][0]["CidrBlock"] == cidrs["VpcCidr"]
    subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["Subnets"]
    private_ids = json.loads(outputs["EstimatorSubnets"])
    assert outputs["PrivateSubnetIds"].split(",") == private_ids
    private = [by_logical_id(subnets, name) for name in ("PrivateSubnetA", "PrivateSubnetB")]
    public = by_logical_id(subnets, "PublicSubnet")
    assert [s["SubnetId"] for s in private] == private_ids
    assert [s["CidrBlock"] for s in (public, *private)] == [
        cidrs["PublicSubnetCidr"],
        cidrs["PrivateSubnetACidr"],
        cidrs["PrivateSubnetBCidr"],
    ]
    assert private[0]["AvailabilityZone"] != private[1]["AvailabilityZone"]
    assert not any(s["MapPublicIpOnLaunch"] for s in subnets)

    # moto keeps subnet associations out of DescribeRouteTables; test_cfn_policy.py checks
    # which table each subnet uses, and this checks the tables' routes.
    tables = ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])
    private_table = by_logical_id(tables["RouteTables"], "PrivateRouteTable")
    public_table = by_logical_id(tables["RouteTables"], "PublicRouteTable")

    def default_route(table: Mapping[str, Any]) -> dict[str, Any]:
        return next(r for r in table["Routes"] if r.get("DestinationCidrBlock") == "0.0.0.0/0")

    nat = ec2.describe_nat_gateways(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])
    assert [n["SubnetId"] for n in nat["NatGateways"]] == [public["SubnetId"]]
    assert default_route(private_table).get("NatGatewayId") == nat["NatGateways"][0]["NatGatewayId"]
    assert "GatewayId" not in default_route(private_table)
    igw = ec2.describe_internet_gateways(
        Filters=[{"Name": "attachment.vpc-id", "Values": [vpc_id]}]
    )["InternetGateways"]
    assert default_route(public_table)["GatewayId"] == igw[0]["InternetGatewayId"]

    endpoints = ec2.describe_vpc_endpoints(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])
    [endpoint] = endpoints["VpcEndpoints"]
    assert endpoint["ServiceName"] == f"com.amazonaws.{REGION}.s3"
    assert endpoint["VpcEndpointType"] == "Gateway"
    assert endpoint["RouteTableIds"] == [private_table["RouteTableId"]]

    [group_id] = json.loads(outputs["EstimatorSecurityGroupIds"])
    assert group_id == outputs["SecurityGroupId"]
    [group] = ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"]
    assert group["VpcId"] == vpc_id
    [ingress] = group["IpPermissions"]
    assert ingress["IpProtocol"] == "-1"
    assert [pair["GroupId"] for pair in ingress["UserIdGroupPairs"]] == [group_id]
    assert ingress["IpRanges"] == [] and ingress.get("Ipv6Ranges", []) == []


def policy_document(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    try:
        document: dict[str, Any] = json.loads(value)
    except json.JSONDecodeError:
        # moto stores the inline policies of a role created by CloudFormation as str(dict)
        document = ast.literal_eval(value)
    return document


def check_role_key_and_notebook(
    outputs: dict[str, str], instance_type: str, stack_name: str
) -> None:
    iam = boto3.client("iam", region_name=REGION)
    role_name = outputs["ExecutionRoleArn"].rsplit("/", 1)[1]
    role = iam.get_role(RoleName=role_name)["Role"]
    trust = policy_document(role["AssumeRolePolicyDocument"])
    assert trust["Statement"][0]["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    policies = set(iam.list_role_policies(RoleName=role_name)["PolicyNames"])
    assert policies >= JOB_ROLE_POLICIES
    training = iam.get_role_policy(RoleName=role_name, PolicyName="ringleader-training")
    document = policy_document(training["PolicyDocument"])
    s3_resources = [s["Resource"] for s in document["Statement"] if s["Sid"].endswith("Bucket")]
    assert s3_resources == [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"]
    kms_statement = next(s for s in document["Statement"] if s["Sid"] == "UseTheStackKey")
    assert kms_statement["Resource"] == outputs["KmsKeyArn"]

    # moto's DescribeKey fails on a key whose policy CloudFormation gave as an object.
    kms = boto3.client("kms", region_name=REGION)
    [key] = kms.list_keys()["Keys"]
    assert key["KeyArn"] == outputs["KmsKeyArn"]
    assert kms.get_key_rotation_status(KeyId=key["KeyId"])["KeyRotationEnabled"] is True
    aliases = {a["AliasName"]: a.get("TargetKeyId") for a in kms.list_aliases()["Aliases"]}
    assert aliases[f"alias/{stack_name}"] == key["KeyId"]

    sagemaker = boto3.client("sagemaker", region_name=REGION)
    notebook = sagemaker.describe_notebook_instance(
        NotebookInstanceName=outputs["NotebookInstanceName"]
    )
    assert notebook["InstanceType"] == instance_type
    # The notebook has a role of its own; the jobs' role is only passed to SageMaker.
    assert notebook["RoleArn"] == outputs["NotebookRoleArn"] != outputs["ExecutionRoleArn"]
    notebook_role = outputs["NotebookRoleArn"].rsplit("/", 1)[1]
    assert set(iam.list_role_policies(RoleName=notebook_role)["PolicyNames"]) == (
        NOTEBOOK_ROLE_POLICIES
    )
    notebook_policy = policy_document(
        iam.get_role_policy(RoleName=notebook_role, PolicyName="ringleader-notebook")[
            "PolicyDocument"
        ]
    )
    [pass_role] = [s for s in notebook_policy["Statement"] if s["Action"] == ["iam:PassRole"]]
    assert pass_role["Resource"] == outputs["ExecutionRoleArn"]
    assert outputs["TrainingJobBaseName"] == stack_name


def lifecycle_script() -> str:
    # moto has no ListNotebookInstanceLifecycleConfigs, drops the notebook's
    # LifecycleConfigName and fails DescribeStackResource on a template with resources it
    # skipped, so the config's name comes from moto's backend; its content from the API.
    backend = sagemaker_backends[ACCOUNT][REGION]
    [name] = backend.notebook_instance_lifecycle_configurations
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    described = sagemaker.describe_notebook_instance_lifecycle_config(
        NotebookInstanceLifecycleConfigName=name
    )
    return base64.b64decode(described["OnStart"][0]["Content"]).decode()


COMBINATIONS = [
    pytest.param("none", "0", "", id="no-efs-no-fsx"),
    pytest.param("new", "0", "https://github.com/org/repo.git", id="new-efs"),
    pytest.param("existing", "0", "", id="existing-efs"),
    pytest.param("none", "1200", "", id="fsx"),
    pytest.param("new", "2400", "", id="new-efs-fsx"),
    pytest.param("existing", "1200", "code-repo", id="existing-efs-fsx"),
]


@pytest.mark.usefixtures("aws", "fsx_on_moto")
@pytest.mark.parametrize(("efs", "fsx", "git"), COMBINATIONS)
def test_each_combination_of_the_optional_parts(efs: str, fsx: str, git: str) -> None:
    efs_client = boto3.client("efs", region_name=REGION)
    existing = ""
    if efs == "existing":
        existing = efs_client.create_file_system(CreationToken="kept", Encrypted=True)[
            "FileSystemId"
        ]
    cidrs = {
        "VpcCidr": "10.42.0.0/16",
        "PublicSubnetCidr": "10.42.0.0/24",
        "PrivateSubnetACidr": "10.42.64.0/18",
        "PrivateSubnetBCidr": "10.42.128.0/18",
    }
    outputs = create_stack(
        "combo",
        {
            "BucketName": BUCKET,
            **cidrs,
            "CreateEfsFileSystem": "true" if efs == "new" else "false",
            "ExistingEfsId": existing,
            "FsxStorageCapacity": fsx,
            "NotebookInstanceType": "ml.t3.large",
            "GitRepository": git,
        },
    )

    expected = set(BASE_OUTPUTS)
    if efs != "none":
        expected.add("EfsFileSystemId")
    if fsx != "0":
        expected |= FSX_OUTPUTS
    assert set(outputs) == expected
    assert outputs["BucketName"] == BUCKET

    check_network(outputs, cidrs)
    check_role_key_and_notebook(outputs, "ml.t3.large", "combo")
    private_ids = json.loads(outputs["EstimatorSubnets"])
    script = lifecycle_script()

    if efs == "none":
        assert efs_client.describe_file_systems()["FileSystems"] == []
        assert 'EFS_ID=""' in script
    else:
        efs_id = outputs["EfsFileSystemId"]
        if efs == "existing":
            assert efs_id == existing
        [file_system] = [
            fs
            for fs in efs_client.describe_file_systems()["FileSystems"]
            if fs["FileSystemId"] == efs_id
        ]
        assert file_system["Encrypted"] is True
        if efs == "new":
            assert file_system["KmsKeyId"] == outputs["KmsKeyArn"]
        targets = efs_client.describe_mount_targets(FileSystemId=efs_id)["MountTargets"]
        assert sorted(t["SubnetId"] for t in targets) == sorted(private_ids)
        assert f'EFS_ID="{efs_id}"' in script

    fsx_client = boto3.client("fsx", region_name=REGION)
    file_systems = fsx_client.describe_file_systems()["FileSystems"]
    if fsx == "0":
        assert file_systems == []
        assert 'FSX_DNS=""' in script
    else:
        [lustre] = file_systems
        assert lustre["FileSystemId"] == outputs["FsxFileSystemId"]
        assert lustre["StorageCapacity"] == int(fsx)
        assert lustre["SubnetIds"] == [private_ids[0]] == [outputs["FsxSubnetId"]]
        # DescribeFileSystems does not return security groups (nor does AWS's).
        in_moto = fsx_backends[ACCOUNT][REGION].file_systems[lustre["FileSystemId"]]
        assert in_moto.security_group_ids == [outputs["SecurityGroupId"]]
        assert outputs["KmsKeyArn"].endswith("/" + lustre["KmsKeyId"])
        assert lustre["LustreConfiguration"]["DeploymentType"] == "PERSISTENT_2"
        assert outputs["FsxDnsName"] == lustre["DNSName"]
        assert outputs["FsxMountName"] == FsxLustreOnMoto.mount_name(lustre["FileSystemId"])
        assert outputs["FsxDataRepositoryPath"] == f"s3://{BUCKET}/fsx"
        assert f'FSX_DNS="{lustre["DNSName"]}"' in script
        assert f'FSX_MOUNT="{outputs["FsxMountName"]}"' in script

    parsed = parse_outputs(outputs)
    assert list(parsed.subnets) == private_ids
    assert parsed.efs_id == outputs.get("EfsFileSystemId")


@pytest.mark.usefixtures("aws")
def test_what_moto_skips_and_cannot_do() -> None:
    """The limits stated in this module's docstring and docs/vpc.md, pinned."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        create_stack("plain", {"BucketName": BUCKET, "CreateEfsFileSystem": "true"})
    skipped = {str(w.message).split()[3] for w in caught if "not supported" in str(w.message)}
    assert skipped == {"AWS::EC2::SecurityGroupEgress"}

    with pytest.raises(AttributeError, match="has_cfn_attr"):
        create_stack("with-fsx", {"BucketName": BUCKET, "FsxStorageCapacity": "1200"})


@pytest.mark.usefixtures("aws", "fsx_on_moto")
def test_with_the_fsx_adapter_only_the_fsx_link_is_skipped() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        create_stack("fsx", {"BucketName": BUCKET, "FsxStorageCapacity": "1200"})
    skipped = {str(w.message).split()[3] for w in caught if "not supported" in str(w.message)}
    assert skipped == {"AWS::EC2::SecurityGroupEgress", "AWS::FSx::DataRepositoryAssociation"}


# ---------------------------------------------------------------------------- the command
@pytest.mark.usefixtures("aws")
def test_create_prints_estimator_arguments_then_status_and_outputs(
    capsys: pytest.CaptureFixture[str], api_calls: list[tuple[str, dict[str, Any]]]
) -> None:
    code, out, err = run(
        capsys, "create", "--region", REGION, "--bucket", BUCKET, "--create-efs",
        "--git-repository", "https://github.com/org/repo.git",
    )  # fmt: skip
    assert code == 0, err
    assert f"creating stack ringleader-training-vpc in {REGION}" in err
    cfn = boto3.client("cloudformation", region_name=REGION)
    [stack] = cfn.describe_stacks(StackName="ringleader-training-vpc")["Stacks"]
    parameters = {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]}
    assert parameters["BucketName"] == BUCKET
    assert parameters["CreateEfsFileSystem"] == "true"
    assert parameters["GitRepository"] == "https://github.com/org/repo.git"
    assert parameters["EcrRepositoryName"] == "ringleader"
    assert parameters["ExportDeletions"] == "false"
    [request] = [params for operation, params in api_calls if operation == "CreateStack"]
    assert request["Capabilities"] == ["CAPABILITY_IAM"]
    assert request["OnFailure"] == "ROLLBACK"
    outputs = outputs_from_api(stack["Outputs"])

    snippet = {
        node.targets[0].id: ast.literal_eval(node.value)  # type: ignore[attr-defined]
        for node in ast.parse(out).body
        if isinstance(node, ast.Assign)
    }
    ec2 = boto3.client("ec2", region_name=REGION)
    subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [outputs["VpcId"]]}])[
        "Subnets"
    ]
    private = sorted(
        by_logical_id(subnets, name)["SubnetId"] for name in ("PrivateSubnetA", "PrivateSubnetB")
    )
    kwargs = snippet["estimator_kwargs"]
    assert sorted(kwargs["subnets"]) == private
    assert kwargs["security_group_ids"] == [outputs["SecurityGroupId"]]
    assert kwargs["role"] == outputs["ExecutionRoleArn"]
    assert kwargs["base_job_name"] == outputs["TrainingJobBaseName"] == "ringleader-training-vpc"
    assert kwargs["output_path"] == f"s3://{BUCKET}/output"
    assert snippet["efs_input_kwargs"]["file_system_id"] == outputs["EfsFileSystemId"]
    assert "fsx_input_kwargs" not in snippet

    code, out, err = run(capsys, "status", "--region", REGION)
    assert (code, out) == (0, f"ringleader-training-vpc ({REGION}): CREATE_COMPLETE\n")

    code, out, err = run(capsys, "outputs", "--region", REGION, "--format", "json")
    assert code == 0, err
    assert json.loads(out)["estimator"] == kwargs

    code, out, err = run(capsys, "create", "--region", REGION, "--bucket", BUCKET)
    assert code == 1
    assert "stack ringleader-training-vpc already exists (CREATE_COMPLETE)" in err


@pytest.mark.usefixtures("aws", "fsx_on_moto")
def test_create_with_fsx_and_region_from_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    code, out, err = run(
        capsys, "create", "--stack-name", "fsx-vpc", "--bucket", BUCKET, "--fsx", "1200",
        "--fsx-s3-prefix", "datasets/train", "--export-deletions",
        "--ecr-repository", "team/ringleader-gpu",
    )  # fmt: skip
    assert code == 0, err
    cfn = boto3.client("cloudformation", region_name=REGION)
    [stack] = cfn.describe_stacks(StackName="fsx-vpc")["Stacks"]
    parameters = {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]}
    assert parameters["ExportDeletions"] == "true"
    assert parameters["EcrRepositoryName"] == "team/ringleader-gpu"
    # The job role pulls from the named repository only.
    role_name = outputs_from_api(stack["Outputs"])["ExecutionRoleArn"].rsplit("/", 1)[1]
    iam = boto3.client("iam", region_name=REGION)
    training = iam.get_role_policy(RoleName=role_name, PolicyName="ringleader-training")
    [pull] = [
        s
        for s in policy_document(training["PolicyDocument"])["Statement"]
        if s["Sid"] == "PullTheStackRepository"
    ]
    assert pull["Resource"] == f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/team/ringleader-gpu"
    [file_system] = boto3.client("fsx", region_name=REGION).describe_file_systems()["FileSystems"]
    mount = FsxLustreOnMoto.mount_name(file_system["FileSystemId"])
    assert f'"directory_path": "/{mount}/s3"' in out
    assert f"mirrors s3://{BUCKET}/datasets/train" in out


@pytest.mark.usefixtures("aws", "cloudformation_rollback")
def test_a_rolled_back_stack_exits_1_and_prints_the_failing_resources_events(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A valid SageMaker type that moto's notebook model rejects: the resource fails.
    code, out, err = run(
        capsys, "create", "--region", REGION, "--bucket", BUCKET,
        "--notebook-instance-type", "ml.g5.xlarge",
    )  # fmt: skip
    assert code == 1
    assert out == ""
    lines = err.splitlines()
    assert "ringleader stack: stack ringleader-training-vpc failed: ROLLBACK_COMPLETE" in lines
    assert "resource NotebookInstance failed; its events:" in lines
    failed = [line for line in lines if "CREATE_FAILED" in line]
    assert len(failed) == 1
    assert "NotebookInstance (AWS::SageMaker::NotebookInstance)  CREATE_FAILED: " in failed[0]
    assert "Value 'ml.g5.xlarge' at 'instanceType' failed to satisfy constraint" in failed[0]
    assert lines[-1] == (
        "stack: The following resource(s) failed to create: [NotebookInstance]. "
        "Rollback requested by user."
    )

    code, out, err = run(capsys, "status", "--region", REGION)
    assert code == 1
    assert out == f"ringleader-training-vpc ({REGION}): ROLLBACK_COMPLETE\n"
    assert "resource NotebookInstance failed; its events:" in err

    code, out, err = run(capsys, "outputs", "--region", REGION)
    assert code == 1
    assert "is ROLLBACK_COMPLETE; outputs exist once it is CREATE_COMPLETE" in err


@pytest.mark.usefixtures("aws")
def test_a_resource_that_moto_rejects_without_the_rollback_fixture(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(
        capsys, "create", "--region", REGION, "--bucket", BUCKET,
        "--notebook-instance-type", "ml.g5.xlarge",
    )  # fmt: skip
    assert (code, out) == (1, "")
    assert err.startswith(
        "ringleader stack: CreateStack was refused: ValidationException: "
        "Value 'ml.g5.xlarge' at 'instanceType'"
    )


@pytest.mark.usefixtures("aws", "slow_stacks")
def test_waiting_is_bounded_by_the_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    code, out, err = run(
        capsys, "create", "--region", REGION, "--bucket", BUCKET, "--wait-timeout", "1"
    )
    assert time.monotonic() - started < 10
    assert (code, out) == (1, "")
    assert "stack ringleader-training-vpc is still CREATE_IN_PROGRESS after 1 s" in err


@pytest.mark.usefixtures("aws", "slow_stacks")
def test_the_waiter_polls_exactly_max_attempts_times() -> None:
    cfn = boto3.client("cloudformation", region_name=REGION)
    calls: list[str] = []
    cfn.meta.events.register(
        "before-call.cloudformation.DescribeStacks", lambda **kw: calls.append("describe")
    )
    client = StackClient(Target(REGION, "slow"), cfn)
    from ringleader.tools.stack.params import RawCreateOptions, parse_create

    params = parse_create(RawCreateOptions(region=REGION, bucket=BUCKET, stack_name="slow"), {})
    result = client.create(params, TEMPLATE, WaitPolicy(delay=0, max_attempts=3))
    assert not result.ok
    assert result.state is not None and result.state.status == "CREATE_IN_PROGRESS"
    assert len(calls) == 3 + 1  # the waiter's polls, then one look at the state


@pytest.mark.usefixtures("aws")
def test_delete(capsys: pytest.CaptureFixture[str]) -> None:
    cfn = boto3.client("cloudformation", region_name=REGION)
    one_vpc = {
        "Resources": {"Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.1.0.0/16"}}}
    }
    cfn.create_stack(StackName="small", TemplateBody=json.dumps(one_vpc))
    assert len(boto3.client("ec2", region_name=REGION).describe_vpcs()["Vpcs"]) == 2

    code, out, err = run(capsys, "delete", "--region", REGION, "--stack-name", "small")
    assert (code, out) == (0, "stack small deleted\n"), err
    assert "deleting stack small" in err
    vpcs = boto3.client("ec2", region_name=REGION).describe_vpcs()["Vpcs"]
    assert [v["IsDefault"] for v in vpcs] == [True]

    code, out, err = run(capsys, "status", "--region", REGION, "--stack-name", "small")
    assert code == 1 and err == f"no stack small in {REGION}\n"
    code, out, err = run(capsys, "delete", "--region", REGION, "--stack-name", "small")
    assert (code, out) == (0, f"no stack small in {REGION}\n")


@pytest.mark.usefixtures("aws")
@pytest.mark.filterwarnings("ignore:Exception.DependencyViolationError.:UserWarning")
def test_deleting_the_training_stack_hits_motos_route_table_gap(
    capsys: pytest.CaptureFixture[str],
) -> None:
    create_stack("vpc", {"BucketName": BUCKET})
    code, out, err = run(capsys, "delete", "--region", REGION, "--stack-name", "vpc")
    assert (code, out) == (1, "")
    assert "ringleader stack: AWS refused: DependencyViolation: The vpc" in err


@pytest.mark.usefixtures("aws")
def test_status_and_outputs_of_a_missing_stack(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("status", "outputs"):
        code, out, err = run(capsys, command, "--region", REGION, "--stack-name", "absent")
        assert (code, out, err) == (1, "", f"no stack absent in {REGION}\n")
