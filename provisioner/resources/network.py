"""The VPC and its subnets, and the existing VPC and subnets a spec may name (used, never
changed)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from provisioner.drivers.aws_errors import NotFound
from provisioner.graph.ref import UNKNOWN, Ref
from provisioner.resources.base import (
    DataSource,
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
from provisioner.resources.tags import CREATED_TAG, RESOURCE_TAG, DesiredTags, Tags, tag_updates

#: Tags the VPC CNI and the AWS Load Balancer Controller put on what they make in the
#: cluster's VPC (never fmctl): swept before the subnet or VPC that holds it is deleted.
CNI_TAG = "cluster.k8s.amazonaws.com/name"
LB_TAG = "elbv2.k8s.aws/cluster"


@dataclass(frozen=True)
class VpcOut:
    """A VPC: its id and primary CIDR block."""

    id: str
    cidr: str


@dataclass(frozen=True)
class VpcParams:
    """A new VPC."""

    cidr: str
    tags: DesiredTags


@dataclass(frozen=True)
class VpcLive:
    """What fmctl manages of a VPC."""

    cidr: str
    dns_support: bool
    dns_hostnames: bool
    tags: Tags


def _apply_tags(ctx: Context, aws_id: str, changes: Sequence[FieldChange]) -> None:
    for change in changes:
        if change.path == "tags":
            retag(ctx, aws_id, *tag_updates(change.before, change.after))


class Vpc(Kind[VpcParams, VpcOut, VpcLive]):
    """The cluster's VPC, with DNS support and hostnames (FSx and EKS endpoints need both)."""

    name, params, outputs = "vpc", VpcParams, VpcOut
    policy = policies(
        cidr=Policy(
            How.REPLACE,
            "a VPC's primary CIDR block is fixed at creation (CreateVpc; only secondary "
            "blocks can be added)",
        ),
        dns_support=Policy(How.UPDATE, "ModifyVpcAttribute EnableDnsSupport"),
        dns_hostnames=Policy(How.UPDATE, "ModifyVpcAttribute EnableDnsHostnames"),
    )

    def read(self, req: Request[VpcParams]) -> Observed[VpcOut, VpcLive] | None:
        item = by_resource(owned_items(req.ctx, "describe_vpcs", "Vpcs", "State"), req.rid)
        if item is None:
            return None
        ec2 = req.ctx.aws.client("ec2")
        vpc_id = item["VpcId"]
        support = ec2.describe_vpc_attribute(VpcId=vpc_id, Attribute="enableDnsSupport")
        hostnames = ec2.describe_vpc_attribute(VpcId=vpc_id, Attribute="enableDnsHostnames")
        live = VpcLive(
            item["CidrBlock"],
            bool(support["EnableDnsSupport"]["Value"]),
            bool(hostnames["EnableDnsHostnames"]["Value"]),
            tags_of(item),
        )
        pending = None if item.get("State") in (None, "available") else str(item["State"])
        return Observed(VpcOut(vpc_id, item["CidrBlock"]), live, vpc_id, pending)

    def desired(self, req: Request[VpcParams], observed: Observed[VpcOut, VpcLive]) -> VpcLive:
        return VpcLive(
            req.params.cidr,
            True,
            True,
            req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
        )

    def create(self, req: Request[VpcParams]) -> VpcOut:
        once = req.ctx.aws.client("ec2", retries=False)

        def make() -> VpcOut:
            vpc = once.create_vpc(
                CidrBlock=req.params.cidr,
                TagSpecifications=req.ctx.tag_spec("vpc", req.params.tags),
            )["Vpc"]
            return VpcOut(vpc["VpcId"], vpc["CidrBlock"])

        def again() -> VpcOut | None:
            req.ctx.forget("ec2:describe_vpcs")
            found = self.read(req)
            return found.outputs if found else None

        out = create_or_adopt(req.ctx, req.rid, make, again)
        self._dns(req.ctx, out.id)
        return out

    def _dns(self, ctx: Context, vpc_id: str) -> None:
        ec2 = ctx.aws.client("ec2")
        # One attribute per call (ModifyVpcAttribute takes one at a time).
        ec2.modify_vpc_attribute(VpcId=vpc_id, EnableDnsSupport={"Value": True})
        ec2.modify_vpc_attribute(VpcId=vpc_id, EnableDnsHostnames={"Value": True})

    def update(
        self,
        req: Request[VpcParams],
        observed: Observed[VpcOut, VpcLive],
        changes: Sequence[FieldChange],
    ) -> VpcOut:
        if any(c.path.startswith("dns_") for c in changes):
            self._dns(req.ctx, observed.id)
        _apply_tags(req.ctx, observed.id, changes)
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        return [
            self.owned_item(tags_of(i).get(RESOURCE_TAG) or "?", i["VpcId"])
            for i in owned_items(ctx, "describe_vpcs", "Vpcs", "State")
        ]

    def delete(self, ctx: Context, owned: Owned) -> None:
        ec2 = ctx.aws.client("ec2")
        _sweep_lb_groups(ctx, owned.id)
        retry_dependency(lambda: ec2.delete_vpc(VpcId=owned.id), owned.id, ctx)


