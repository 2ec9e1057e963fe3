"""Policy checks over cfn/training-vpc.yaml, read with plain yaml.safe_load.

What the issue asks of the template, checked on its text rather than on any deployment:
no open ingress, egress only to the group itself and HTTPS, encryption at rest everywhere it
exists, no wildcard actions on wildcard resources, a notebook without direct internet access
in a private subnet, and parameters that validate and default. Issue 26: a job role and a
notebook role, each limited to the stack's bucket, repository, jobs and logs, grants of the
key only for AWS resources, deletes only under checkpoints/, and no deletion export from FSx
unless asked for.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator, Mapping
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


ROLES = ("JobRole", "NotebookRole")
JOB_PREFIX_ARN = {
    "Fn::Sub": "arn:${AWS::Partition}:sagemaker:${AWS::Region}:${AWS::AccountId}"
    ":training-job/${AWS::StackName}-*"
}
LOGS = "arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:/aws/sagemaker/"
BUCKET_ARN = {"Fn::Sub": "arn:${AWS::Partition}:s3:::${BucketName}"}
OBJECTS_ARN = {"Fn::Sub": "arn:${AWS::Partition}:s3:::${BucketName}/*"}
CHECKPOINTS_ARN = {"Fn::Sub": "arn:${AWS::Partition}:s3:::${BucketName}/checkpoints/*"}
KEY_ARN = {"Fn::GetAtt": ["KmsKey", "Arn"]}


def role_statements(role: str) -> list[dict[str, Any]]:
    """Every permission statement the role gets: inline, and from policies attached to it."""
    found = [
        statement
        for policy in props(role).get("Policies", [])
        for statement in policy["PolicyDocument"]["Statement"]
    ]
    for resource_type in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for policy in of_type(resource_type).values():
            if {"Ref": role} in policy["Properties"].get("Roles", []):
                found.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    assert found, role
    return found


def role_actions(role: str) -> set[str]:
    return {action for s in role_statements(role) for action in as_list(s["Action"])}


def granting(role: str, action: str) -> list[dict[str, Any]]:
    return [s for s in role_statements(role) if action in as_list(s["Action"])]


def test_policies_were_found() -> None:
    found = {where for where, _ in policy_documents()}
    assert {
        "JobRole/ringleader-training",
        "NotebookRole/ringleader-notebook",
        "KmsKey key policy",
    } <= found
    assert len(list(statements())) >= 20
    for where, statement in statements():
        assert statement["Effect"] == "Allow", f"{where}: the tests below assume Allow only"


def test_one_role_for_the_jobs_and_another_for_the_notebook() -> None:
    assert set(of_type("AWS::IAM::Role")) == set(ROLES)
    assert props("NotebookInstance")["RoleArn"] == {"Fn::GetAtt": ["NotebookRole", "Arn"]}
    outputs = TEMPLATE["Outputs"]
    # ExecutionRoleArn is what `ringleader stack outputs` hands to the estimator as role=.
    assert outputs["ExecutionRoleArn"]["Value"] == {"Fn::GetAtt": ["JobRole", "Arn"]}
    assert outputs["NotebookRoleArn"]["Value"] == {"Fn::GetAtt": ["NotebookRole", "Arn"]}
    # The job-name prefix the notebook is held to is the base_job_name the estimator gets.
    assert outputs["TrainingJobBaseName"]["Value"] == {"Ref": "AWS::StackName"}


# What each role may do, all of it: a new action fails here until it is added on purpose.
JOB_ACTIONS = {
    "s3:GetBucketLocation",
    "s3:ListBucket",
    "s3:ListBucketMultipartUploads",
    "s3:AbortMultipartUpload",
    "s3:GetObject",
    "s3:ListMultipartUploadParts",
    "s3:PutObject",
    "s3:DeleteObject",  # checkpoints/ only, see below
    "kms:Decrypt",
    "kms:DescribeKey",
    "kms:Encrypt",
    "kms:GenerateDataKey",
    "kms:CreateGrant",  # for AWS resources only, see below
    "ecr:BatchCheckLayerAvailability",
    "ecr:BatchGetImage",
    "ecr:GetDownloadUrlForLayer",
    "ecr:GetAuthorizationToken",
    "logs:CreateLogGroup",
    "logs:CreateLogStream",
    "logs:PutLogEvents",
    "cloudwatch:PutMetricData",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcs",
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
    "elasticfilesystem:ClientMount",
    "elasticfilesystem:ClientWrite",
    "elasticfilesystem:DescribeMountTargets",
    "fsx:DescribeFileSystems",
}
NOTEBOOK_ACTIONS = {
    "s3:GetBucketLocation",
    "s3:ListBucket",
    "s3:ListBucketMultipartUploads",
    "s3:AbortMultipartUpload",
    "s3:GetObject",
    "s3:ListMultipartUploadParts",
    "s3:PutObject",
    "kms:Decrypt",
    "kms:DescribeKey",
    "kms:Encrypt",
    "kms:GenerateDataKey",
    "kms:CreateGrant",
    "sagemaker:CreateTrainingJob",
    "sagemaker:AddTags",
    "sagemaker:DescribeTrainingJob",
    "sagemaker:StopTrainingJob",
    "iam:PassRole",
    "logs:DescribeLogStreams",
    "logs:GetLogEvents",
    "logs:CreateLogGroup",
    "logs:CreateLogStream",
    "logs:PutLogEvents",
    "cloudformation:DescribeStacks",
}


@pytest.mark.parametrize(
    ("role", "expected"), [("JobRole", JOB_ACTIONS), ("NotebookRole", NOTEBOOK_ACTIONS)]
)
def test_each_role_has_exactly_the_actions_listed(role: str, expected: set[str]) -> None:
    assert role_actions(role) == expected


@pytest.mark.parametrize("role", ROLES)
def test_both_roles_are_for_sagemaker_of_this_account_only(role: str) -> None:
    assert props(role)["AssumeRolePolicyDocument"]["Statement"] == [
        {
            "Effect": "Allow",
            "Principal": {"Service": "sagemaker.amazonaws.com"},
            "Action": "sts:AssumeRole",
            "Condition": {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}},
        }
    ]


def test_the_job_role_cannot_start_stop_or_pass() -> None:
    """Code inside a job must not be able to start jobs, stop others' or hand a role on."""
    for action in role_actions("JobRole"):
        service = action.split(":")[0]
        assert service not in ("sagemaker", "iam", "sts", "cloudformation"), action
    assert "sagemaker:CreateTrainingJob" not in role_actions("JobRole")
    assert "iam:PassRole" not in role_actions("JobRole")


