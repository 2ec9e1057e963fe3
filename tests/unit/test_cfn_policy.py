"""Policy checks over cfn/training-vpc.yaml, read with plain yaml.safe_load.

What the issue asks of the template, checked on its text rather than on any deployment:
no open ingress, egress only to the group itself and HTTPS, encryption at rest everywhere it
exists, no wildcard actions on wildcard resources, a notebook without direct internet access
in a private subnet, and parameters that validate and default.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringleader.tools.stack import params

TEMPLATE_PATH = Path(__file__).resolve().parents[2] / "cfn" / "training-vpc.yaml"
TEMPLATE: dict[str, Any] = yaml.safe_load(TEMPLATE_PATH.read_text())
RESOURCES: dict[str, dict[str, Any]] = TEMPLATE["Resources"]

# Every resource type must be listed in exactly one of these, so that a new resource forces a
# decision about its data at rest.
ENCRYPTED_TYPES = {
    "AWS::EFS::FileSystem",
    "AWS::FSx::FileSystem",
    "AWS::SageMaker::NotebookInstance",
    "AWS::KMS::Key",
}
NO_DATA_AT_REST = {
    "AWS::KMS::Alias",
    "AWS::EC2::VPC",
    "AWS::EC2::InternetGateway",
    "AWS::EC2::VPCGatewayAttachment",
    "AWS::EC2::Subnet",
    "AWS::EC2::RouteTable",
    "AWS::EC2::Route",
    "AWS::EC2::SubnetRouteTableAssociation",
    "AWS::EC2::EIP",
    "AWS::EC2::NatGateway",
    "AWS::EC2::VPCEndpoint",
    "AWS::EC2::SecurityGroup",
    "AWS::EC2::SecurityGroupIngress",
    "AWS::EC2::SecurityGroupEgress",
    "AWS::EFS::MountTarget",
    "AWS::FSx::DataRepositoryAssociation",  # metadata of the link; the data is in S3 and FSx
    "AWS::IAM::Role",
    "AWS::IAM::Policy",
    "AWS::SageMaker::NotebookInstanceLifecycleConfig",
}
KMS_KEY_REFS = ({"Ref": "KmsKey"}, {"Fn::GetAtt": ["KmsKey", "Arn"]})


def of_type(resource_type: str) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in RESOURCES.items() if r["Type"] == resource_type}


def props(name: str) -> dict[str, Any]:
    properties: dict[str, Any] = RESOURCES[name].get("Properties", {})
    return properties


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


# ---------------------------------------------------------------------------- network access
def ingress_rules() -> Iterator[tuple[str, dict[str, Any], Any]]:
    """(where, rule, the group the rule belongs to) for inline and standalone ingress."""
    for name, sg in of_type("AWS::EC2::SecurityGroup").items():
        for rule in sg["Properties"].get("SecurityGroupIngress", []):
            yield name, rule, {"Ref": name}
    for name, rule in of_type("AWS::EC2::SecurityGroupIngress").items():
        yield name, rule["Properties"], rule["Properties"].get("GroupId")


def test_the_only_ingress_is_all_traffic_from_the_group_itself() -> None:
    rules = list(ingress_rules())
    assert rules, "the template must let the training hosts reach each other"
    for where, rule, group in rules:
        assert "CidrIp" not in rule and "CidrIpv6" not in rule, f"{where}: ingress from a CIDR"
        assert "SourcePrefixListId" not in rule, f"{where}: ingress from a prefix list"
        assert rule.get("SourceSecurityGroupId") == group, f"{where}: ingress from another group"
        assert str(rule["IpProtocol"]) == "-1", f"{where}: MPI and NCCL need every port"


def test_no_ingress_from_anywhere_in_the_whole_template() -> None:
    def walk(node: Any, path: str) -> Iterator[str]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("CidrIp", "CidrIpv6") and value in ("0.0.0.0/0", "::/0"):
                    yield path
                yield from walk(value, f"{path}/{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                yield from walk(value, f"{path}/{index}")

    open_rules = list(walk(RESOURCES, ""))
    # The one open CIDR allowed is the HTTPS egress rule.
    assert open_rules == ["/TrainingSecurityGroup/Properties/SecurityGroupEgress/0"]


def test_egress_is_only_the_group_itself_and_https() -> None:
    groups = of_type("AWS::EC2::SecurityGroup")
    assert groups
    for name, sg in groups.items():
        inline = sg["Properties"].get("SecurityGroupEgress")
        # Without explicit egress, EC2 adds "all traffic to 0.0.0.0/0".
        assert inline, f"{name} must replace the default allow-all egress"
        for rule in inline:
            assert rule == {
                "Description": rule.get("Description"),
                "IpProtocol": "tcp",
                "FromPort": 443,
                "ToPort": 443,
                "CidrIp": "0.0.0.0/0",
            }, f"{name}: inline egress other than HTTPS"
    standalone = of_type("AWS::EC2::SecurityGroupEgress")
    assert standalone, "the hosts must be able to reach each other"
    for name, rule in standalone.items():
        p = rule["Properties"]
        assert set(p) <= {"Description", "GroupId", "IpProtocol", "DestinationSecurityGroupId"}
        assert p["DestinationSecurityGroupId"] == p["GroupId"], f"{name} goes to another group"
        assert str(p["IpProtocol"]) == "-1"


def subnet_route_targets() -> dict[str, set[str]]:
    """Subnet -> kinds of its default route's target (GatewayId / NatGatewayId)."""
    default_targets: dict[str, set[str]] = {}
    for route in of_type("AWS::EC2::Route").values():
        p = route["Properties"]
        if p.get("DestinationCidrBlock") == "0.0.0.0/0":
            table = p["RouteTableId"]["Ref"]
            kinds = {key for key in p if key in ("GatewayId", "NatGatewayId")}
            default_targets.setdefault(table, set()).update(kinds)
    subnets: dict[str, set[str]] = {}
    for association in of_type("AWS::EC2::SubnetRouteTableAssociation").values():
        p = association["Properties"]
        subnets[p["SubnetId"]["Ref"]] = default_targets.get(p["RouteTableId"]["Ref"], set())
    return subnets