def _sweep_lb_groups(ctx: Context, vpc_id: str) -> None:
    """Security groups the load balancer controller left in the VPC, tagged with this
    cluster's name (their load balancers went with the in-cluster cleanup)."""
    ec2 = ctx.aws.client("ec2")
    groups = ec2.describe_security_groups(
        Filters=[
            {"Name": f"tag:{LB_TAG}", "Values": [ctx.cluster]},
            {"Name": "vpc-id", "Values": [vpc_id]},
        ]
    )["SecurityGroups"]
    for group in groups:
        if tags_of(group).get(LB_TAG) == ctx.cluster and group.get("VpcId") == vpc_id:
            ctx.emit(
                "vpc", "deleting", f"{group['GroupId']} (left by the load balancer controller)"
            )
            gid = group["GroupId"]
            retry_dependency(functools.partial(ec2.delete_security_group, GroupId=gid), gid, ctx)


def sweep_cni_interfaces(ctx: Context, kind: str, where: str, ident: str) -> None:
    """Network interfaces the VPC CNI left (tagged with this cluster's name), detached once
    their nodes are gone, in the subnet or using the security group ``ident`` (``where``:
    "subnet-id" or "group-id"). An existing VPC's subnets are not fmctl's to delete, so its
    node groups' leftovers are swept by group too, or the group could never go."""
    ec2 = ctx.aws.client("ec2")
    enis = ec2.describe_network_interfaces(
        Filters=[
            {"Name": f"tag:{CNI_TAG}", "Values": [ctx.cluster]},
            {"Name": where, "Values": [ident]},
        ]
    )["NetworkInterfaces"]
    for eni in enis:
        mine = tags_of(eni, "TagSet").get(CNI_TAG) == ctx.cluster
        here = (
            eni.get("SubnetId") == ident
            if where == "subnet-id"
            else ident in {g["GroupId"] for g in eni.get("Groups", [])}
        )
        if mine and here:
            eid = eni["NetworkInterfaceId"]
            deleted: list[str] = []

            def delete(eid: str = eid, deleted: list[str] = deleted) -> None:
                ec2.delete_network_interface(NetworkInterfaceId=eid)
                deleted.append(eid)

            retry_dependency(delete, eid, ctx)
            # The subnet's sweep and its group's may meet the same interface: one deletes
            # it, the other finds it gone and says nothing.
            if deleted:
                ctx.emit(kind, "deleted", f"{eid} (left by the VPC CNI)")


@dataclass(frozen=True)
class ExistingVpcParams:
    """A VPC the spec names."""

    vpc_id: str


class ExistingVpc(DataSource[ExistingVpcParams, VpcOut]):
    """A VPC the spec names: looked up, never modified, never deleted."""

    name, params, outputs = "existing-vpc", ExistingVpcParams, VpcOut

    def look_up(self, req: Request[ExistingVpcParams]) -> tuple[VpcOut, str] | None:
        try:
            vpcs = req.ctx.aws.client("ec2").describe_vpcs(VpcIds=[req.params.vpc_id])["Vpcs"]
        except NotFound:
            return None
        if not vpcs:
            return None
        return VpcOut(vpcs[0]["VpcId"], vpcs[0]["CidrBlock"]), req.params.vpc_id

    def missing(self, req: Request[ExistingVpcParams]) -> Exception:
        return ResourceError(
            f"VPC {req.params.vpc_id} (network.vpcId) does not exist in this region",
            hint="check the id and the region, or leave vpcId out for a new VPC",
        )


@dataclass(frozen=True)
class SubnetOut:
    """A subnet: its id and availability zone."""

    id: str
    az: str


@dataclass(frozen=True)
class SubnetParams:
    """A subnet of the cluster's VPC: in ``az``, or (``avoid_az``) in any other AZ."""

    vpc: Ref[VpcOut]
    cidr: str
    tags: DesiredTags
    az: str | None = None
    avoid_az: str | None = None
    public: bool = False


@dataclass(frozen=True)
class SubnetLive:
    """What fmctl manages of a subnet."""

    vpc: Any
    cidr: str
    az: Any
    public: bool
    tags: Tags


