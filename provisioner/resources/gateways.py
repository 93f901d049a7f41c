"""The ways out of the VPC: internet gateway, the NAT gateway and its address, route tables,
and the S3 gateway endpoint."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from provisioner.drivers.aws_errors import NotFound
from provisioner.graph.ref import Ref
from provisioner.resources.base import (
    FieldChange,
    How,
    Kind,
    Observed,
    Owned,
    Policy,
    Request,
    policies,
)
from provisioner.resources.context import Context
from provisioner.resources.ec2 import (
    by_resource,
    create_or_adopt,
    owned_items,
    retag,
    retry_dependency,
    tags_of,
)
from provisioner.resources.errors import ResourceError
from provisioner.resources.network import SubnetOut, VpcOut
from provisioner.resources.tags import CREATED_TAG, RESOURCE_TAG, DesiredTags, Tags, tag_updates


def _tagged(ctx: Context, aws_id: str, changes: Sequence[FieldChange]) -> None:
    for change in changes:
        if change.path == "tags":
            retag(ctx, aws_id, *tag_updates(change.before, change.after))


def _found(kind: Kind[Any, Any, Any], items: list[dict[str, Any]], key: str) -> list[Owned]:
    return [kind.owned_item(tags_of(i).get(RESOURCE_TAG) or "?", i[key]) for i in items]


def _born(live_tags: Tags) -> str | None:
    return live_tags.get(CREATED_TAG)


@dataclass(frozen=True)
class IgwOut:
    """An internet gateway by id."""

    id: str


@dataclass(frozen=True)
class EipOut:
    """An Elastic IP by allocation id."""

    id: str


@dataclass(frozen=True)
class NatOut:
    """A NAT gateway by id."""

    id: str


@dataclass(frozen=True)
class IgwParams:
    """The VPC's internet gateway."""

    vpc: Ref[VpcOut]
    tags: DesiredTags


@dataclass(frozen=True)
class IgwLive:
    """The VPC it is attached to (None: detached)."""

    vpc: Any
    tags: Tags


class InternetGateway(Kind[IgwParams, IgwOut, IgwLive]):
    """The VPC's internet gateway."""

    name, params, outputs = "igw", IgwParams, IgwOut
    policy = policies(vpc=Policy(How.UPDATE, "AttachInternetGateway / DetachInternetGateway"))

    def _items(self, ctx: Context) -> list[dict[str, Any]]:
        return owned_items(ctx, "describe_internet_gateways", "InternetGateways")

    def read(self, req: Request[IgwParams]) -> Observed[IgwOut, IgwLive] | None:
        item = by_resource(self._items(req.ctx), req.rid)
        if item is None:
            return None
        attached = [a["VpcId"] for a in item.get("Attachments", []) if a.get("VpcId")]
        live = IgwLive(attached[0] if attached else None, tags_of(item))
        gid = item["InternetGatewayId"]
        return Observed(IgwOut(gid), live, gid)

    def desired(self, req: Request[IgwParams], observed: Observed[IgwOut, IgwLive]) -> IgwLive:
        return IgwLive(
            req.ctx.resolve(req.params.vpc), req.params.tags.resolve(_born(observed.live.tags))
        )

    def create(self, req: Request[IgwParams]) -> IgwOut:
        once = req.ctx.aws.client("ec2", retries=False)

        def make() -> IgwOut:
            igw = once.create_internet_gateway(
                TagSpecifications=req.ctx.tag_spec("internet-gateway", req.params.tags)
            )["InternetGateway"]
            return IgwOut(igw["InternetGatewayId"])

        def again() -> IgwOut | None:
            req.ctx.forget("ec2:describe_internet_gateways")
            found = self.read(req)
            return found.outputs if found else None

        out = create_or_adopt(req.ctx, req.rid, make, again)
        self._attach(req.ctx, out.id, req.ctx.get(req.params.vpc).id)
        return out

    def _attach(self, ctx: Context, gid: str, vpc_id: str) -> None:
        ctx.aws.client("ec2").attach_internet_gateway(InternetGatewayId=gid, VpcId=vpc_id)

    def update(
        self,
        req: Request[IgwParams],
        observed: Observed[IgwOut, IgwLive],
        changes: Sequence[FieldChange],
    ) -> IgwOut:
        if any(c.path == "vpc" for c in changes):
            ec2 = req.ctx.aws.client("ec2")
            if observed.live.vpc:
                ec2.detach_internet_gateway(InternetGatewayId=observed.id, VpcId=observed.live.vpc)
            self._attach(req.ctx, observed.id, req.ctx.get(req.params.vpc).id)
        _tagged(req.ctx, observed.id, changes)
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        return _found(self, self._items(ctx), "InternetGatewayId")

    def delete(self, ctx: Context, owned: Owned) -> None:
        ec2 = ctx.aws.client("ec2")
        try:
            items = ec2.describe_internet_gateways(InternetGatewayIds=[owned.id])[
                "InternetGateways"
            ]
        except NotFound:
            items = []
        for attachment in items[0].get("Attachments", []) if items else []:
            detach = functools.partial(
                ec2.detach_internet_gateway, InternetGatewayId=owned.id, VpcId=attachment["VpcId"]
            )
            retry_dependency(detach, owned.id, ctx)
        retry_dependency(
            lambda: ec2.delete_internet_gateway(InternetGatewayId=owned.id), owned.id, ctx
        )


