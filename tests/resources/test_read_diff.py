"""Each kind's read and diff against AWS's recorded answers (see ``recorded``): what it
calls to find and describe its resource (reads only: the stubber answers nothing else), the
live view it makes of the answer, and how each difference from the spec is classified."""

from __future__ import annotations

import datetime
import json
from typing import Any
from urllib.parse import quote

import pytest

from provisioner.graph.ref import Ref
from provisioner.resources.base import How, Observed, Request
from provisioner.resources.compute import Rule, SecurityGroup, SgOut, SgParams
from provisioner.resources.context import Context
from provisioner.resources.eks import EksCluster, EksParams
from provisioner.resources.eks_addons import Addon, AddonParams
from provisioner.resources.eks_nodegroup_model import (
    NodegroupLive,
    NodegroupOut,
    NodegroupParams,
    Scaling,
)
from provisioner.resources.eks_nodes import Nodegroup
from provisioner.resources.errors import Foreign
from provisioner.resources.fsx import FileSystem, FsxParams
from provisioner.resources.gateways import IgwParams, InternetGateway, NatGateway, NatParams
from provisioner.resources.iam import Role, RoleOut, RoleParams, canonical
from provisioner.resources.kms import KmsOut
from provisioner.resources.launch_template import LaunchTemplate, LtData, LtParams, Volume
from provisioner.resources.network import Subnet, SubnetOut, SubnetParams, Vpc, VpcOut, VpcParams
from provisioner.resources.routes import RouteTable, RouteTableParams
from provisioner.resources.storage import Bucket, BucketParams
from provisioner.resources.tags import DesiredTags
from tests.resources.contract import covers
from tests.resources.recorded import ACCOUNT, RecordedAws, example, tags

CLUSTER = "llm"


def _ctx(aws: RecordedAws) -> Context:
    return Context(aws=aws, cluster=CLUSTER, region=aws.region)  # type: ignore[arg-type]


def _tags(rid: str) -> DesiredTags:
    return DesiredTags((("team", "ml"),), CLUSTER, rid)


def _fields(changes: list[Any]) -> dict[str, tuple[Any, Any, How]]:
    return {c.path: (c.before, c.after, c.how) for c in changes}


@covers("vpc", "read", "diff")
def test_vpc_reads_by_tag_and_puts_dns_hostnames_back() -> None:
    aws = RecordedAws()
    vpcs = example("ec2", "DescribeVpcs")
    vpcs["Vpcs"][0]["Tags"] = tags(CLUSTER, "vpc", team="ml")
    aws.answer("ec2", "DescribeVpcs", vpcs)
    aws.answer("ec2", "DescribeVpcAttribute", example("ec2", "DescribeVpcAttribute", 0))
    hostnames = example("ec2", "DescribeVpcAttribute", 1)
    hostnames["EnableDnsHostnames"]["Value"] = False  # turned off by hand
    aws.answer("ec2", "DescribeVpcAttribute", hostnames)
    ctx = _ctx(aws)
    params = VpcParams("10.0.0.0/16", _tags("vpc"))
    observed = Vpc().read(Request(ctx, "vpc", params))
    aws.done()
    assert observed is not None and observed.outputs == VpcOut("vpc-a01106c2", "10.0.0.0/16")
    assert _fields(Vpc().diff(Request(ctx, "vpc", params), observed)) == {
        "dns_hostnames": (False, True, How.UPDATE)
    }
    other = VpcParams("10.9.0.0/16", _tags("vpc"))
    changes = _fields(Vpc().diff(Request(ctx, "vpc", other), observed))
    assert changes["cidr"] == ("10.0.0.0/16", "10.9.0.0/16", How.REPLACE)


@covers("vpc", "read")
def test_a_resource_of_another_cluster_is_not_read_as_ours() -> None:
    aws = RecordedAws()
    vpcs = example("ec2", "DescribeVpcs")
    vpcs["Vpcs"][0]["Tags"] = tags("another", "vpc")  # a filter the API ignored
    aws.answer("ec2", "DescribeVpcs", vpcs)
    assert Vpc().read(Request(_ctx(aws), "vpc", VpcParams("10.0.0.0/16", _tags("vpc")))) is None


@covers("subnet", "read", "diff")
def test_subnet_zone_is_fixed_and_public_ips_change_in_place() -> None:
    aws = RecordedAws()
    subnets = example("ec2", "DescribeSubnets")
    subnets["Subnets"][0]["Tags"] = tags(CLUSTER, "subnet/private", team="ml")
    aws.answer("ec2", "DescribeSubnets", subnets)
    ctx = _ctx(aws)
    ctx.record("vpc", VpcOut("vpc-a01106c2", "10.0.0.0/16"))
    params = SubnetParams(
        Ref("vpc", VpcOut), "10.0.1.0/24", _tags("subnet/private"), az="us-east-1c"
    )
    observed = Subnet().read(Request(ctx, "subnet/private", params))
    assert observed is not None and observed.outputs == SubnetOut("subnet-9d4a7b6c", "us-east-1c")
    assert Subnet().diff(Request(ctx, "subnet/private", params), observed) == []
    moved = SubnetParams(
        Ref("vpc", VpcOut), "10.0.1.0/24", _tags("subnet/private"), az="us-east-1a", public=True
    )
    assert _fields(Subnet().diff(Request(ctx, "subnet/private", moved), observed)) == {
        "az": ("us-east-1c", "us-east-1a", How.REPLACE),
        "public": (False, True, How.UPDATE),
    }


@covers("natgw", "read", "diff")
@covers("igw", "read", "diff")
@covers("route-table", "read", "diff")
def test_nat_gateway_and_internet_gateway_and_route_table() -> None:
    aws = RecordedAws()
    nats = example("ec2", "DescribeNatGateways")
    nats["NatGateways"][0]["Tags"] = tags(CLUSTER, "natgw", team="ml")
    nats["NatGateways"][0]["State"] = "pending"  # an earlier run stopped while it was made
    aws.answer("ec2", "DescribeNatGateways", nats)
    igws = example("ec2", "DescribeInternetGateways")
    igws["InternetGateways"][0]["Tags"] = tags(CLUSTER, "igw", team="ml")
    igws["InternetGateways"][0]["Attachments"] = []  # a run stopped before attaching it
    aws.answer("ec2", "DescribeInternetGateways", igws)
    tables = example("ec2", "DescribeRouteTables")
    tables["RouteTables"][0]["Tags"] = tags(CLUSTER, "route-table/private", team="ml")
    aws.answer("ec2", "DescribeRouteTables", tables)
    ctx = _ctx(aws)
    from provisioner.resources.gateways import EipOut, IgwOut, NatOut

    ctx.record("vpc", VpcOut("vpc-a01106c2", "10.0.0.0/16"))
    ctx.record("subnet/public", SubnetOut("subnet-847e4dc2", "us-east-1a"))
    ctx.record("subnet/private", SubnetOut("subnet-9d4a7b6c", "us-east-1a"))
    ctx.record("eip/nat", EipOut("eipalloc-89c620ec"))
    nat_params = NatParams(
        Ref("subnet/public", SubnetOut), Ref("eip/nat", EipOut), Ref("igw", IgwOut), _tags("natgw")
    )
    nat = NatGateway().read(Request(ctx, "natgw", nat_params))
    assert nat is not None and nat.pending == "pending" and nat.id == "nat-05dba92075d71c408"
    assert NatGateway().diff(Request(ctx, "natgw", nat_params), nat) == []
    igw_params = IgwParams(Ref("vpc", VpcOut), _tags("igw"))
    igw = InternetGateway().read(Request(ctx, "igw", igw_params))
    assert igw is not None
    assert _fields(InternetGateway().diff(Request(ctx, "igw", igw_params), igw)) == {
        "vpc": (None, "vpc-a01106c2", How.UPDATE)
    }
    ctx.record("natgw", NatOut("nat-05dba92075d71c408"))
    table_params = RouteTableParams(
        Ref("vpc", VpcOut),
        Ref("natgw", NatOut),
        (Ref("subnet/private", SubnetOut),),
        _tags("route-table/private"),
    )
    table = RouteTable().read(Request(ctx, "route-table/private", table_params))
    assert table is not None
    # Only the local route and the main association: the default route and the subnet are
    # missing, both made in place.
    assert _fields(RouteTable().diff(Request(ctx, "route-table/private", table_params), table)) == {
        "default_route": (None, "nat-05dba92075d71c408", How.UPDATE),
        "subnets": (frozenset(), frozenset({"subnet-9d4a7b6c"}), How.UPDATE),
    }
    aws.done()