PRIVATE_SUBNETS = ("PrivateSubnetA", "PrivateSubnetB")


def test_private_subnets_go_out_through_the_nat_gateway_only() -> None:
    routes = subnet_route_targets()
    assert routes["PublicSubnet"] == {"GatewayId"}
    for subnet in PRIVATE_SUBNETS:
        assert routes[subnet] == {"NatGatewayId"}, subnet
    assert props("NatGateway")["SubnetId"] == {"Ref": "PublicSubnet"}


def test_private_subnets_are_in_two_availability_zones() -> None:
    zones = [props(subnet)["AvailabilityZone"]["Fn::Select"] for subnet in PRIVATE_SUBNETS]
    assert [zone[1] for zone in zones] == [{"Fn::GetAZs": ""}, {"Fn::GetAZs": ""}]
    assert zones[0][0] != zones[1][0]


def test_no_subnet_gives_out_public_addresses() -> None:
    for name in of_type("AWS::EC2::Subnet"):
        assert props(name).get("MapPublicIpOnLaunch") is False, name


def test_s3_gateway_endpoint_serves_the_private_route_table() -> None:
    endpoint = props("S3GatewayEndpoint")
    assert endpoint["VpcEndpointType"] == "Gateway"
    assert endpoint["ServiceName"] == {"Fn::Sub": "com.amazonaws.${AWS::Region}.s3"}
    assert endpoint["RouteTableIds"] == [{"Ref": "PrivateRouteTable"}]


def test_vpc_resolves_names() -> None:
    vpc = props("Vpc")
    assert vpc["EnableDnsSupport"] is True and vpc["EnableDnsHostnames"] is True


def test_everything_that_holds_data_sits_in_private_subnets_and_the_group() -> None:
    private = [{"Ref": subnet} for subnet in PRIVATE_SUBNETS]
    group = [{"Ref": "TrainingSecurityGroup"}]
    notebook = props("NotebookInstance")
    assert notebook["SubnetId"] in private and notebook["SecurityGroupIds"] == group
    fsx = props("FsxFileSystem")
    assert (
        all(subnet in private for subnet in fsx["SubnetIds"]) and fsx["SecurityGroupIds"] == group
    )
    mount_targets = of_type("AWS::EFS::MountTarget")
    assert sorted(str(mt["Properties"]["SubnetId"]) for mt in mount_targets.values()) == sorted(
        str(subnet) for subnet in private
    ), "one mount target per private subnet"
    for mt in mount_targets.values():
        assert mt["Properties"]["SecurityGroups"] == group


def test_notebook_has_no_direct_internet_access() -> None:
    notebook = props("NotebookInstance")
    assert notebook["DirectInternetAccess"] == "Disabled"
    assert notebook["RootAccess"] == "Disabled"
    assert notebook["InstanceMetadataServiceConfiguration"] == {
        "MinimumInstanceMetadataServiceVersion": "2"
    }
    assert notebook["LifecycleConfigName"] == {
        "Fn::GetAtt": ["NotebookLifecycleConfig", "NotebookInstanceLifecycleConfigName"]
    }