@dataclass(frozen=True)
class EipParams:
    """An Elastic IP for the NAT gateway."""

    tags: DesiredTags


@dataclass(frozen=True)
class EipLive:
    """What fmctl manages of an address."""

    tags: Tags


class ElasticIp(Kind[EipParams, EipOut, EipLive]):
    """The NAT gateway's address."""

    name, params, outputs = "eip", EipParams, EipOut

    def _items(self, ctx: Context) -> list[dict[str, Any]]:
        return owned_items(ctx, "describe_addresses", "Addresses")

    def read(self, req: Request[EipParams]) -> Observed[EipOut, EipLive] | None:
        item = by_resource(self._items(req.ctx), req.rid)
        if item is None:
            return None
        return Observed(EipOut(item["AllocationId"]), EipLive(tags_of(item)), item["AllocationId"])

    def desired(self, req: Request[EipParams], observed: Observed[EipOut, EipLive]) -> EipLive:
        return EipLive(req.params.tags.resolve(_born(observed.live.tags)))

    def create(self, req: Request[EipParams]) -> EipOut:
        once = req.ctx.aws.client("ec2", retries=False)

        def make() -> EipOut:
            address = once.allocate_address(
                Domain="vpc", TagSpecifications=req.ctx.tag_spec("elastic-ip", req.params.tags)
            )
            return EipOut(address["AllocationId"])

        def again() -> EipOut | None:
            req.ctx.forget("ec2:describe_addresses")
            found = self.read(req)
            return found.outputs if found else None

        return create_or_adopt(req.ctx, req.rid, make, again)

    def update(
        self,
        req: Request[EipParams],
        observed: Observed[EipOut, EipLive],
        changes: Sequence[FieldChange],
    ) -> EipOut:
        _tagged(req.ctx, observed.id, changes)
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        return _found(self, self._items(ctx), "AllocationId")

    def delete(self, ctx: Context, owned: Owned) -> None:
        ec2 = ctx.aws.client("ec2")
        retry_dependency(lambda: ec2.release_address(AllocationId=owned.id), owned.id, ctx)


@dataclass(frozen=True)
class NatParams:
    """The NAT gateway: outbound internet for the private subnet (package installs, image
    pulls). ``igw``: it only routes once the VPC's internet gateway is attached."""

    subnet: Ref[SubnetOut]
    eip: Ref[EipOut]
    igw: Ref[IgwOut]
    tags: DesiredTags