@covers("sg", "read", "diff")
def test_security_group_rules_revoked_by_hand_are_drift_to_restore() -> None:
    aws = RecordedAws()
    group = {
        "GroupId": "sg-903004f8",
        "GroupName": "llm-efa",
        "Description": "fmctl llm: efa",
        "VpcId": "vpc-a01106c2",
        "OwnerId": ACCOUNT,
        "IpPermissions": [],  # the self-referencing rule, revoked
        "IpPermissionsEgress": [
            {"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}], "UserIdGroupPairs": []},
            {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": "sg-903004f8"}]},
        ],
        "Tags": tags(CLUSTER, "sg/efa", team="ml"),
    }
    aws.answer("ec2", "DescribeSecurityGroups", {"SecurityGroups": [group]})
    ctx = _ctx(aws)
    ctx.record("vpc", VpcOut("vpc-a01106c2", "10.0.0.0/16"))
    params = SgParams(
        Ref("vpc", VpcOut),
        "llm-efa",
        "fmctl llm: efa",
        ingress=(Rule("-1"),),
        egress=(Rule("-1"), Rule("-1", cidr="0.0.0.0/0")),
        tags=_tags("sg/efa"),
    )
    observed = SecurityGroup().read(Request(ctx, "sg/efa", params))
    assert observed is not None and observed.outputs == SgOut("sg-903004f8")
    assert _fields(SecurityGroup().diff(Request(ctx, "sg/efa", params), observed)) == {
        "ingress": (frozenset(), frozenset({("-1", None, None, "sg-903004f8")}), How.UPDATE)
    }


def _lt_params(instance_type: str) -> LtParams:
    data = LtData(
        instance_type=instance_type,
        http_tokens="required",
        http_endpoint="enabled",
        hop_limit=2,
        volumes=(Volume("/dev/xvda", 200, "gp3", True),),
        interfaces=(),
        user_data="",
    )
    return LtParams("my-template", data, _tags("launch-template/gpu"))


@covers("launch-template", "read", "diff")
def test_launch_template_changes_are_a_new_version() -> None:
    aws = RecordedAws()
    templates = example("ec2", "DescribeLaunchTemplates")
    templates["LaunchTemplates"][0]["Tags"] = tags(CLUSTER, "launch-template/gpu", team="ml")
    aws.answer("ec2", "DescribeLaunchTemplates", templates)
    versions = example("ec2", "DescribeLaunchTemplateVersions")
    versions["LaunchTemplateVersions"] = versions["LaunchTemplateVersions"][1:]  # the default
    aws.answer("ec2", "DescribeLaunchTemplateVersions", versions)
    ctx = _ctx(aws)
    params = _lt_params("p5.48xlarge")
    observed = LaunchTemplate().read(Request(ctx, "launch-template/gpu", params))
    assert observed is not None and observed.outputs.id == "lt-01238c059e3466abc"
    changes = LaunchTemplate().diff(Request(ctx, "launch-template/gpu", params), observed)
    assert {c.how for c in changes} == {How.UPDATE}
    by_path = _fields(changes)
    assert by_path["data.InstanceType"][:2] == ("t2.medium", "p5.48xlarge")
    assert by_path["data.MetadataOptions"][1] == {
        "MetadataOptions.HttpEndpoint": "enabled",
        "MetadataOptions.HttpPutResponseHopLimit": 2,
        "MetadataOptions.HttpTokens": "required",
    }
    # The recorded template has a key pair and an AMI; fmctl's has neither: both go.
    assert by_path["data.KeyName"][:2] == ("kp-us-east", None)
    # Dependents see a new version once it is made.
    assert LaunchTemplate().outputs_after(observed, changes).version is not None


def _eks_params(version: str) -> EksParams:
    from provisioner.resources.compute import SgOut as Sg

    return EksParams(
        cluster_name="devel",
        version=version,
        role=Ref("iam/eks-cluster", RoleOut),
        subnets=(Ref("subnet/private", SubnetOut),),
        security_groups=(Ref("sg/efa", Sg),),
        endpoint_private=True,
        endpoint_public=False,
        public_cidrs=(),
        logging=("api",),
        key=Ref("kms/secrets", KmsOut),
        authentication_mode="API",
        support_type="STANDARD",
        tags=_tags("eks"),
    )


def test_an_eks_cluster_without_the_owner_tag_is_refused() -> None:
    aws = RecordedAws("us-west-2")
    aws.answer("eks", "DescribeCluster", example("eks", "DescribeCluster"))
    ctx = Context(aws=aws, cluster="devel", region="us-west-2")  # type: ignore[arg-type]
    with pytest.raises(Foreign, match="not fmctl's"):
        EksCluster().read(Request(ctx, "eks", _eks_params("1.10")))


@covers("eks-cluster", "read", "diff")
def test_eks_version_goes_up_one_minor_at_a_time_never_down() -> None:
    aws = RecordedAws("us-west-2")
    cluster = example("eks", "DescribeCluster")
    cluster["cluster"]["tags"] = {"fmctl.dev/cluster": "devel", "fmctl.dev/resource": "eks"}
    cluster["cluster"]["version"] = "1.33"
    aws.answer("eks", "DescribeCluster", cluster)
    ctx = Context(aws=aws, cluster="devel", region="us-west-2")  # type: ignore[arg-type]
    observed = EksCluster().read(Request(ctx, "eks", _eks_params("1.33")))
    assert observed is not None and observed.outputs.version == "1.33"
    up = _fields(EksCluster().diff(Request(ctx, "eks", _eks_params("1.35")), observed))["version"]
    assert up == ("1.33", "1.35", How.UPDATE)
    reason = next(
        c.reason
        for c in EksCluster().diff(Request(ctx, "eks", _eks_params("1.35")), observed)
        if c.path == "version"
    )
    assert "1.33 -> 1.34 -> 1.35" in reason
    down = _fields(EksCluster().diff(Request(ctx, "eks", _eks_params("1.32")), observed))["version"]
    assert down[2] == How.IMMUTABLE


def _fsx_params(capacity: int, kind: str = "PERSISTENT_2") -> FsxParams:
    from provisioner.resources.compute import SgOut as Sg

    return FsxParams(
        Ref("subnet/private", SubnetOut),
        Ref("sg/fsx", Sg),
        capacity,
        kind,
        _tags("fsx"),
        throughput_per_tib=250,
    )


@covers("fsx", "read", "diff")
def test_fsx_grows_in_place_never_shrinks_and_a_new_type_is_a_new_file_system() -> None:
    aws = RecordedAws()
    systems = example("fsx", "DescribeFileSystems")
    fs = systems["FileSystems"][0]
    fs["Tags"] = tags(CLUSTER, "fsx", team="ml")
    fs["FileSystemType"] = "LUSTRE"
    fs["StorageCapacity"] = 1200
    fs["SubnetIds"] = ["subnet-9d4a7b6c"]
    fs["LustreConfiguration"] = {
        "DeploymentType": "PERSISTENT_2",
        "PerUnitStorageThroughput": 250,
        "MountName": "abcd1234",
        "DataCompressionType": "LZ4",
    }
    fs.pop("WindowsConfiguration", None)
    aws.answer("fsx", "DescribeFileSystems", systems)
    ctx = _ctx(aws)
    ctx.record("subnet/private", SubnetOut("subnet-9d4a7b6c", "us-east-1a"))
    observed = FileSystem().read(Request(ctx, "fsx", _fsx_params(1200)))
    assert observed is not None and observed.pending is None
    assert FileSystem().diff(Request(ctx, "fsx", _fsx_params(1200)), observed) == []
    assert _fields(FileSystem().diff(Request(ctx, "fsx", _fsx_params(2400)), observed)) == {
        "capacity_gib": (1200, 2400, How.UPDATE)
    }
    shrink = FileSystem().diff(Request(ctx, "fsx", _fsx_params(600)), observed)
    assert shrink[0].how == How.IMMUTABLE and "cannot shrink" in shrink[0].reason
    other = _fields(
        FileSystem().diff(Request(ctx, "fsx", _fsx_params(1200, "PERSISTENT_1")), observed)
    )
    assert other["deployment_type"] == ("PERSISTENT_2", "PERSISTENT_1", How.REPLACE)


def _grown(requested: datetime.datetime, status: str) -> dict[str, Any]:
    """DescribeFileSystems' example, a PERSISTENT_2 file system of 2400 GiB whose last
    storage increase (from 1200) was requested at ``requested``."""
    systems = example("fsx", "DescribeFileSystems")
    fs = systems["FileSystems"][0]
    fs.pop("WindowsConfiguration", None)
    fs.update(
        Tags=tags(CLUSTER, "fsx", team="ml"),
        FileSystemType="LUSTRE",
        StorageCapacity=2400 if status == "COMPLETED" else 1200,
        SubnetIds=["subnet-9d4a7b6c"],
        LustreConfiguration={
            "DeploymentType": "PERSISTENT_2",
            "PerUnitStorageThroughput": 250,
            "DataCompressionType": "LZ4",
        },
        AdministrativeActions=[
            {
                "AdministrativeActionType": "FILE_SYSTEM_UPDATE",
                "RequestTime": requested,
                "Status": status,
                "TargetFileSystemValues": {"StorageCapacity": 2400},
            }
        ],
    )
    return systems


def test_fsx_takes_the_next_storage_increase_six_hours_after_the_last() -> None:
    now = datetime.datetime.now(datetime.UTC)
    aws = RecordedAws()
    aws.answer("fsx", "DescribeFileSystems", _grown(now - datetime.timedelta(hours=1), "COMPLETED"))
    ctx = _ctx(aws)
    ctx.record("subnet/private", SubnetOut("subnet-9d4a7b6c", "us-east-1a"))
    observed = FileSystem().read(Request(ctx, "fsx", _fsx_params(2400)))
    assert observed is not None
    (soon,) = FileSystem().diff(Request(ctx, "fsx", _fsx_params(4800)), observed)
    assert soon.how == How.IMMUTABLE and "6 hours after the last" in soon.reason
    when = (now + datetime.timedelta(hours=5)).strftime("%Y-%m-%d %H:%M")
    assert soon.hint is not None and when in soon.hint and "capacityGiB at 2400" in soon.hint

    aws = RecordedAws()
    aws.answer("fsx", "DescribeFileSystems", _grown(now - datetime.timedelta(hours=7), "COMPLETED"))
    ctx = _ctx(aws)
    ctx.record("subnet/private", SubnetOut("subnet-9d4a7b6c", "us-east-1a"))
    observed = FileSystem().read(Request(ctx, "fsx", _fsx_params(2400)))
    assert observed is not None
    assert _fields(FileSystem().diff(Request(ctx, "fsx", _fsx_params(4800)), observed)) == {
        "capacity_gib": (2400, 4800, How.UPDATE)
    }


def test_an_fsx_increase_on_its_way_counts_as_asked() -> None:
    """Killed after UpdateFileSystem: the size is still the old one, the action says where it
    is going; the rerun has nothing to change (and nothing refused by the 6 hours)."""
    aws = RecordedAws()
    now = datetime.datetime.now(datetime.UTC)
    aws.answer("fsx", "DescribeFileSystems", _grown(now, "IN_PROGRESS"))
    ctx = _ctx(aws)
    ctx.record("subnet/private", SubnetOut("subnet-9d4a7b6c", "us-east-1a"))
    observed = FileSystem().read(Request(ctx, "fsx", _fsx_params(2400)))
    assert observed is not None and observed.live.capacity_gib == 2400
    assert FileSystem().diff(Request(ctx, "fsx", _fsx_params(2400)), observed) == []


@covers("iam-role", "read", "diff")
def test_role_policies_attached_by_hand_go_and_missing_ones_come_back() -> None:
    aws = RecordedAws()
    role_tags = example("iam", "ListRoleTags")
    role_tags["Tags"] += tags(CLUSTER, "iam/eks-node", team="ml")
    aws.answer("iam", "ListRoleTags", role_tags)
    role = example("iam", "GetRole")
    trust = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole"}],
    }
    # IAM sends the document URL-encoded (the example's placeholder says so).
    role["Role"]["AssumeRolePolicyDocument"] = quote(json.dumps(trust))
    aws.answer("iam", "GetRole", role)
    aws.answer(
        "iam",
        "ListAttachedRolePolicies",
        {
            "AttachedPolicies": [
                {
                    "PolicyName": "AdministratorAccess",
                    "PolicyArn": "arn:aws:iam::aws:policy/AdministratorAccess",
                }
            ]
        },
    )
    aws.answer("iam", "ListRolePolicies", {"PolicyNames": []})
    profile = example("iam", "GetInstanceProfile")
    aws.answer("iam", "GetInstanceProfile", profile)
    ctx = _ctx(aws)
    params = RoleParams(
        role_name="Test-Role",
        trust=canonical(trust),
        managed=("AmazonEKSWorkerNodePolicy",),
        inline_name="fmctl-eks-node",
        inline=None,
        instance_profile=True,
        description="",
        tags=_tags("iam/eks-node"),
    )
    observed = Role().read(Request(ctx, "iam/eks-node", params))
    aws.done()
    assert observed is not None
    assert observed.outputs == RoleOut("Test-Role", "arn:aws:iam::123456789012:role/Test-Role")
    changes = _fields(Role().diff(Request(ctx, "iam/eks-node", params), observed))
    assert changes["managed"] == (
        frozenset({"AdministratorAccess"}),
        frozenset({"AmazonEKSWorkerNodePolicy"}),
        How.UPDATE,
    )
    # The recorded tags (Dept, Team: someone else's) stay theirs: no tags change.
    assert "tags" not in changes


@covers("bucket", "read", "diff")
def test_bucket_safety_settings_are_restored() -> None:
    aws = RecordedAws()
    bucket = f"fmctl-{CLUSTER}-{ACCOUNT}-us-east-1"
    tagged = example("s3", "GetBucketTagging")
    tagged["TagSet"] += tags(CLUSTER, "bucket", team="ml")
    aws.answer("s3", "GetBucketTagging", tagged)
    aws.answer("s3", "GetBucketVersioning", example("s3", "GetBucketVersioning"))
    aws.answer(
        "s3",
        "GetBucketEncryption",
        {
            "ServerSideEncryptionConfiguration": {
                "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms"}}]
            }
        },
    )
    aws.fail("s3", "GetPublicAccessBlock", "NoSuchPublicAccessBlockConfiguration", 404)
    aws.answer("s3", "GetBucketPolicy", example("s3", "GetBucketPolicy"))  # not fmctl's
    ctx = _ctx(aws)
    observed = Bucket().read(Request(ctx, "bucket", BucketParams(_tags("bucket"))))
    aws.done()
    assert observed is not None and observed.id == bucket
    assert _fields(
        Bucket().diff(Request(ctx, "bucket", BucketParams(_tags("bucket"))), observed)
    ) == {
        "public_access_blocked": (False, True, How.UPDATE),
        "tls_only": (False, True, How.UPDATE),
    }