def test_the_notebook_passes_only_the_job_role_and_only_to_sagemaker() -> None:
    passing = [(where, s) for where, s in statements() if "iam:PassRole" in as_list(s["Action"])]
    assert [where for where, _ in passing] == ["NotebookRole/ringleader-notebook"]
    [(_, statement)] = passing
    assert as_list(statement["Action"]) == ["iam:PassRole"]
    assert statement["Resource"] == {"Fn::GetAtt": ["JobRole", "Arn"]}
    assert statement["Condition"] == {
        "StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}
    }


def test_training_job_actions_are_limited_to_the_stack_jobs() -> None:
    for where, statement in statements():
        if any(a.startswith("sagemaker:") for a in as_list(statement["Action"])):
            assert statement["Resource"] == JOB_PREFIX_ARN, where


def test_jobs_start_only_inside_the_stack_subnets_and_group() -> None:
    [create] = granting("NotebookRole", "sagemaker:CreateTrainingJob")
    # Alone in its statement, so that the condition does not also hold back Describe and Stop.
    assert as_list(create["Action"]) == ["sagemaker:CreateTrainingJob"]
    assert create["Condition"] == {
        # Without VpcConfig the keys are absent, and ForAllValues alone would let that pass.
        "Null": {"sagemaker:VpcSubnets": "false", "sagemaker:VpcSecurityGroupIds": "false"},
        "ForAllValues:StringEquals": {
            "sagemaker:VpcSubnets": [{"Ref": "PrivateSubnetA"}, {"Ref": "PrivateSubnetB"}],
            "sagemaker:VpcSecurityGroupIds": [{"Ref": "TrainingSecurityGroup"}],
        },
    }