@dataclass(frozen=True)
class NatLive:
    """What fmctl manages of a NAT gateway."""

    subnet: Any
    eip: Any
    tags: Tags


class NatGateway(Kind[NatParams, NatOut, NatLive]):
    """Outbound internet for the private subnet."""

    name, params, outputs = "natgw", NatParams, NatOut
    create_seconds, delete_seconds = 120.0, 60.0
    policy = policies(
        subnet=Policy(How.REPLACE, "a NAT gateway's subnet is fixed (CreateNatGateway)"),
        eip=Policy(How.REPLACE, "a NAT gateway's address is fixed (CreateNatGateway)"),
    )

    def _items(self, ctx: Context) -> list[dict[str, Any]]:
        return owned_items(ctx, "describe_nat_gateways", "NatGateways", "State")

    def read(self, req: Request[NatParams]) -> Observed[NatOut, NatLive] | None:
        item = by_resource(self._items(req.ctx), req.rid)
        if item is None:
            return None
        addresses = [a.get("AllocationId") for a in item.get("NatGatewayAddresses", [])]
        live = NatLive(item.get("SubnetId"), addresses[0] if addresses else None, tags_of(item))
        nid = item["NatGatewayId"]
        pending = None if item["State"] == "available" else str(item["State"])
        return Observed(NatOut(nid), live, nid, pending)

    def desired(self, req: Request[NatParams], observed: Observed[NatOut, NatLive]) -> NatLive:
        return NatLive(
            req.ctx.resolve(req.params.subnet),
            req.ctx.resolve(req.params.eip),
            req.params.tags.resolve(_born(observed.live.tags)),
        )

    def create(self, req: Request[NatParams]) -> NatOut:
        nat = req.ctx.aws.client("ec2").create_nat_gateway(
            SubnetId=req.ctx.get(req.params.subnet).id,
            AllocationId=req.ctx.get(req.params.eip).id,
            ClientToken=req.ctx.token(req.rid),
            TagSpecifications=req.ctx.tag_spec("natgateway", req.params.tags),
        )["NatGateway"]
        return self._available(req.ctx, req.rid, nat["NatGatewayId"])

    def wait(self, req: Request[NatParams], observed: Observed[NatOut, NatLive]) -> NatOut:
        return self._available(req.ctx, req.rid, observed.id)

    def _available(self, ctx: Context, rid: str, nat_id: str) -> NatOut:
        ec2 = ctx.aws.client("ec2")

        def probe() -> NatOut | None:
            nat = ec2.describe_nat_gateways(NatGatewayIds=[nat_id])["NatGateways"][0]
            if nat["State"] == "failed":
                raise ResourceError(
                    f"NAT gateway {nat_id} failed: {nat.get('FailureMessage', '')}",
                    hint="`fmctl down` and `fmctl up` again; check the Elastic IP quota",
                )
            return NatOut(nat_id) if nat["State"] == "available" else None

        return ctx.wait_until(
            f"NAT gateway {nat_id} to be available", probe, self.create_seconds, 900, rid
        )

    def update(
        self,
        req: Request[NatParams],
        observed: Observed[NatOut, NatLive],
        changes: Sequence[FieldChange],
    ) -> NatOut:
        _tagged(req.ctx, observed.id, changes)
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        return _found(self, self._items(ctx), "NatGatewayId")

    def delete(self, ctx: Context, owned: Owned) -> None:
        ec2 = ctx.aws.client("ec2")
        retry_dependency(lambda: ec2.delete_nat_gateway(NatGatewayId=owned.id), owned.id, ctx)

        def gone() -> bool | None:
            nats = ec2.describe_nat_gateways(NatGatewayIds=[owned.id])["NatGateways"]
            return True if not nats or nats[0]["State"] == "deleted" else None

        ctx.wait_until(
            f"NAT gateway {owned.id} to be deleted", gone, self.delete_seconds, 900, owned.resource
        )