def _nodegroup(**changes: Any) -> dict[str, Any]:
    """A DescribeNodegroup answer (AWS publishes no example: the shape is the model's)."""
    ng = {
        "nodegroupName": "gpu",
        "nodegroupArn": f"arn:aws:eks:us-west-2:{ACCOUNT}:nodegroup/llm/gpu/1",
        "clusterName": CLUSTER,
        "version": "1.33",
        "status": "ACTIVE",
        "capacityType": "ON_DEMAND",
        "amiType": "AL2023_x86_64_NVIDIA",
        "instanceTypes": ["p5en.48xlarge"],
        "scalingConfig": {"minSize": 2, "maxSize": 2, "desiredSize": 2},
        "subnets": ["subnet-9d4a7b6c"],
        "nodeRole": f"arn:aws:iam::{ACCOUNT}:role/node",
        "labels": {"fmctl.dev/pool": "gpu"},
        "updateConfig": {"maxUnavailable": 1},
        "tags": {t["Key"]: t["Value"] for t in tags(CLUSTER, "nodegroup/gpu", team="ml")},
    }
    ng.update(changes)
    return {"nodegroup": ng}


def _ng_params(count: int, instance_type: str) -> NodegroupParams:
    from provisioner.resources.eks import EksOut
    from provisioner.resources.eks_access import AccessOut

    return NodegroupParams(
        cluster=Ref("eks", EksOut),
        nodegroup_name="gpu",
        ami_type="AL2023_x86_64_NVIDIA",
        capacity_type="ON_DEMAND",
        scaling=Scaling(count, count, count),
        subnets=(Ref("subnet/private", SubnetOut),),
        node_role=Ref("iam/eks-node", RoleOut),
        labels=(("fmctl.dev/pool", "gpu"),),
        taints=(),
        max_unavailable=1,
        version="1.33",
        tags=_tags("nodegroup/gpu"),
        access=Ref("access/nodes", AccessOut),
        instance_types=(instance_type,),
    )