def test_create_grant_only_for_aws_resources_and_only_on_the_stack_key() -> None:
    grants = [(w, s) for w, s in statements() if "kms:CreateGrant" in as_list(s["Action"])]
    where_granted = {where for where, _ in grants}
    assert where_granted == {
        "JobRole/ringleader-training",
        "NotebookRole/ringleader-notebook",
        "KmsKey key policy",
    }
    for where, statement in grants:
        if where == "KmsKey key policy":
            continue  # delegates to IAM policies, such as these
        # Alone in its statement: a later edit cannot widen the condition for other actions.
        assert as_list(statement["Action"]) == ["kms:CreateGrant"], where
        assert statement["Resource"] == KEY_ARN, where
        assert statement["Condition"] == {"Bool": {"kms:GrantIsForAWSResource": "true"}}, where


def test_delete_object_only_under_checkpoints_and_only_for_jobs() -> None:
    deleting = [(w, s) for w, s in statements() if "s3:DeleteObject" in as_list(s["Action"])]
    assert [where for where, _ in deleting] == ["JobRole/ringleader-training"]
    for where, statement in deleting:
        assert as_list(statement["Action"]) == ["s3:DeleteObject"], where
        assert as_list(statement["Resource"]) == [CHECKPOINTS_ARN], where
    assert "s3:DeleteObject" not in role_actions("NotebookRole")


def test_s3_access_is_the_given_bucket_only() -> None:
    s3_statements = [
        (where, s)
        for where, s in statements()
        if any(a.startswith("s3:") for a in as_list(s["Action"]))
    ]
    assert len(s3_statements) == 5
    for where, statement in s3_statements:
        assert as_list(statement["Resource"]) in ([BUCKET_ARN], [OBJECTS_ARN], [CHECKPOINTS_ARN])
        bucket_level = {"s3:GetBucketLocation", "s3:ListBucket", "s3:ListBucketMultipartUploads"}
        if as_list(statement["Resource"]) == [BUCKET_ARN]:
            assert set(as_list(statement["Action"])) <= bucket_level, where


def test_images_come_from_the_stack_repository_only() -> None:
    repository = {
        "Fn::Sub": "arn:${AWS::Partition}:ecr:${AWS::Region}:${AWS::AccountId}"
        ":repository/${EcrRepositoryName}"
    }
    for where, statement in statements():
        actions = as_list(statement["Action"])
        if any(a.startswith("ecr:") for a in actions) and actions != ["ecr:GetAuthorizationToken"]:
            assert statement["Resource"] == repository, where
    assert not any(a.startswith("ecr:") for a in role_actions("NotebookRole"))


def test_logs_are_the_stack_jobs_streams_and_the_notebook_own() -> None:
    jobs_group = [
        {"Fn::Sub": LOGS + "TrainingJobs"},
        {"Fn::Sub": LOGS + "TrainingJobs:*"},
    ]
    notebook_group = [
        {"Fn::Sub": LOGS + "NotebookInstances"},
        {"Fn::Sub": LOGS + "NotebookInstances:*"},
    ]
    stack_streams = [{"Fn::Sub": LOGS + "TrainingJobs:log-stream:${AWS::StackName}-*"}]
    # The job role writes its own streams and reads none.
    assert granting("JobRole", "logs:CreateLogGroup")[0]["Resource"] == jobs_group
    for action in ("logs:CreateLogStream", "logs:PutLogEvents"):
        [statement] = granting("JobRole", action)
        assert as_list(statement["Resource"]) == stack_streams, action
    reads = {"logs:GetLogEvents", "logs:FilterLogEvents", "logs:DescribeLogStreams"}
    assert not reads & role_actions("JobRole")
    # The notebook reads this stack's job streams (it lists stream names in the group to find
    # them), and writes its own Jupyter and lifecycle logs.
    [read] = granting("NotebookRole", "logs:GetLogEvents")
    assert as_list(read["Resource"]) == stack_streams
    [listing] = granting("NotebookRole", "logs:DescribeLogStreams")
    assert listing["Resource"] == jobs_group
    for action in ("logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"):
        [statement] = granting("NotebookRole", action)
        assert statement["Resource"] == notebook_group, action