# ---------------------------------------------------------------------------- encryption
def test_every_resource_type_is_classified_for_encryption() -> None:
    types = {r["Type"] for r in RESOURCES.values()}
    assert types - ENCRYPTED_TYPES - NO_DATA_AT_REST == set()
    assert set() == ENCRYPTED_TYPES & NO_DATA_AT_REST


def test_data_at_rest_is_encrypted_with_the_stack_key() -> None:
    for name in of_type("AWS::EFS::FileSystem"):
        assert props(name)["Encrypted"] is True, name
        assert props(name)["KmsKeyId"] in KMS_KEY_REFS, name
    for resource_type in ("AWS::FSx::FileSystem", "AWS::SageMaker::NotebookInstance"):
        found = of_type(resource_type)
        assert found, resource_type
        for name in found:
            assert props(name).get("KmsKeyId") in KMS_KEY_REFS, name
    # FSx accepts a customer key only on persistent deployments.
    for name in of_type("AWS::FSx::FileSystem"):
        assert props(name)["LustreConfiguration"]["DeploymentType"].startswith("PERSISTENT")


def test_the_key_rotates_is_named_and_outlives_the_stack() -> None:
    key = props("KmsKey")
    assert key["EnableKeyRotation"] is True
    # Output written with the key must stay readable after the stack is deleted.
    assert RESOURCES["KmsKey"]["DeletionPolicy"] == "Retain"
    assert props("KmsKeyAlias")["TargetKeyId"] == {"Ref": "KmsKey"}


# ---------------------------------------------------------------------------- IAM
def policy_documents() -> Iterator[tuple[str, dict[str, Any]]]:
    for name, role in of_type("AWS::IAM::Role").items():
        yield f"{name} trust", role["Properties"]["AssumeRolePolicyDocument"]
        for policy in role["Properties"].get("Policies", []):
            yield f"{name}/{policy['PolicyName']}", policy["PolicyDocument"]
    for resource_type in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for name, policy in of_type(resource_type).items():
            yield name, policy["Properties"]["PolicyDocument"]
    for name, key in of_type("AWS::KMS::Key").items():
        yield f"{name} key policy", key["Properties"]["KeyPolicy"]


def statements() -> Iterator[tuple[str, dict[str, Any]]]:
    for where, document in policy_documents():
        for statement in document["Statement"]:
            yield where, statement


def test_policies_were_found() -> None:
    found = {where for where, _ in policy_documents()}
    assert {"ExecutionRole/ringleader-training", "KmsKey key policy"} <= found
    assert len(list(statements())) >= 10


def test_no_wildcard_actions_and_no_negations() -> None:
    for where, statement in statements():
        assert "NotAction" not in statement and "NotResource" not in statement, where
        assert "NotPrincipal" not in statement, where
        for action in as_list(statement["Action"]):
            assert "*" not in action, f"{where}: wildcard action {action}"


def test_no_wildcard_action_on_a_wildcard_resource() -> None:
    """The issue's rule, checked on its own in case the stricter test above is relaxed."""
    for where, statement in statements():
        resources = as_list(statement.get("Resource", []))
        if "*" in resources:
            actions = as_list(statement["Action"])
            assert not any(a == "*" or a.endswith(":*") for a in actions), where


def test_s3_access_is_the_given_bucket_only() -> None:
    bucket = {"Fn::Sub": "arn:${AWS::Partition}:s3:::${BucketName}"}
    objects = {"Fn::Sub": "arn:${AWS::Partition}:s3:::${BucketName}/*"}
    s3_statements = [
        (where, s)
        for where, s in statements()
        if any(a.startswith("s3:") for a in as_list(s["Action"]))
    ]
    assert len(s3_statements) == 2
    for where, statement in s3_statements:
        assert as_list(statement["Resource"]) in ([bucket], [objects]), where


def test_the_role_is_for_sagemaker_of_this_account_only() -> None:
    trust = props("ExecutionRole")["AssumeRolePolicyDocument"]["Statement"]
    assert trust == [
        {
            "Effect": "Allow",
            "Principal": {"Service": "sagemaker.amazonaws.com"},
            "Action": "sts:AssumeRole",
            "Condition": {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}},
        }
    ]
    pass_role = props("ExecutionRolePassSelf")["PolicyDocument"]["Statement"][0]
    assert pass_role["Resource"] == {"Fn::GetAtt": ["ExecutionRole", "Arn"]}
    assert pass_role["Condition"] == {
        "StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}
    }