def _nodegroup_world(described: dict[str, Any] | None = None) -> tuple[RecordedAws, Context]:
    """AWS answering for one EKS cluster of ours with one node group ``gpu`` (as
    ``described``, else ``_nodegroup``, describes it), and a run context with its subnet and
    role made."""
    aws = RecordedAws("us-west-2")
    cluster = example("eks", "DescribeCluster")
    cluster["cluster"]["name"] = CLUSTER
    cluster["cluster"]["tags"] = {"fmctl.dev/cluster": CLUSTER, "fmctl.dev/resource": "eks"}
    aws.answer("eks", "DescribeCluster", cluster)
    aws.answer("eks", "ListNodegroups", {"nodegroups": ["gpu"]})
    aws.answer("eks", "DescribeNodegroup", described or _nodegroup())
    ctx = Context(aws=aws, cluster=CLUSTER, region="us-west-2")  # type: ignore[arg-type]
    ctx.record("subnet/private", SubnetOut("subnet-9d4a7b6c", "us-west-2a"))
    ctx.record("iam/eks-node", RoleOut("node", f"arn:aws:iam::{ACCOUNT}:role/node"))
    return aws, ctx


@covers("eks-nodegroup", "read", "diff")
def test_nodegroup_scales_in_place_and_a_new_type_replaces_it() -> None:
    aws, ctx = _nodegroup_world()
    observed = Nodegroup().read(Request(ctx, "nodegroup/gpu", _ng_params(2, "p5en.48xlarge")))
    aws.done()
    assert observed is not None and observed.outputs == NodegroupOut("gpu")
    assert (
        Nodegroup().diff(Request(ctx, "nodegroup/gpu", _ng_params(2, "p5en.48xlarge")), observed)
        == []
    )
    scaled = _fields(
        Nodegroup().diff(Request(ctx, "nodegroup/gpu", _ng_params(4, "p5en.48xlarge")), observed)
    )
    assert scaled == {
        "scaling.min_size": (2, 4, How.UPDATE),
        "scaling.max_size": (2, 4, How.UPDATE),
        "scaling.desired_size": (2, 4, How.UPDATE),
    }
    other = _fields(
        Nodegroup().diff(Request(ctx, "nodegroup/gpu", _ng_params(2, "p5.48xlarge")), observed)
    )
    assert other["instance_type"] == ("p5en.48xlarge", "p5.48xlarge", How.REPLACE)
    assert Nodegroup.create_before_delete  # blue/green