# Actions that AWS authorizes only on Resource "*" (the service authorization reference lists
# no resource type for them), with why each role needs them.
ONLY_ON_ALL_RESOURCES = {
    "ecr:GetAuthorizationToken": "the registry login before pulling the stack's repository",
    "cloudwatch:PutMetricData": "SageMaker's job metrics; held to their namespace instead",
    "ec2:DescribeDhcpOptions": "SageMaker reads the VPC's settings to place a job's hosts",
    "ec2:DescribeNetworkInterfaces": "idem",
    "ec2:DescribeSecurityGroups": "idem",
    "ec2:DescribeSubnets": "idem",
    "ec2:DescribeVpcs": "idem",
    "fsx:DescribeFileSystems": "SageMaker checks an FSx input; metadata only",
}


def test_star_resources_only_for_actions_aws_allows_only_on_star() -> None:
    for where, statement in statements():
        if where.endswith("key policy") or where.endswith("trust"):
            continue  # in a key policy "*" is the key itself; trust policies name no resource
        if "*" in as_list(statement["Resource"]):
            assert as_list(statement["Resource"]) == ["*"], where
            outside = set(as_list(statement["Action"])) - set(ONLY_ON_ALL_RESOURCES)
            assert not outside, f"{where}: {sorted(outside)} on every resource"
    [metrics] = granting("JobRole", "cloudwatch:PutMetricData")
    assert metrics["Condition"] == {
        "StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/TrainingJobs"}
    }


# ARNs that end in a wildcard over a whole resource type, each allowed for a reason.
TYPE_WIDE = {
    "arn:${AWS::Partition}:s3:::${BucketName}/*": "the objects of the stack's own bucket",
    "arn:${AWS::Partition}:ec2:${AWS::Region}:${AWS::AccountId}:network-interface/*": (
        "an interface has no id before it exists; held to the stack's VPC (tested below)"
    ),
    LOGS + "TrainingJobs:*": "the group itself, in the form CloudWatch Logs documents",
    LOGS + "NotebookInstances:*": "the notebook's own log group",
}


def scoped_resources() -> Iterator[tuple[str, Any]]:
    for where, statement in statements():
        if where.endswith("key policy") or where.endswith("trust"):
            continue
        for resource in as_list(statement["Resource"]):
            if resource != "*":
                yield where, resource


def test_every_other_resource_names_something_of_this_stack() -> None:
    resources = list(scoped_resources())
    assert len(resources) >= 20
    for where, resource in resources:
        if isinstance(resource, dict) and "Fn::Sub" not in resource:
            # A Ref or GetAtt: a resource of the template, or this stack itself.
            target = resource.get("Ref") or resource["Fn::GetAtt"][0]
            assert target in RESOURCES or target == "AWS::StackId", f"{where}: {resource}"
            continue
        text = resource["Fn::Sub"]
        text = text[0] if isinstance(text, list) else text
        if text.startswith("arn:${AWS::Partition}:s3:::"):
            assert text.startswith("arn:${AWS::Partition}:s3:::${BucketName}"), where
        else:
            # This account and region only: no wildcard in either place.
            assert ":${AWS::Region}:${AWS::AccountId}:" in text, f"{where}: {text}"
        # "<type>/*", "...:*" or every object of a bucket, but not a narrower prefix.
        if re.search(r"(:[a-z-]+/\*|:\*|:::[^/]+/\*)$", text):
            assert text in TYPE_WIDE, f"{where}: {text} covers a whole resource type"


