"""The S3 gateway endpoint's and the NAT gateway's address's read and diff, and the endpoint's
create and delete, against EC2's recorded answers: read finds the cluster's own by its tags;
diff tells a new route table (in place) from a new VPC (replaced); the create's client token
is the same on every try, so a lost answer returns the endpoint AWS made; the bulk delete says
what it could not delete, and an endpoint already gone is deleted."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.graph.ref import Ref
from provisioner.resources.base import How, Owned, Request
from provisioner.resources.context import Context
from provisioner.resources.errors import ResourceError
from provisioner.resources.gateways import EipOut, EipParams, ElasticIp
from provisioner.resources.network import VpcOut
from provisioner.resources.routes import EndpointOut, EndpointParams, RouteTableOut, S3Endpoint
from tests.resources.contract import covers
from tests.resources.recorded import RecordedAws, example, tags
from tests.resources.test_lifecycle_verbs import CLUSTER, _ctx, _spec, _tags

VPC, TABLE, OTHER_TABLE, ENDPOINT = "vpc-a01106c2", "rtb-22574640", "rtb-0f4d1e2b", "vpce-032a826a"


def _endpoint(tables: list[str], cluster: str = CLUSTER, vpc: str = VPC) -> dict[str, Any]:
    """A gateway endpoint as DescribeVpcEndpoints shows it."""
    return {
        "VpcEndpointId": ENDPOINT,
        "VpcEndpointType": "Gateway",
        "VpcId": vpc,
        "ServiceName": "com.amazonaws.us-east-1.s3",
        "State": "available",
        "RouteTableIds": tables,
        "Tags": tags(cluster, "s3-endpoint", team="ml"),
    }


def _wired(ctx: Context, vpc: str = VPC, tables: tuple[str, ...] = (TABLE,)) -> EndpointParams:
    """The endpoint's params, with the VPC and route tables it refers to made."""
    ctx.record("vpc", VpcOut(vpc, "10.0.0.0/16"))
    refs = []
    for n, table in enumerate(tables):
        ctx.record(f"route-table/{n}", RouteTableOut(table))
        refs.append(Ref(f"route-table/{n}", RouteTableOut))
    return EndpointParams(Ref("vpc", VpcOut), tuple(refs), _tags("s3-endpoint"))


@covers("s3-endpoint", "read", "diff")
def test_the_s3_endpoint_is_read_by_its_tags_and_a_new_table_joins_in_place() -> None:
    aws = RecordedAws()
    theirs = dict(_endpoint([TABLE], "other"), VpcEndpointId="vpce-1a2b3c4d")
    aws.answer("ec2", "DescribeVpcEndpoints", {"VpcEndpoints": [theirs, _endpoint([TABLE])]})
    ctx = _ctx(aws)
    req = Request(ctx, "s3-endpoint", _wired(ctx))
    observed = S3Endpoint().read(req)
    aws.done()
    assert observed is not None and observed.outputs == EndpointOut(ENDPOINT)
    assert observed.live.route_tables == frozenset({TABLE})
    assert S3Endpoint().diff(req, observed) == []
    grown = Request(ctx, "s3-endpoint", _wired(ctx, tables=(TABLE, OTHER_TABLE)))
    (change,) = S3Endpoint().diff(grown, observed)
    assert (change.path, change.before, change.after, change.how) == (
        "route_tables",
        frozenset(),
        frozenset({OTHER_TABLE}),
        How.UPDATE,
    )
    moved = Request(ctx, "s3-endpoint", _wired(ctx, vpc="vpc-0b1b2b3b"))
    assert {c.path: c.how for c in S3Endpoint().diff(moved, observed)} == {"vpc": How.REPLACE}


@covers("s3-endpoint", "create-adopts")
def test_the_s3_endpoints_create_carries_one_token_so_a_lost_answer_returns_the_same_one() -> None:
    """CreateVpcEndpoint takes a client token: botocore's retry after a lost answer, and a
    later run's create, carry the same one, and AWS answers with the endpoint it made."""
    tokens = []
    for _run in range(2):
        aws = RecordedAws()
        ctx = _ctx(aws)
        token = ctx.token("s3-endpoint")
        tokens.append(token)
        request = {
            "VpcEndpointType": "Gateway",
            "VpcId": VPC,
            "ServiceName": "com.amazonaws.us-east-1.s3",
            "RouteTableIds": [TABLE],
            "ClientToken": token,
            "TagSpecifications": _spec("vpc-endpoint", "s3-endpoint"),
        }
        answer = {"VpcEndpoint": _endpoint([TABLE]), "ClientToken": token}
        aws.answer("ec2", "CreateVpcEndpoint", answer, request)
        made = S3Endpoint().create(Request(ctx, "s3-endpoint", _wired(ctx)))
        assert made == EndpointOut(ENDPOINT)
        aws.done()
    assert tokens[0] == tokens[1] and tokens[0] != _ctx(RecordedAws()).token("s3-endpoint/b")


@covers("s3-endpoint", "delete")
def test_the_s3_endpoints_delete_reads_what_the_bulk_call_could_not_delete() -> None:
    owned = Owned("s3-endpoint", "s3-endpoint", ENDPOINT)
    aws = RecordedAws()
    aws.answer("ec2", "DeleteVpcEndpoints", {"Unsuccessful": []}, {"VpcEndpointIds": [ENDPOINT]})
    S3Endpoint().delete(_ctx(aws), owned)
    gone = {"Error": {"Code": "InvalidVpcEndpointId.NotFound", "Message": "does not exist"}}
    aws.answer("ec2", "DeleteVpcEndpoints", {"Unsuccessful": [dict(gone, ResourceId=ENDPOINT)]})
    S3Endpoint().delete(_ctx(aws), owned)
    refused = {"Error": {"Code": "InvalidVpcEndpoint.State", "Message": "pending"}}
    aws.answer("ec2", "DeleteVpcEndpoints", {"Unsuccessful": [dict(refused, ResourceId=ENDPOINT)]})
    with pytest.raises(ResourceError, match=r"InvalidVpcEndpoint\.State"):
        S3Endpoint().delete(_ctx(aws), owned)
    aws.done()


@covers("eip", "read", "diff")
def test_the_nat_address_is_read_by_its_tags_and_a_dropped_tag_goes_in_place() -> None:
    address = example("ec2", "DescribeAddresses")["Addresses"][1]
    ours = dict(address, Tags=[*tags(CLUSTER, "eip/nat", team="ml")])
    theirs = dict(address, AllocationId="eipalloc-87654321", Tags=tags("other", "eip/nat"))
    aws = RecordedAws()
    aws.answer("ec2", "DescribeAddresses", {"Addresses": [theirs, ours]})
    req = Request(_ctx(aws), "eip/nat", EipParams(_tags("eip/nat")))
    observed = ElasticIp().read(req)
    aws.done()
    assert observed is not None and observed.outputs == EipOut(address["AllocationId"])
    assert ElasticIp().diff(req, observed) == []
    stale = dict(ours, Tags=[*ours["Tags"], {"Key": "fmctl.dev/old", "Value": "1"}])
    again = RecordedAws()
    again.answer("ec2", "DescribeAddresses", {"Addresses": [stale]})
    seen = ElasticIp().read(Request(_ctx(again), "eip/nat", req.params))
    assert seen is not None
    (change,) = ElasticIp().diff(req, seen)
    assert (change.path, change.how, change.after) == ("tags", How.UPDATE, {"fmctl.dev/old": None})