def test_node_auto_repair_changes_in_place() -> None:
    """health: turns EKS node auto repair on a GPU group on or off, and its budget, through
    UpdateNodegroupConfig nodeRepairConfig; a group described without one has it off."""
    import dataclasses

    from provisioner.resources.eks_nodegroup_model import NodeRepair

    aws, ctx = _nodegroup_world()
    base = _ng_params(2, "p5en.48xlarge")
    observed = Nodegroup().read(Request(ctx, "nodegroup/gpu", base))
    aws.done()
    assert observed is not None and observed.live.repair == NodeRepair()
    assert Nodegroup().diff(Request(ctx, "nodegroup/gpu", base), observed) == []
    on = dataclasses.replace(base, repair=NodeRepair(True, 2))
    changes = Nodegroup().diff(Request(ctx, "nodegroup/gpu", on), observed)
    assert _fields(changes) == {
        "repair.enabled": (False, True, How.UPDATE),
        "repair.max_parallel": (None, 2, How.UPDATE),
    }
    paths = {c.path.split(".")[0] for c in changes}  # as update() groups them
    request = Nodegroup._config_change(on, observed.live, paths)
    assert request == {"nodeRepairConfig": {"enabled": True, "maxParallelNodesRepairedCount": 2}}
    # Read back as EKS answers it.
    assert NodeRepair.of(request["nodeRepairConfig"]) == NodeRepair(True, 2)
    assert NodeRepair.of({"enabled": False, "maxParallelNodesRepairedCount": 3}) == NodeRepair()


def test_turning_the_verify_gate_on_says_what_it_does_to_the_nodes() -> None:
    """The gate's taint added to a running group (an EKS cluster made with the gate off,
    `up` again with it on, the default): an in-place taint update, and the plan says every
    node the group has is held until it passes; another taint's change says nothing more."""
    import dataclasses

    from provisioner.catalog.eks_repair import UNVERIFIED_TAINT
    from provisioner.resources.eks_nodegroup_model import Taint

    aws, ctx = _nodegroup_world()
    base = _ng_params(2, "p5en.48xlarge")
    observed = Nodegroup().read(Request(ctx, "nodegroup/gpu", base))
    aws.done()
    assert observed is not None
    gated = dataclasses.replace(base, taints=(Taint(UNVERIFIED_TAINT, "true", "NO_SCHEDULE"),))
    (change,) = Nodegroup().diff(Request(ctx, "nodegroup/gpu", gated), observed)
    assert (change.path, change.how) == ("taints", How.UPDATE)
    assert change.note is not None and change.note.startswith("the verify gate goes on: every node")
    other = dataclasses.replace(base, taints=(Taint("nvidia.com/gpu", "true", "NO_SCHEDULE"),))
    (change,) = Nodegroup().diff(Request(ctx, "nodegroup/gpu", other), observed)
    assert change.path == "taints" and change.note is None


def test_an_autoscaled_nodegroup_keeps_the_autoscalers_size_and_its_groups_tags() -> None:
    """A pool the Cluster Autoscaler sizes: its group's tags are read (one
    DescribeAutoScalingGroups), the desired size it set is kept (only a size outside the
    bounds is changed), and the tags fmctl wants are what differs."""
    import dataclasses

    asg = "eks-gpu-12c6f1f2-4b4e-4d8a-9a3f-0123456789ab"
    described = _nodegroup(
        scalingConfig={"minSize": 0, "maxSize": 4, "desiredSize": 1},
        labels={"fmctl.dev/pool": "gpu", "k8s.amazonaws.com/accelerator": "nvidia-h200"},
        resources={"autoScalingGroups": [{"name": asg}]},
    )
    aws, ctx = _nodegroup_world(described)
    group = {
        "AutoScalingGroupName": asg,
        "MinSize": 0,
        "MaxSize": 4,
        "DesiredCapacity": 1,
        "DefaultCooldown": 300,
        "AvailabilityZones": ["us-west-2a"],
        "HealthCheckType": "EC2",
        "CreatedTime": "2026-11-30T10:00:00Z",
        "Tags": [
            {
                "ResourceId": asg,
                "ResourceType": "auto-scaling-group",
                "Key": k,
                "Value": v,
                "PropagateAtLaunch": False,
            }
            for k, v in (
                ("fmctl.dev/autoscaler", CLUSTER),
                ("k8s.io/cluster-autoscaler/node-template/label/fmctl.dev/pool", "gpu"),
                ("eks:nodegroup-name", "gpu"),  # EKS's own: not fmctl's to keep
            )
        ],
    }
    aws.answer("autoscaling", "DescribeAutoScalingGroups", {"AutoScalingGroups": [group]})
    wanted = (
        ("fmctl.dev/autoscaler", CLUSTER),
        ("k8s.io/cluster-autoscaler/node-template/label/fmctl.dev/pool", "gpu"),
        ("k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu", "8"),
    )
    params = dataclasses.replace(
        _ng_params(4, "p5en.48xlarge"),
        scaling=Scaling(0, 4, 4),
        labels=(("fmctl.dev/pool", "gpu"), ("k8s.amazonaws.com/accelerator", "nvidia-h200")),
        asg_tags=wanted,
    )
    observed = Nodegroup().read(Request(ctx, "nodegroup/gpu", params))
    aws.done()
    assert observed is not None and observed.live.scaling == Scaling(0, 4, 1)
    assert observed.live.asg_tags == frozenset(wanted[:2])  # EKS's tag is not fmctl's
    changes = Nodegroup().diff(Request(ctx, "nodegroup/gpu", params), observed)
    assert [c.path for c in changes] == ["asg_tags"], changes  # the size is the autoscaler's
    shrunk = dataclasses.replace(params, scaling=Scaling(0, 0, 0))  # max below the size
    assert _fields(Nodegroup().diff(Request(ctx, "nodegroup/gpu", shrunk), observed))[
        "scaling.desired_size"
    ] == (1, 0, How.UPDATE)
    # Not autoscaled any more: the tags go, and the spec's size is back.
    fixed = dataclasses.replace(params, asg_tags=(), scaling=Scaling(4, 4, 4))
    paths = {c.path for c in Nodegroup().diff(Request(ctx, "nodegroup/gpu", fixed), observed)}
    assert {"asg_tags", "scaling.desired_size", "scaling.min_size"} <= paths


@covers("eks-addon", "read", "diff")
def test_addon_follows_the_default_of_the_spec_version() -> None:
    aws = RecordedAws("us-west-2")
    cluster = example("eks", "DescribeCluster")
    cluster["cluster"]["name"] = CLUSTER
    cluster["cluster"]["tags"] = {"fmctl.dev/cluster": CLUSTER, "fmctl.dev/resource": "eks"}
    aws.answer("eks", "DescribeCluster", cluster)
    aws.answer("eks", "ListAddons", {"addons": ["kube-proxy"]})
    aws.answer(
        "eks",
        "DescribeAddon",
        {
            "addon": {
                "addonName": "kube-proxy",
                "clusterName": CLUSTER,
                "status": "ACTIVE",
                "addonVersion": "v1.33.3-eksbuild.6",
                "tags": {"fmctl.dev/cluster": CLUSTER, "fmctl.dev/resource": "addon/kube-proxy"},
            }
        },
    )
    aws.answer(
        "eks",
        "DescribeAddonVersions",
        {
            "addons": [
                {
                    "addonName": "kube-proxy",
                    "addonVersions": [
                        {
                            "addonVersion": "v1.34.1-eksbuild.3",
                            "compatibilities": [{"clusterVersion": "1.34", "defaultVersion": True}],
                        }
                    ],
                }
            ]
        },
    )
    ctx = Context(aws=aws, cluster=CLUSTER, region="us-west-2")  # type: ignore[arg-type]
    from provisioner.graph.ref import After
    from provisioner.resources.eks import EksOut

    params = AddonParams(
        Ref("eks", EksOut),
        "kube-proxy",
        "1.34",
        After("nodegroup/system", NodegroupOut),
        _tags("addon/kube-proxy"),
    )
    observed = Addon().read(Request(ctx, "addon/kube-proxy", params))
    assert observed is not None
    changes = _fields(Addon().diff(Request(ctx, "addon/kube-proxy", params), observed))
    aws.done()
    assert changes["version"] == ("v1.33.3-eksbuild.6", "v1.34.1-eksbuild.3", How.UPDATE)