def test_network_interfaces_only_in_the_stack_subnets_group_and_vpc() -> None:
    interfaces = {
        "Fn::Sub": "arn:${AWS::Partition}:ec2:${AWS::Region}:${AWS::AccountId}:network-interface/*"
    }
    ec2 = "arn:${AWS::Partition}:ec2:${AWS::Region}:${AWS::AccountId}:"
    [create] = granting("JobRole", "ec2:CreateNetworkInterface")
    # Creating one needs the subnet and the group as well: only the stack's are listed.
    assert create["Resource"] == [
        interfaces,
        {"Fn::Sub": ec2 + "subnet/${PrivateSubnetA}"},
        {"Fn::Sub": ec2 + "subnet/${PrivateSubnetB}"},
        {"Fn::Sub": ec2 + "security-group/${TrainingSecurityGroup}"},
    ]
    assert "Condition" not in create
    for action in (
        "ec2:CreateNetworkInterfacePermission",
        "ec2:DeleteNetworkInterface",
        "ec2:DeleteNetworkInterfacePermission",
    ):
        [statement] = granting("JobRole", action)
        assert statement["Resource"] == interfaces, action
        assert statement["Condition"] == {
            "ArnEquals": {"ec2:Vpc": {"Fn::Sub": ec2 + "vpc/${Vpc}"}}
        }, action
    assert not any(a.startswith("ec2:") for a in role_actions("NotebookRole"))


def test_the_notebook_reads_only_its_own_stack() -> None:
    [describe] = granting("NotebookRole", "cloudformation:DescribeStacks")
    assert as_list(describe["Action"]) == ["cloudformation:DescribeStacks"]
    assert describe["Resource"] == {"Ref": "AWS::StackId"}


# ---------------------------------------------------------------------------- the FSx link
def resolve(node: Any, conditions: Mapping[str, bool]) -> Any:
    """Fn::If evaluated the way CloudFormation does, for the given condition values."""
    if isinstance(node, dict):
        if set(node) == {"Fn::If"}:
            name, if_true, if_false = node["Fn::If"]
            return resolve(if_true if conditions[name] else if_false, conditions)
        return {key: resolve(value, conditions) for key, value in node.items()}
    if isinstance(node, list):
        return [resolve(value, conditions) for value in node]
    return node


@pytest.mark.parametrize(
    ("value", "exported"), [("false", ["NEW", "CHANGED"]), ("true", ["NEW", "CHANGED", "DELETED"])]
)
def test_deletions_reach_s3_only_when_asked(value: str, exported: list[str]) -> None:
    parameter = TEMPLATE["Parameters"]["ExportDeletions"]
    assert parameter["AllowedValues"] == ["true", "false"]
    assert TEMPLATE["Conditions"]["ExportsDeletions"] == {
        "Fn::Equals": [{"Ref": "ExportDeletions"}, "true"]
    }
    link = resolve(props("FsxS3Link"), {"ExportsDeletions": value == "true"})
    assert link["S3"]["AutoExportPolicy"]["Events"] == exported
    # Deletions in S3 still reach FSx: the bucket stays the source of truth.
    assert link["S3"]["AutoImportPolicy"]["Events"] == ["NEW", "CHANGED", "DELETED"]


def test_deletion_export_is_off_by_default() -> None:
    default = TEMPLATE["Parameters"]["ExportDeletions"]["Default"]
    assert default == "false"
    link = resolve(props("FsxS3Link"), {"ExportsDeletions": default == "true"})
    assert "DELETED" not in link["S3"]["AutoExportPolicy"]["Events"]


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
    assert parameters["EcrRepositoryName"]["Default"] == params.DEFAULT_ECR_REPOSITORY
    assert parameters["EcrRepositoryName"]["AllowedPattern"] == params.ECR_REPOSITORY_PATTERN


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
        ("EcrRepositoryName", "ringleader", True),
        ("EcrRepositoryName", "team/ringleader-gpu_2.1", True),
        ("EcrRepositoryName", "Ringleader", False),
        ("EcrRepositoryName", "team//ringleader", False),
        ("EcrRepositoryName", "ringleader-", False),
        ("EcrRepositoryName", "*", False),
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
