"""Each kind's create when AWS did the work and the answer was lost, and its delete, against
AWS's recorded answers (``recorded``): a lost answer ends with the one resource AWS made,
adopted by its tags or its client token, never a second; a delete removes what must go
first, waits out what still depends on it, and counts a resource already gone as deleted.
The stubber refuses any call a test did not queue, and checks each call's parameters where a
test gives them."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.graph.ref import Ref
from provisioner.resources.base import Owned, Request
from provisioner.resources.compute import Rule, SecurityGroup, SgOut, SgParams
from provisioner.resources.context import Context, Event
from provisioner.resources.errors import Foreign
from provisioner.resources.gateways import (
    EipOut,
    EipParams,
    ElasticIp,
    IgwOut,
    IgwParams,
    InternetGateway,
    NatGateway,
    NatOut,
    NatParams,
)
from provisioner.resources.network import (
    ExistingSubnet,
    ExistingSubnetParams,
    ExistingVpc,
    ExistingVpcParams,
    Subnet,
    SubnetOut,
    SubnetParams,
    Vpc,
    VpcOut,
    VpcParams,
)
from provisioner.resources.routes import RouteTable, RouteTableOut, RouteTableParams
from provisioner.resources.tags import CREATED_TAG, DesiredTags
from tests.resources.contract import covers
from tests.resources.recorded import RecordedAws, example, lose_answer, tags

CLUSTER = "llm"


class Stamp:
    """Equal to any creation stamp fmctl writes (``tags.stamp``: UTC, to the second)."""

    def __eq__(self, other: object) -> bool:
        import re

        return isinstance(other, str) and bool(
            re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", other)
        )

    def __repr__(self) -> str:
        return "<a creation stamp>"


def _ctx(aws: RecordedAws, events: list[Event] | None = None) -> Context:
    sink = events if events is not None else []
    return Context(
        aws=aws,  # type: ignore[arg-type]
        cluster=CLUSTER,
        region=aws.region,
        time_scale=0.001,  # the kinds' own waits between tries, shrunk
        on_event=sink.append,
    )


def _tags(rid: str) -> DesiredTags:
    return DesiredTags((("team", "ml"),), CLUSTER, rid)


def _spec(kind: str, rid: str) -> list[dict[str, Any]]:
    """The TagSpecifications a create sends: the spec's tags and fmctl's, stamped."""
    pairs: dict[str, Any] = dict(_tags(rid).at_creation())
    pairs[CREATED_TAG] = Stamp()
    return [
        {"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in sorted(pairs.items())]}
    ]


def _adopted(events: list[Event], rid: str) -> bool:
    return any(e.resource == rid and e.state == "adopted" for e in events)


@covers("vpc", "create-adopts")
def test_a_vpc_whose_create_answer_was_lost_is_found_by_its_tags_not_made_twice() -> None:
    aws, events = RecordedAws(), []
    made = example("ec2", "CreateVpc")["Vpc"]
    params = VpcParams("10.0.0.0/16", _tags("vpc"))
    lose_answer(
        aws,
        "ec2",
        "CreateVpc",
        {"Vpc": made},
        {"CidrBlock": "10.0.0.0/16", "TagSpecifications": _spec("vpc", "vpc")},
    )
    # The look before another try: AWS has the VPC, tagged as the create asked.
    found = {**made, "CidrBlock": "10.0.0.0/16", "State": "available"}
    found["Tags"] = tags(CLUSTER, "vpc", team="ml")
    aws.answer("ec2", "DescribeVpcs", {"Vpcs": [found]})
    for attribute in ("EnableDnsSupport", "EnableDnsHostnames"):
        aws.answer(
            "ec2",
            "DescribeVpcAttribute",
            {"VpcId": made["VpcId"], attribute: {"Value": attribute == "EnableDnsSupport"}},
        )
    for attribute in ("EnableDnsSupport", "EnableDnsHostnames"):
        aws.answer(
            "ec2", "ModifyVpcAttribute", {}, {"VpcId": made["VpcId"], attribute: {"Value": True}}
        )
    out = Vpc().create(Request(_ctx(aws, events), "vpc", params))
    aws.done()  # one CreateVpc: no second try once the VPC was found
    assert out == VpcOut(made["VpcId"], "10.0.0.0/16")
    assert _adopted(events, "vpc")


@covers("vpc", "delete")
def test_a_vpc_goes_after_the_load_balancer_controllers_groups_and_its_dependencies() -> None:
    aws = RecordedAws()
    vpc = "vpc-a01106c2"
    left = {
        "GroupId": "sg-0lb",
        "GroupName": "k8s-elb",
        "VpcId": vpc,
        "Tags": [{"Key": "elbv2.k8s.aws/cluster", "Value": CLUSTER}],
    }
    foreign = {
        **left,
        "GroupId": "sg-0other",
        "Tags": [{"Key": "elbv2.k8s.aws/cluster", "Value": "x"}],
    }
    aws.answer("ec2", "DescribeSecurityGroups", {"SecurityGroups": [left, foreign]})
    aws.answer("ec2", "DeleteSecurityGroup", {}, {"GroupId": "sg-0lb"})
    # An interface of a deleted NAT gateway lingers: AWS refuses until it is gone.
    aws.fail("ec2", "DeleteVpc", "DependencyViolation", expected={"VpcId": vpc})
    aws.answer("ec2", "DeleteVpc", {}, {"VpcId": vpc})
    Vpc().delete(_ctx(aws), Owned("vpc", "vpc", vpc))
    aws.done()  # the other cluster's group was left alone (no call for it)
    gone = RecordedAws()
    gone.answer("ec2", "DescribeSecurityGroups", {"SecurityGroups": []})
    gone.fail("ec2", "DeleteVpc", "InvalidVpcID.NotFound")
    Vpc().delete(_ctx(gone), Owned("vpc", "vpc", vpc))  # already gone: deleted
    gone.done()


@covers("subnet", "create-adopts")
def test_a_subnet_whose_create_answer_was_lost_is_adopted() -> None:
    aws, events = RecordedAws(), []
    made = example("ec2", "CreateSubnet")["Subnet"]
    ctx = _ctx(aws, events)
    ctx.record("vpc", VpcOut(made["VpcId"], "10.0.0.0/16"))
    params = SubnetParams(
        Ref("vpc", VpcOut), made["CidrBlock"], _tags("subnet/private"), az="us-west-2c"
    )
    request = {
        "VpcId": made["VpcId"],
        "CidrBlock": made["CidrBlock"],
        "AvailabilityZone": "us-west-2c",
        "TagSpecifications": _spec("subnet", "subnet/private"),
    }
    lose_answer(aws, "ec2", "CreateSubnet", {"Subnet": made}, request)
    found = {**made, "AvailabilityZone": "us-west-2c", "Tags": tags(CLUSTER, "subnet/private")}
    aws.answer("ec2", "DescribeSubnets", {"Subnets": [found]})
    out = Subnet().create(Request(ctx, "subnet/private", params))
    aws.done()
    assert out == SubnetOut(made["SubnetId"], "us-west-2c")
    assert _adopted(events, "subnet/private")


@covers("subnet", "delete")
def test_a_subnet_goes_after_the_interfaces_the_vpc_cni_left_in_it() -> None:
    aws = RecordedAws()
    subnet = "subnet-9d4a7b6c"
    eni = {
        "NetworkInterfaceId": "eni-0cni",
        "SubnetId": subnet,
        "TagSet": [{"Key": "cluster.k8s.amazonaws.com/name", "Value": CLUSTER}],
    }
    aws.answer("ec2", "DescribeNetworkInterfaces", {"NetworkInterfaces": [eni]})
    aws.answer("ec2", "DeleteNetworkInterface", {}, {"NetworkInterfaceId": "eni-0cni"})
    aws.answer("ec2", "DeleteSubnet", {}, {"SubnetId": subnet})
    Subnet().delete(_ctx(aws), Owned("subnet", "subnet/private", subnet))
    aws.done()


@covers("existing-vpc", "read")
@covers("existing-subnet", "read")
def test_a_vpc_and_subnet_the_spec_names_are_read_by_id_and_none_when_gone() -> None:
    aws = RecordedAws()
    vpc = example("ec2", "DescribeVpcs")["Vpcs"][0]
    aws.answer("ec2", "DescribeVpcs", {"Vpcs": [vpc]}, {"VpcIds": [vpc["VpcId"]]})
    seen = ExistingVpc().read(Request(_ctx(aws), "vpc", ExistingVpcParams(vpc["VpcId"])))
    assert seen is not None and seen.outputs == VpcOut(vpc["VpcId"], vpc["CidrBlock"])
    subnet = example("ec2", "DescribeSubnets")["Subnets"][0]
    aws.answer("ec2", "DescribeSubnets", {"Subnets": [subnet]}, {"SubnetIds": [subnet["SubnetId"]]})
    ctx = _ctx(aws)
    ctx.record("vpc", VpcOut(vpc["VpcId"], vpc["CidrBlock"]))
    params = ExistingSubnetParams(Ref("vpc", VpcOut), subnet["SubnetId"])
    read = ExistingSubnet().read(Request(ctx, "subnet/private", params))
    assert read is not None and read.outputs.id == subnet["SubnetId"]
    aws.fail("ec2", "DescribeVpcs", "InvalidVpcID.NotFound")
    assert ExistingVpc().read(Request(_ctx(aws), "vpc", ExistingVpcParams("vpc-0gone"))) is None
    aws.done()


@covers("igw", "create-adopts")
def test_an_internet_gateway_whose_create_answer_was_lost_is_adopted_then_attached() -> None:
    aws, events = RecordedAws(), []
    made = example("ec2", "CreateInternetGateway")["InternetGateway"]
    gid = made["InternetGatewayId"]
    ctx = _ctx(aws, events)
    ctx.record("vpc", VpcOut("vpc-a01106c2", "10.0.0.0/16"))
    spec = _spec("internet-gateway", "igw")
    lose_answer(
        aws, "ec2", "CreateInternetGateway", {"InternetGateway": made}, {"TagSpecifications": spec}
    )
    found = {**made, "Attachments": [], "Tags": tags(CLUSTER, "igw")}
    aws.answer("ec2", "DescribeInternetGateways", {"InternetGateways": [found]})
    aws.answer(
        "ec2", "AttachInternetGateway", {}, {"InternetGatewayId": gid, "VpcId": "vpc-a01106c2"}
    )
    out = InternetGateway().create(Request(ctx, "igw", IgwParams(Ref("vpc", VpcOut), _tags("igw"))))
    aws.done()
    assert out == IgwOut(gid) and _adopted(events, "igw")


@covers("igw", "delete")
def test_an_internet_gateway_is_detached_then_deleted_and_gone_is_deleted() -> None:
    aws = RecordedAws()
    gid = "igw-c0a643a9"
    attached = {
        "InternetGatewayId": gid,
        "Attachments": [{"VpcId": "vpc-a01106c2", "State": "available"}],
    }
    aws.answer(
        "ec2",
        "DescribeInternetGateways",
        {"InternetGateways": [attached]},
        {"InternetGatewayIds": [gid]},
    )
    # Public addresses still mapped in the VPC hold the detach back for a while.
    aws.fail("ec2", "DetachInternetGateway", "DependencyViolation")
    aws.answer(
        "ec2", "DetachInternetGateway", {}, {"InternetGatewayId": gid, "VpcId": "vpc-a01106c2"}
    )
    aws.answer("ec2", "DeleteInternetGateway", {}, {"InternetGatewayId": gid})
    InternetGateway().delete(_ctx(aws), Owned("igw", "igw", gid))
    aws.done()
    gone = RecordedAws()
    gone.fail("ec2", "DescribeInternetGateways", "InvalidInternetGatewayID.NotFound")
    gone.fail("ec2", "DeleteInternetGateway", "InvalidInternetGatewayID.NotFound")
    InternetGateway().delete(_ctx(gone), Owned("igw", "igw", gid))
    gone.done()


@covers("eip", "create-adopts", "delete")
def test_an_address_whose_allocation_answer_was_lost_is_adopted_and_released_on_delete() -> None:
    aws, events = RecordedAws(), []
    made = example("ec2", "AllocateAddress")
    request = {"Domain": "vpc", "TagSpecifications": _spec("elastic-ip", "eip/nat")}
    lose_answer(aws, "ec2", "AllocateAddress", made, request)
    found = {"AllocationId": made["AllocationId"], "PublicIp": made["PublicIp"], "Domain": "vpc"}
    found["Tags"] = tags(CLUSTER, "eip/nat")
    aws.answer("ec2", "DescribeAddresses", {"Addresses": [found]})
    out = ElasticIp().create(Request(_ctx(aws, events), "eip/nat", EipParams(_tags("eip/nat"))))
    assert out == EipOut(made["AllocationId"]) and _adopted(events, "eip/nat")
    # Released once the NAT gateway that held it lets go.
    aws.fail("ec2", "ReleaseAddress", "DependencyViolation")
    aws.answer("ec2", "ReleaseAddress", {}, {"AllocationId": made["AllocationId"]})
    ElasticIp().delete(_ctx(aws), Owned("eip", "eip/nat", made["AllocationId"]))
    aws.fail("ec2", "ReleaseAddress", "InvalidAllocationID.NotFound")
    ElasticIp().delete(_ctx(aws), Owned("eip", "eip/nat", made["AllocationId"]))
    aws.done()


@covers("natgw", "create-adopts", "delete")
def test_a_nat_gateway_create_carries_one_token_per_cluster_and_resource() -> None:
    """CreateNatGateway takes a client token: the create botocore retries after a lost
    answer, and a later run's, carry the same one, so AWS answers with the gateway it made
    instead of making another (EC2's idempotency, "Ensuring idempotency" in its API guide)."""
    made = example("ec2", "CreateNatGateway")["NatGateway"]
    nid = made["NatGatewayId"]
    tokens = []
    for _run in range(2):  # two runs (two contexts) of the same cluster
        aws = RecordedAws()
        ctx = _ctx(aws)
        ctx.record("subnet/public", SubnetOut(made["SubnetId"], "us-east-1a"))
        ctx.record("eip/nat", EipOut("eipalloc-37fc1a52"))
        ctx.record("igw", IgwOut("igw-c0a643a9"))
        token = ctx.token("natgw")
        tokens.append(token)
        request = {
            "SubnetId": made["SubnetId"],
            "AllocationId": "eipalloc-37fc1a52",
            "ClientToken": token,
            "TagSpecifications": _spec("natgateway", "natgw"),
        }
        aws.answer("ec2", "CreateNatGateway", {"NatGateway": made}, request)
        aws.answer("ec2", "DescribeNatGateways", {"NatGateways": [{**made, "State": "pending"}]})
        aws.answer("ec2", "DescribeNatGateways", {"NatGateways": [{**made, "State": "available"}]})
        params = NatParams(
            Ref("subnet/public", SubnetOut),
            Ref("eip/nat", EipOut),
            Ref("igw", IgwOut),
            _tags("natgw"),
        )
        assert NatGateway().create(Request(ctx, "natgw", params)) == NatOut(nid)
        aws.done()
    assert tokens[0] == tokens[1] and tokens[0] != _ctx(RecordedAws()).token("natgw/other")
    aws = RecordedAws()
    aws.answer("ec2", "DeleteNatGateway", {"NatGatewayId": nid}, {"NatGatewayId": nid})
    aws.answer("ec2", "DescribeNatGateways", {"NatGateways": [{**made, "State": "deleting"}]})
    aws.answer("ec2", "DescribeNatGateways", {"NatGateways": [{**made, "State": "deleted"}]})
    NatGateway().delete(_ctx(aws), Owned("natgw", "natgw", nid))
    aws.done()  # waited until AWS said deleted


def _efa_group(ingress: list[dict[str, Any]], cluster: str = CLUSTER) -> dict[str, Any]:
    return {
        "GroupId": "sg-903004f8",
        "GroupName": "llm-efa",
        "Description": "fmctl llm: efa",
        "VpcId": "vpc-a01106c2",
        "IpPermissions": ingress,
        "IpPermissionsEgress": [
            {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": "sg-903004f8"}]},
        ],
        "Tags": tags(cluster, "sg/efa"),
    }


def _efa_params() -> SgParams:
    return SgParams(
        Ref("vpc", VpcOut),
        "llm-efa",
        "fmctl llm: efa",
        ingress=(Rule("-1"),),
        egress=(Rule("-1"),),
        tags=_tags("sg/efa"),
    )


@covers("sg", "create-adopts")
def test_a_security_group_made_by_a_lost_create_is_adopted_by_its_name_and_tags() -> None:
    """CreateSecurityGroup takes no token but a name unique in the VPC: the try after a lost
    answer (botocore's retry, or the next run) is refused as a duplicate, and the group
    found is the cluster's: its rules are then made as asked."""
    aws = RecordedAws()
    ctx = _ctx(aws)
    ctx.record("vpc", VpcOut("vpc-a01106c2", "10.0.0.0/16"))
    request = {
        "GroupName": "llm-efa",
        "Description": "fmctl llm: efa",
        "VpcId": "vpc-a01106c2",
        "TagSpecifications": _spec("security-group", "sg/efa"),
    }
    aws.fail("ec2", "CreateSecurityGroup", "InvalidGroup.Duplicate", expected=request)
    made = _efa_group([])  # made by the lost try, before its rules
    aws.answer("ec2", "DescribeSecurityGroups", {"SecurityGroups": [made]})
    aws.answer(
        "ec2", "DescribeSecurityGroups", {"SecurityGroups": [made]}, {"GroupIds": ["sg-903004f8"]}
    )
    aws.answer(
        "ec2",
        "AuthorizeSecurityGroupIngress",
        {"Return": True},
        {
            "GroupId": "sg-903004f8",
            "IpPermissions": [
                {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": "sg-903004f8"}]}
            ],
        },
    )
    assert SecurityGroup().create(Request(ctx, "sg/efa", _efa_params())) == SgOut("sg-903004f8")
    aws.done()
    # The same name in the VPC, not the cluster's: refused, nothing changed.
    other = RecordedAws()
    ctx = _ctx(other)
    ctx.record("vpc", VpcOut("vpc-a01106c2", "10.0.0.0/16"))
    other.fail("ec2", "CreateSecurityGroup", "InvalidGroup.Duplicate")
    other.answer("ec2", "DescribeSecurityGroups", {"SecurityGroups": [_efa_group([], "another")]})
    with pytest.raises(Foreign, match="not fmctl cluster llm's"):
        SecurityGroup().create(Request(ctx, "sg/efa", _efa_params()))
    other.done()


@covers("sg", "delete")
def test_a_security_group_empties_its_rules_naming_other_groups_then_goes() -> None:
    aws = RecordedAws()
    rules = [
        {
            "IpProtocol": "tcp",
            "FromPort": 988,
            "ToPort": 988,
            "UserIdGroupPairs": [{"GroupId": "sg-0nodes"}],
        }
    ]
    group = _efa_group(rules)
    aws.answer(
        "ec2", "DescribeSecurityGroups", {"SecurityGroups": [group]}, {"GroupIds": ["sg-903004f8"]}
    )
    aws.answer("ec2", "DescribeNetworkInterfaces", {"NetworkInterfaces": []})
    aws.answer(
        "ec2",
        "RevokeSecurityGroupIngress",
        {"Return": True},
        {"GroupId": "sg-903004f8", "IpPermissions": [{**rules[0]}]},
    )
    aws.answer(
        "ec2",
        "RevokeSecurityGroupEgress",
        {"Return": True},
        {
            "GroupId": "sg-903004f8",
            "IpPermissions": [
                {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": "sg-903004f8"}]}
            ],
        },
    )
    aws.fail("ec2", "DeleteSecurityGroup", "DependencyViolation")
    aws.answer("ec2", "DeleteSecurityGroup", {}, {"GroupId": "sg-903004f8"})
    SecurityGroup().delete(_ctx(aws), Owned("sg", "sg/efa", "sg-903004f8"))
    aws.done()
    gone = RecordedAws()
    gone.fail("ec2", "DescribeSecurityGroups", "InvalidGroup.NotFound")
    SecurityGroup().delete(_ctx(gone), Owned("sg", "sg/efa", "sg-903004f8"))
    gone.done()


@covers("route-table", "create-adopts", "delete")
def test_a_route_table_made_by_a_lost_create_is_adopted_and_its_delete_lets_subnets_go() -> None:
    aws, events = RecordedAws(), []
    made = example("ec2", "CreateRouteTable")["RouteTable"]
    table = made["RouteTableId"]
    ctx = _ctx(aws, events)
    ctx.record("vpc", VpcOut(made["VpcId"], "10.0.0.0/16"))
    ctx.record("natgw", NatOut("nat-08d48af2a8e83edfd"))
    ctx.record("subnet/private", SubnetOut("subnet-9d4a7b6c", "us-east-1c"))
    spec = _spec("route-table", "route-table/private")
    lose_answer(
        aws,
        "ec2",
        "CreateRouteTable",
        {"RouteTable": made},
        {"VpcId": made["VpcId"], "TagSpecifications": spec},
    )
    found = {**made, "Associations": [], "Tags": tags(CLUSTER, "route-table/private")}
    aws.answer("ec2", "DescribeRouteTables", {"RouteTables": [found]})
    default = {"RouteTableId": table, "DestinationCidrBlock": "0.0.0.0/0"}
    aws.answer(
        "ec2", "CreateRoute", {"Return": True}, {**default, "NatGatewayId": "nat-08d48af2a8e83edfd"}
    )
    aws.answer(
        "ec2",
        "AssociateRouteTable",
        {"AssociationId": "rtbassoc-781d0d1a"},
        {"RouteTableId": table, "SubnetId": "subnet-9d4a7b6c"},
    )
    params = RouteTableParams(
        Ref("vpc", VpcOut),
        Ref("natgw", NatOut),
        (Ref("subnet/private", SubnetOut),),
        _tags("route-table/private"),
    )
    assert RouteTable().create(Request(ctx, "route-table/private", params)) == RouteTableOut(table)
    aws.done()
    assert _adopted(events, "route-table/private")
    # Delete: the subnets' associations go first (the main one is the VPC's), then the table.
    gone = RecordedAws()
    associations = [
        {"RouteTableAssociationId": "rtbassoc-main", "Main": True},
        {
            "RouteTableAssociationId": "rtbassoc-781d0d1a",
            "SubnetId": "subnet-9d4a7b6c",
            "Main": False,
        },
    ]
    gone.answer(
        "ec2",
        "DescribeRouteTables",
        {"RouteTables": [{**made, "Associations": associations}]},
        {"RouteTableIds": [table]},
    )
    gone.answer("ec2", "DisassociateRouteTable", {}, {"AssociationId": "rtbassoc-781d0d1a"})
    gone.fail("ec2", "DeleteRouteTable", "DependencyViolation")
    gone.answer("ec2", "DeleteRouteTable", {}, {"RouteTableId": table})
    RouteTable().delete(_ctx(gone), Owned("route-table", "route-table/private", table))
    gone.done()