# ---------------------------------------------------------------------------- parameters
def test_parameters_validate_and_default_like_the_command() -> None:
    parameters = TEMPLATE["Parameters"]
    assert [name for name, spec in parameters.items() if "Default" not in spec] == ["BucketName"]
    for name, spec in parameters.items():
        assert "AllowedPattern" in spec or "AllowedValues" in spec, name
        if "Default" in spec and "AllowedPattern" in spec:
            assert re.fullmatch(spec["AllowedPattern"], str(spec["Default"])), name
    assert parameters["VpcCidr"]["Default"] == params.DEFAULT_VPC_CIDR
    assert parameters["PublicSubnetCidr"]["Default"] == params.DEFAULT_PUBLIC_SUBNET_CIDR
    assert parameters["PrivateSubnetACidr"]["Default"] == params.DEFAULT_PRIVATE_SUBNET_A_CIDR
    assert parameters["PrivateSubnetBCidr"]["Default"] == params.DEFAULT_PRIVATE_SUBNET_B_CIDR
    assert parameters["NotebookInstanceType"]["Default"] == params.DEFAULT_NOTEBOOK_INSTANCE_TYPE
    assert parameters["FsxS3Prefix"]["Default"] == params.DEFAULT_FSX_S3_PREFIX


@pytest.mark.parametrize(
    ("parameter", "value", "allowed"),
    [
        ("ExistingEfsId", "fs-0123abcd", True),
        ("ExistingEfsId", "fs-0123456789abcdef0", True),
        ("ExistingEfsId", "", True),
        ("ExistingEfsId", "fs-0123ABCD", False),
        ("ExistingEfsId", "fs-0123456789", False),
        ("VpcCidr", "10.0.0.0/16", True),
        ("VpcCidr", "10.0.0.0/8", False),
        ("VpcCidr", "10.0.0.256/16", False),
        ("BucketName", "my-training-data", True),
        ("BucketName", "My_Bucket", False),
        ("GitRepository", "https://github.com/org/repo.git", True),
        ("GitRepository", "https://user:secret@github.com/org/repo.git", False),
        ("FsxStorageCapacity", "0", True),
        ("FsxStorageCapacity", "1200", True),
        ("FsxStorageCapacity", "12", False),
    ],
)
def test_parameter_patterns(parameter: str, value: str, allowed: bool) -> None:
    pattern = TEMPLATE["Parameters"][parameter]["AllowedPattern"]
    assert (re.fullmatch(pattern, value) is not None) is allowed


def test_conditions_switch_the_optional_parts() -> None:
    conditions = {name: r.get("Condition") for name, r in RESOURCES.items()}
    assert conditions["EfsFileSystem"] == "HasNewEfs"
    assert conditions["EfsMountTargetA"] == conditions["EfsMountTargetB"] == "HasEfs"
    assert conditions["FsxFileSystem"] == conditions["FsxS3Link"] == "HasFsx"
    outputs = TEMPLATE["Outputs"]
    assert outputs["EfsFileSystemId"]["Condition"] == "HasEfs"
    for name in ("FsxFileSystemId", "FsxMountName", "FsxDnsName", "FsxFileSystemPath"):
        assert outputs[name]["Condition"] == "HasFsx", name
    assert props("FsxS3Link")["DataRepositoryPath"] == {
        "Fn::Sub": "s3://${BucketName}/${FsxS3Prefix}"
    }


# ---------------------------------------------------------------------------- lifecycle script
def lifecycle_script(values: dict[str, str]) -> str:
    content = props("NotebookLifecycleConfig")["OnStart"][0]["Content"]["Fn::Base64"]["Fn::Sub"]
    text, variables = content
    assert set(variables) == {"EfsId", "FsxDnsName", "FsxMountName"}
    for name, value in {**values, "AWS::Region": "us-east-1"}.items():
        text = text.replace("${" + name + "}", value)
    assert "${" not in text, "a ${...} that Fn::Sub would try to resolve"
    return str(text)


@pytest.mark.parametrize(
    "values",
    [
        {"EfsId": "", "FsxDnsName": "", "FsxMountName": ""},
        {
            "EfsId": "fs-0123456789abcdef0",
            "FsxDnsName": "fs-0123.fsx.us-east-1.amazonaws.com",
            "FsxMountName": "abcdefgh",
        },
    ],
)
def test_lifecycle_script_is_valid_bash(values: dict[str, str]) -> None:
    script = lifecycle_script(values)
    checked = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert checked.returncode == 0, checked.stderr
    if values["EfsId"]:
        assert f'EFS_ID="{values["EfsId"]}"' in script
        assert "$EFS_ID.efs.$REGION.amazonaws.com:/" in script
        assert '"$FSX_DNS@tcp:/$FSX_MOUNT"' in script


def test_lifecycle_script_does_nothing_without_file_systems(tmp_path: Path) -> None:
    script = tmp_path / "on-start.sh"
    script.write_text(lifecycle_script({"EfsId": "", "FsxDnsName": "", "FsxMountName": ""}))
    ran = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")