class Subnet(Kind[SubnetParams, SubnetOut, SubnetLive]):
    """A subnet of the cluster's VPC."""

    name, params, outputs = "subnet", SubnetParams, SubnetOut
    policy = policies(
        vpc=Policy(How.REPLACE, "a subnet's VPC is fixed at creation (CreateSubnet)"),
        cidr=Policy(How.REPLACE, "a subnet's CIDR block is fixed at creation (CreateSubnet)"),
        az=Policy(How.REPLACE, "a subnet's availability zone is fixed at creation (CreateSubnet)"),
        public=Policy(How.UPDATE, "ModifySubnetAttribute MapPublicIpOnLaunch"),
    )

    def _items(self, ctx: Context) -> list[dict[str, Any]]:
        return owned_items(ctx, "describe_subnets", "Subnets", "State")

    def read(self, req: Request[SubnetParams]) -> Observed[SubnetOut, SubnetLive] | None:
        item = by_resource(self._items(req.ctx), req.rid)
        if item is None:
            return None
        live = SubnetLive(
            item["VpcId"],
            item["CidrBlock"],
            item["AvailabilityZone"],
            bool(item.get("MapPublicIpOnLaunch")),
            tags_of(item),
        )
        out = SubnetOut(item["SubnetId"], item["AvailabilityZone"])
        return Observed(out, live, item["SubnetId"])

    def desired(
        self, req: Request[SubnetParams], observed: Observed[SubnetOut, SubnetLive]
    ) -> SubnetLive:
        az: Any = req.params.az
        if az is None:  # any zone but the nodes' (EKS control planes need two)
            az = observed.live.az if observed.live.az != req.params.avoid_az else UNKNOWN
        return SubnetLive(
            req.ctx.resolve(req.params.vpc),
            req.params.cidr,
            az,
            req.params.public,
            req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
        )

    def create(self, req: Request[SubnetParams]) -> SubnetOut:
        az = req.params.az or _other_az(req.ctx, req.params.avoid_az or "")
        once = req.ctx.aws.client("ec2", retries=False)

        def make() -> SubnetOut:
            subnet = once.create_subnet(
                VpcId=req.ctx.get(req.params.vpc).id,
                CidrBlock=req.params.cidr,
                AvailabilityZone=az,
                TagSpecifications=req.ctx.tag_spec("subnet", req.params.tags),
            )["Subnet"]
            return SubnetOut(subnet["SubnetId"], az)

        def again() -> SubnetOut | None:
            req.ctx.forget("ec2:describe_subnets")
            found = self.read(req)
            return found.outputs if found else None

        out = create_or_adopt(req.ctx, req.rid, make, again)
        if req.params.public:
            self._public(req.ctx, out.id)
        return out

    def _public(self, ctx: Context, subnet_id: str) -> None:
        ctx.aws.client("ec2").modify_subnet_attribute(
            SubnetId=subnet_id, MapPublicIpOnLaunch={"Value": True}
        )

    def update(
        self,
        req: Request[SubnetParams],
        observed: Observed[SubnetOut, SubnetLive],
        changes: Sequence[FieldChange],
    ) -> SubnetOut:
        if any(c.path == "public" for c in changes):
            req.ctx.aws.client("ec2").modify_subnet_attribute(
                SubnetId=observed.id, MapPublicIpOnLaunch={"Value": req.params.public}
            )
        _apply_tags(req.ctx, observed.id, changes)
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        return [
            self.owned_item(tags_of(i).get(RESOURCE_TAG) or "?", i["SubnetId"])
            for i in self._items(ctx)
        ]

    def delete(self, ctx: Context, owned: Owned) -> None:
        ec2 = ctx.aws.client("ec2")
        sweep_cni_interfaces(ctx, "subnet", "subnet-id", owned.id)
        retry_dependency(lambda: ec2.delete_subnet(SubnetId=owned.id), owned.id, ctx)


def _other_az(ctx: Context, avoid: str) -> str:
    """Another AZ of the region (EKS control planes want subnets in two)."""
    zones = ctx.aws.client("ec2").describe_availability_zones(
        Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}]
    )["AvailabilityZones"]
    names = sorted(str(z["ZoneName"]) for z in zones if z["ZoneName"] != avoid)
    if not names:
        raise ResourceError(f"{ctx.region} has no availability zone besides {avoid}")
    return names[0]


@dataclass(frozen=True)
class ExistingSubnetParams:
    """A subnet the spec names."""

    vpc: Ref[VpcOut]
    subnet_id: str


class ExistingSubnet(DataSource[ExistingSubnetParams, SubnetOut]):
    """A subnet the spec names: looked up, never modified, never deleted."""

    name, params, outputs = "existing-subnet", ExistingSubnetParams, SubnetOut

    def look_up(self, req: Request[ExistingSubnetParams]) -> tuple[SubnetOut, str] | None:
        try:
            subnets = req.ctx.aws.client("ec2").describe_subnets(SubnetIds=[req.params.subnet_id])[
                "Subnets"
            ]
        except NotFound:
            return None
        if not subnets:
            return None
        return SubnetOut(
            subnets[0]["SubnetId"], subnets[0]["AvailabilityZone"]
        ), req.params.subnet_id

    def missing(self, req: Request[ExistingSubnetParams]) -> Exception:
        return ResourceError(
            f"subnet {req.params.subnet_id} ({req.rid}) does not exist in this region",
            hint="check network.subnetId (and the other subnet ids) and the region",
        )