def test_the_read_answers_used_here_are_awss_own() -> None:
    """The fixtures are AWS's published examples (and not something fmctl wrote)."""
    assert example("ec2", "DescribeVpcs")["Vpcs"][0]["VpcId"] == "vpc-a01106c2"
    assert json.loads(example("s3", "GetBucketPolicy")["Policy"])["Id"] == "LogPolicy"
    assert isinstance(Observed, type)


def test_a_full_ultraserver_block_is_stopped_not_rolled() -> None:
    """On a GB200 Capacity Block a version or template change cannot surge (AWS's EKS guide
    for P6e-GB200: scale to 0 and back): the plan says the pool stops, and `up` does it
    only with --allow-replace (ops.engine.refusals); a p5 block still rolls."""
    import dataclasses

    aws = RecordedAws("us-west-2")
    ctx = Context(aws=aws, cluster=CLUSTER, region="us-west-2")  # type: ignore[arg-type]
    ctx.record("subnet/private", SubnetOut("subnet-9d4a7b6c", "us-west-2a"))
    ctx.record("iam/eks-node", RoleOut("node", f"arn:aws:iam::{ACCOUNT}:role/node"))

    def case(instance_type: str) -> dict[str, tuple[Any, Any, How]]:
        base = _ng_params(18, "unused")
        params = dataclasses.replace(
            base, capacity_type="CAPACITY_BLOCK", instance_types=(), instance_type=instance_type
        )
        live = Nodegroup().desired(
            Request(ctx, "nodegroup/gpu", params), _observed_like(params, ctx)
        )
        observed = Observed(NodegroupOut("gpu"), live, "gpu")
        newer = dataclasses.replace(params, version="1.34")
        return _fields(Nodegroup().diff(Request(ctx, "nodegroup/gpu", newer), observed))

    assert case("p6e-gb200.36xlarge")["version"] == ("1.33", "1.34", How.STOP)
    assert case("p5.48xlarge")["version"] == ("1.33", "1.34", How.UPDATE)


def _observed_like(params: NodegroupParams, ctx: Context) -> Observed[Any, Any]:
    """An observation whose tags are the desired ones (what desired() reads off it)."""
    from provisioner.resources.tags import Tags

    empty = NodegroupLive(
        "",
        "",
        None,
        frozenset(),
        None,
        Scaling(0, 0, 0),
        frozenset(),
        frozenset(),
        1,
        "",
        None,
        Tags.of({}),
    )
    return Observed(NodegroupOut("gpu"), empty, "gpu")


@covers("expiry-schedule", "read", "diff")
def test_expiry_schedules_read_by_group_and_move_with_the_ttl() -> None:
    """The schedule group read by name and owned by its tags, its schedules described one by
    one; a longer ttl than the one the schedules were made for moves their at() (in place),
    and a node group the schedules miss is a change of the schedules."""
    from provisioner.graph.ref import Ref
    from provisioner.resources.iam import RoleOut
    from provisioner.resources.schedules import Expiry, ExpiryParams, StopCall, input_of

    aws = RecordedAws()
    group_arn = f"arn:aws:scheduler:us-east-1:{ACCOUNT}:schedule-group/fmctl-{CLUSTER}"
    aws.answer(
        "scheduler",
        "GetScheduleGroup",
        {"Arn": group_arn, "Name": f"fmctl-{CLUSTER}", "State": "ACTIVE"},
    )
    expires = {"Key": "fmctl.dev/expires-at", "Value": "2026-11-30T11:00:00Z"}
    group_tags = [*tags(CLUSTER, "expiry", team="ml"), expires]
    aws.answer("scheduler", "ListTagsForResource", {"Tags": group_tags})
    aws.answer(
        "scheduler",
        "ListSchedules",
        {"Schedules": [{"Name": "gpu", "GroupName": f"fmctl-{CLUSTER}"}]},
    )
    role = f"arn:aws:iam::{ACCOUNT}:role/fmctl-{CLUSTER}-us-east-1-ttl-scheduler"
    gpu = input_of(
        {"clusterName": CLUSTER, "nodegroupName": "gpu", "scalingConfig": {"minSize": 0}}
    )
    aws.answer(
        "scheduler",
        "GetSchedule",
        {
            "Name": "gpu",
            "GroupName": f"fmctl-{CLUSTER}",
            "ScheduleExpression": "at(2026-11-30T11:00:00)",
            "ScheduleExpressionTimezone": "UTC",
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "Target": {
                "Arn": "arn:aws:scheduler:::aws-sdk:eks:updateNodegroupConfig",
                "RoleArn": role,
                "Input": gpu,
            },
        },
    )
    ctx = _ctx(aws)
    ctx.record("iam/ttl-scheduler", RoleOut("fmctl-llm-us-east-1-ttl-scheduler", role))
    system = input_of(
        {"clusterName": CLUSTER, "nodegroupName": "system", "scalingConfig": {"minSize": 0}}
    )
    params = ExpiryParams(
        f"fmctl-{CLUSTER}",
        Ref("iam/ttl-scheduler", RoleOut),
        (
            StopCall("gpu", "eks:updateNodegroupConfig", gpu),
            StopCall("system", "eks:updateNodegroupConfig", system),
        ),
        DesiredTags((("team", "ml"),), CLUSTER, "expiry", ttl_seconds=3 * 3600),
    )
    kind = Expiry()
    observed = kind.read(Request(ctx, "expiry", params))
    assert observed is not None and observed.id == f"fmctl-{CLUSTER}"
    # Its expiry passed long ago (2026-11-30): the plan says what happened.
    assert "scaled its node groups to zero" in observed.notes[0]
    changes = _fields(kind.diff(Request(ctx, "expiry", params), observed))
    # Three hours from its creation (10:00), not the one hour its tag says.
    assert changes["at"][:2] == (
        frozenset({"at(2026-11-30T11:00:00)"}),
        frozenset({"at(2026-11-30T13:00:00)"}),
    )
    assert changes["at"][2] == How.UPDATE
    gone, added, how = changes["schedules"]  # a set's change: what goes, what comes
    assert gone == frozenset() and {s.name for s in added} == {"system"}
    assert how == How.UPDATE
    assert changes["tags"][1] == {"fmctl.dev/expires-at": "2026-11-30T13:00:00Z"}


@covers("budget", "read", "diff")
def test_budget_reads_its_notifications_and_changes_limit_and_subscribers_in_place() -> None:
    """The budget read by name and owned by its tags (the region's too: budgets are the
    account's), its notifications and their subscribers described one by one; a new limit
    and a new address are changes in place, what it has spent is read and never a change,
    and the same name tagged for another region is not taken for ours. (AWS publishes no
    Budgets examples: these answers are written here, checked by botocore's model.)"""
    from provisioner.resources.budgets import Budget, BudgetParams, Notice

    def answers(region_tag: str) -> RecordedAws:
        aws = RecordedAws()
        aws.answer(
            "budgets",
            "DescribeBudget",
            {
                "Budget": {
                    "BudgetName": f"fmctl-{CLUSTER}-us-east-1",
                    "BudgetLimit": {"Amount": "1000.0", "Unit": "USD"},
                    "CostFilters": {"TagKeyValue": [f"user:fmctl.dev/cluster${CLUSTER}"]},
                    "TimeUnit": "MONTHLY",
                    "BudgetType": "COST",
                    "CalculatedSpend": {"ActualSpend": {"Amount": "850.5", "Unit": "USD"}},
                }
            },
        )
        region = [{"Key": "fmctl.dev/region", "Value": region_tag}]
        aws.answer(
            "budgets",
            "ListTagsForResource",
            {"ResourceTags": [*tags(CLUSTER, "budget", team="ml"), *region]},
        )
        return aws

    aws = answers("us-east-1")
    notification = {
        "NotificationType": "ACTUAL",
        "ComparisonOperator": "GREATER_THAN",
        "Threshold": 80.0,
        "ThresholdType": "PERCENTAGE",
        "NotificationState": "ALARM",
    }
    aws.answer("budgets", "DescribeNotificationsForBudget", {"Notifications": [notification]})
    aws.answer(
        "budgets",
        "DescribeSubscribersForNotification",
        {"Subscribers": [{"SubscriptionType": "EMAIL", "Address": "ops@example.com"}]},
    )
    ctx = _ctx(aws)
    params = BudgetParams(
        f"fmctl-{CLUSTER}-us-east-1",
        1500.0,
        "monthly",
        ("ops@example.com", "lead@example.com"),
        None,
        DesiredTags((("team", "ml"),), CLUSTER, "budget", region="us-east-1"),
    )
    kind = Budget()
    observed = kind.read(Request(ctx, "budget", params))
    aws.done()
    assert observed is not None and observed.live.spent == "850.50"
    assert observed.live.limit == "1000.00" and observed.notes == ()
    changes = _fields(kind.diff(Request(ctx, "budget", params), observed))
    assert changes["limit"] == ("1000.00", "1500.00", How.UPDATE)
    gone, added, how = changes["notices"]
    both = frozenset({("EMAIL", "ops@example.com"), ("EMAIL", "lead@example.com")})
    assert gone == {Notice(80.0, frozenset({("EMAIL", "ops@example.com")}))}
    assert added == {Notice(80.0, both), Notice(100.0, both)} and how == How.UPDATE
    assert set(changes) == {"limit", "notices"}  # spent, period and scope are as asked

    elsewhere = answers("eu-west-1")
    with pytest.raises(Foreign):
        kind.read(Request(_ctx(elsewhere), "budget", params))


@covers("sns-topic", "read", "diff")
def test_topic_reads_its_policy_and_key_and_puts_them_back() -> None:
    """The topic read by its ARN (its name is fmctl's), owned by its tags; an access policy
    changed by hand, or its key taken off, is put back in place."""
    from provisioner.resources.kms import KmsOut
    from provisioner.resources.topics import Topic, TopicParams, access_policy

    aws = RecordedAws()
    arn = f"arn:aws:sns:us-east-1:{ACCOUNT}:fmctl-{CLUSTER}-budget"
    key = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    opened = json.dumps({"Statement": [{"Effect": "Allow", "Principal": "*"}]})
    aws.answer("sns", "GetTopicAttributes", {"Attributes": {"TopicArn": arn, "Policy": opened}})
    aws.answer("sns", "ListTagsForResource", {"Tags": tags(CLUSTER, "budget/topic", team="ml")})
    ctx = _ctx(aws)
    ctx.record("kms/budget", KmsOut(key.rsplit("/", 1)[-1], key))
    params = TopicParams(
        f"fmctl-{CLUSTER}-budget",
        "budgets.amazonaws.com",
        Ref("kms/budget", KmsOut),
        _tags("budget/topic"),
    )
    kind = Topic()
    observed = kind.read(Request(ctx, "budget/topic", params))
    aws.done()
    assert observed is not None and observed.id == arn
    changes = _fields(kind.diff(Request(ctx, "budget/topic", params), observed))
    wanted = access_policy(arn, ACCOUNT, "budgets.amazonaws.com")
    assert json.loads(wanted)["Statement"][0]["Condition"] == {
        "StringEquals": {"aws:SourceAccount": ACCOUNT}
    }
    assert changes["policy"][1:] == (wanted, How.UPDATE)
    assert changes["key"] == ("", key, How.UPDATE)


@covers("function", "read", "diff")
def test_function_reads_its_package_role_and_subscription() -> None:
    """The stop function read by name, owned by its tags (GetFunction's); its package is
    compared by Lambda's CodeSha256 of the one fmctl builds, and a subscription to the topic
    that went missing comes back in place."""
    from provisioner.resources.functions import Function, FunctionParams, code_sha, package
    from provisioner.resources.schedules import StopCall, input_of
    from provisioner.resources.topics import TopicOut

    aws = RecordedAws()
    name = f"fmctl-{CLUSTER}-budget-stop"
    role = f"arn:aws:iam::{ACCOUNT}:role/fmctl-{CLUSTER}-us-east-1-budget-stop"
    topic = f"arn:aws:sns:us-east-1:{ACCOUNT}:fmctl-{CLUSTER}-budget"
    call = StopCall(
        "gpu",
        "eks:updateNodegroupConfig",
        input_of({"clusterName": CLUSTER, "nodegroupName": "gpu", "scalingConfig": {}}),
    )
    built = code_sha(package([{"action": call.action, "input": json.loads(call.input)}]))
    found = example("lambda", "GetFunction")
    found["Configuration"].update(
        FunctionName=name,
        FunctionArn=f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:{name}",
        CodeSha256=built,
        Role=role,
        Runtime="python3.12",
        State="Active",
    )
    found["Tags"] = {t["Key"]: t["Value"] for t in tags(CLUSTER, "budget/stop", team="ml")}
    aws.answer("lambda", "GetFunction", found)
    aws.answer("sns", "ListSubscriptions", {"Subscriptions": []})
    ctx = _ctx(aws)
    ctx.record("iam/budget-stop", RoleOut(role.rsplit("/", 1)[-1], role))
    ctx.record("budget/topic", TopicOut(topic, topic))
    params = FunctionParams(
        name,
        Ref("iam/budget-stop", RoleOut),
        Ref("budget/topic", TopicOut),
        (call,),
        _tags("budget/stop"),
    )
    kind = Function()
    observed = kind.read(Request(ctx, "budget/stop", params))
    aws.done()
    assert observed is not None and observed.pending is None
    changes = _fields(kind.diff(Request(ctx, "budget/stop", params), observed))
    assert set(changes) == {"topics"}, changes  # the package and the role are as built
    assert changes["topics"] == (frozenset(), frozenset({topic}), How.UPDATE)


def _block_answers(aws: RecordedAws, end: datetime.datetime) -> None:
    """EC2's side of a block's triggers: the block (its end)."""
    aws.answer(
        "ec2",
        "DescribeCapacityReservations",
        {
            "CapacityReservations": [
                {
                    "CapacityReservationId": "cr-0123456789abcdef0",
                    "State": "active",
                    "ReservationType": "capacity-block",
                    "EndDate": end,
                    "EndDateType": "limited",
                }
            ]
        },
    )


def _block_params(name: str) -> Any:
    from provisioner.resources.block_ends import Block, BlockEndParams
    from provisioner.resources.iam import RoleOut
    from provisioner.resources.pcs import NodeGroupOut

    return BlockEndParams(
        name,
        Ref("iam/block-end", RoleOut),
        (Block("train", "cr-0123456789abcdef0", "USR1"),),
        "pcs",
        Ref("pcs/node-group/login", NodeGroupOut),
        _tags("blocks/schedule"),
    )


def _block_ctx(aws: RecordedAws) -> Context:
    from provisioner.resources.iam import RoleOut
    from provisioner.resources.pcs import NodeGroupOut

    ctx = _ctx(aws)
    role = f"arn:aws:iam::{ACCOUNT}:role/fmctl-{CLUSTER}-us-east-1-block-end"
    ctx.record("iam/block-end", RoleOut(role.rsplit("/", 1)[-1], role))
    ctx.record("pcs/node-group/login", NodeGroupOut("pcs_login0001"))
    return ctx


@covers("block-schedule", "read", "diff")
def test_block_schedule_moves_with_the_blocks_end() -> None:
    """The T-60 schedule read from its group; the block extended (EC2's EndDate later) moves
    its at() in place, and the script it sends carries the new end."""
    from provisioner.resources.block_ends import BlockSchedule, command, ends

    aws = RecordedAws()
    name = f"fmctl-{CLUSTER}-blocks"
    arn = f"arn:aws:scheduler:us-east-1:{ACCOUNT}:schedule-group/{name}"
    aws.answer("scheduler", "GetScheduleGroup", {"Arn": arn, "Name": name, "State": "ACTIVE"})
    aws.answer(
        "scheduler", "ListTagsForResource", {"Tags": tags(CLUSTER, "blocks/schedule", team="ml")}
    )
    aws.answer("scheduler", "ListSchedules", {"Schedules": [{"Name": "end-train"}]})
    old_end = datetime.datetime(2030, 1, 2, 11, 30, tzinfo=datetime.UTC)
    new_end = old_end + datetime.timedelta(days=1)
    aws.answer(
        "scheduler",
        "GetSchedule",
        {
            "Name": "end-train",
            "GroupName": name,
            "ScheduleExpression": "at(2030-01-02T10:30:00)",
            "Target": {
                "Arn": "arn:aws:scheduler:::aws-sdk:ssm:sendCommand",
                "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/fmctl-{CLUSTER}-us-east-1-block-end",
                "Input": "{}",
            },
        },
    )
    _block_answers(aws, new_end)
    ctx = _block_ctx(aws)
    params = _block_params(name)
    kind = BlockSchedule()
    observed = kind.read(Request(ctx, "blocks/schedule", params))
    assert observed is not None and observed.notes == ()
    changes = _fields(kind.diff(Request(ctx, "blocks/schedule", params), observed))
    aws.done()
    assert set(changes) == {"at", "schedules"}
    assert changes["at"] == (
        frozenset({"at(2030-01-02T10:30:00)"}),
        frozenset({"at(2030-01-03T10:30:00)"}),
        How.UPDATE,
    )
    _, added, _ = changes["schedules"]
    (schedule,) = added
    sent = json.loads(schedule.input)
    # The login node group, by the tag PCS puts on its instances, one node at a time.
    login = [{"Key": "tag:aws:pcs:compute-node-group-id", "Values": ["pcs_login0001"]}]
    assert (sent["Targets"], sent["MaxConcurrency"]) == (login, "1")
    script = sent["Parameters"]["commands"][0]
    assert script == command(params.blocks, ends(ctx, params.blocks), "cr-0123456789abcdef0")
    assert f"train {int(new_end.timestamp())} --block cr-0123456789abcdef0" in script


@covers("block-warning", "read", "diff")
def test_block_warning_rule_names_the_login_node_group() -> None:
    """The T-40 rule read with its target; one that names a login node by instance id (as
    fmctl did before) is changed in place to the login node group's tag, which a replaced
    login node carries too; the pattern (EC2's warning, both of its names, for this block)
    is what was put."""
    from provisioner.resources.block_ends import BlockWarning, pattern

    aws = RecordedAws()
    name = f"fmctl-{CLUSTER}-0123456789abcdef0"
    params = _block_params(name)
    rule_arn = f"arn:aws:events:us-east-1:{ACCOUNT}:rule/{name}"
    aws.answer(
        "events",
        "DescribeRule",
        {"Name": name, "Arn": rule_arn, "EventPattern": pattern(params.blocks), "State": "ENABLED"},
    )
    aws.answer(
        "events", "ListTagsForResource", {"Tags": tags(CLUSTER, "blocks/schedule", team="ml")}
    )
    role = f"arn:aws:iam::{ACCOUNT}:role/fmctl-{CLUSTER}-us-east-1-block-end"
    aws.answer(
        "events",
        "ListTargetsByRule",
        {
            "Targets": [
                {
                    "Id": "block-end",
                    "Arn": "arn:aws:ssm:us-east-1::document/AWS-RunShellScript",
                    "RoleArn": role,
                    "Input": '{"commands":["true"]}',
                    "RunCommandParameters": {
                        "RunCommandTargets": [{"Key": "InstanceIds", "Values": ["i-0old"]}]
                    },
                }
            ]
        },
    )
    end = datetime.datetime(2030, 1, 2, 11, 30, tzinfo=datetime.UTC)
    _block_answers(aws, end)
    ctx = _block_ctx(aws)
    kind = BlockWarning()
    observed = kind.read(Request(ctx, "blocks/warning/train", params))
    assert observed is not None and observed.outputs.arn == rule_arn
    changes = _fields(kind.diff(Request(ctx, "blocks/warning/train", params), observed))
    aws.done()
    # What is named, and the script (the one `up` would write now), in place.
    assert set(changes) == {"target.key", "target.values", "target.input"}
    assert changes["target.key"] == (
        "InstanceIds",
        "tag:aws:pcs:compute-node-group-id",
        How.UPDATE,
    )
    assert changes["target.values"] == (("i-0old",), ("pcs_login0001",), How.UPDATE)
    # EventBridge takes at most 8,192 characters of Input (TargetInput in botocore's model).
    assert len(changes["target.input"][1]) <= 8192
    assert json.loads(pattern(params.blocks))["detail-type"] == [
        "Capacity Block Expiration Warning",
        "Capacity Block Reservation Expiration Warning",
    ]
