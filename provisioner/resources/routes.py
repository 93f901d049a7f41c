"""Route tables (a default route to the internet or NAT gateway, and their subnets) and the
S3 gateway endpoint."""

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
    retry_dependency,
    tags_of,
)
from provisioner.resources.errors import ResourceError
from provisioner.resources.gateways import IgwOut, NatOut, _born, _found, _tagged
from provisioner.resources.network import SubnetOut, VpcOut
from provisioner.resources.tags import DesiredTags, Tags


@dataclass(frozen=True)
class EndpointOut:
    """A VPC endpoint by id."""

    id: str


@dataclass(frozen=True)
class RouteTableOut:
    """A route table by id."""

    id: str


@dataclass(frozen=True)
class RouteTableParams:
    """A route table: a default route to ``target`` (internet or NAT gateway), associated
    with ``subnets``."""

    vpc: Ref[VpcOut]
    target: Ref[IgwOut] | Ref[NatOut]
    subnets: tuple[Ref[SubnetOut], ...]
    tags: DesiredTags


@dataclass(frozen=True)
class RouteTableLive:
    """What fmctl manages of a route table."""

    vpc: Any
    default_route: Any
    subnets: Any
    tags: Tags


class RouteTable(Kind[RouteTableParams, RouteTableOut, RouteTableLive]):
    """A route table with a default route and its subnets."""

    name, params, outputs = "route-table", RouteTableParams, RouteTableOut
    policy = policies(
        vpc=Policy(How.REPLACE, "a route table's VPC is fixed (CreateRouteTable)"),
        default_route=Policy(How.UPDATE, "CreateRoute / ReplaceRoute 0.0.0.0/0"),
        subnets=Policy(How.UPDATE, "AssociateRouteTable / DisassociateRouteTable"),
    )

    def _items(self, ctx: Context) -> list[dict[str, Any]]:
        return owned_items(ctx, "describe_route_tables", "RouteTables")

    def read(
        self, req: Request[RouteTableParams]
    ) -> Observed[RouteTableOut, RouteTableLive] | None:
        item = by_resource(self._items(req.ctx), req.rid)
        if item is None:
            return None
        default = next(
            (
                r.get("GatewayId") or r.get("NatGatewayId")
                for r in item.get("Routes", [])
                if r.get("DestinationCidrBlock") == "0.0.0.0/0"
            ),
            None,
        )
        subnets = frozenset(
            a["SubnetId"] for a in item.get("Associations", []) if a.get("SubnetId")
        )
        live = RouteTableLive(item["VpcId"], default, subnets, tags_of(item))
        tid = item["RouteTableId"]
        return Observed(RouteTableOut(tid), live, tid)

    def desired(
        self, req: Request[RouteTableParams], observed: Observed[RouteTableOut, RouteTableLive]
    ) -> RouteTableLive:
        return RouteTableLive(
            req.ctx.resolve(req.params.vpc),
            req.ctx.resolve(req.params.target),
            frozenset(req.ctx.resolve(s) for s in req.params.subnets),
            req.params.tags.resolve(_born(observed.live.tags)),
        )

    def create(self, req: Request[RouteTableParams]) -> RouteTableOut:
        once = req.ctx.aws.client("ec2", retries=False)

        def make() -> RouteTableOut:
            table = once.create_route_table(
                VpcId=req.ctx.get(req.params.vpc).id,
                TagSpecifications=req.ctx.tag_spec("route-table", req.params.tags),
            )["RouteTable"]
            return RouteTableOut(table["RouteTableId"])

        def again() -> RouteTableOut | None:
            req.ctx.forget("ec2:describe_route_tables")
            found = self.read(req)
            return found.outputs if found else None

        out = create_or_adopt(req.ctx, req.rid, make, again)
        self._route(req.ctx, out.id, self._target(req.ctx, req.params), replace=False)
        for subnet in req.params.subnets:
            self._associate(req.ctx, out.id, req.ctx.get(subnet).id)
        return out

    @staticmethod
    def _target(ctx: Context, params: RouteTableParams) -> str:
        target: Ref[Any] = params.target
        return str(ctx.get(target).id)

    def _route(self, ctx: Context, table_id: str, target: str, replace: bool) -> None:
        ec2 = ctx.aws.client("ec2")
        call = ec2.replace_route if replace else ec2.create_route
        if target.startswith("nat-"):
            call(RouteTableId=table_id, DestinationCidrBlock="0.0.0.0/0", NatGatewayId=target)
        else:
            call(RouteTableId=table_id, DestinationCidrBlock="0.0.0.0/0", GatewayId=target)

    def _associate(self, ctx: Context, table_id: str, subnet_id: str) -> None:
        ctx.aws.client("ec2").associate_route_table(RouteTableId=table_id, SubnetId=subnet_id)

    def update(
        self,
        req: Request[RouteTableParams],
        observed: Observed[RouteTableOut, RouteTableLive],
        changes: Sequence[FieldChange],
    ) -> RouteTableOut:
        paths = {c.path for c in changes}
        if "default_route" in paths:
            target = self._target(req.ctx, req.params)
            self._route(
                req.ctx, observed.id, target, replace=observed.live.default_route is not None
            )
        if "subnets" in paths:
            want = {req.ctx.get(s).id for s in req.params.subnets}
            for subnet in sorted(want - observed.live.subnets):
                self._associate(req.ctx, observed.id, subnet)
            self._disassociate(req.ctx, observed.id, observed.live.subnets - want)
        _tagged(req.ctx, observed.id, changes)
        return observed.outputs

    def _disassociate(self, ctx: Context, table_id: str, subnets: set[str] | None) -> None:
        """Remove associations (of ``subnets``, or all but the main one for None)."""
        ec2 = ctx.aws.client("ec2")
        try:
            tables = ec2.describe_route_tables(RouteTableIds=[table_id])["RouteTables"]
        except NotFound:
            return
        for association in tables[0].get("Associations", []) if tables else []:
            if association.get("Main"):
                continue
            if subnets is not None and association.get("SubnetId") not in subnets:
                continue
            retry_dependency(
                functools.partial(
                    ec2.disassociate_route_table,
                    AssociationId=association["RouteTableAssociationId"],
                ),
                table_id,
                ctx,
            )

    def find_owned(self, ctx: Context) -> list[Owned]:
        return _found(self, self._items(ctx), "RouteTableId")

    def delete(self, ctx: Context, owned: Owned) -> None:
        ec2 = ctx.aws.client("ec2")
        self._disassociate(ctx, owned.id, None)
        retry_dependency(lambda: ec2.delete_route_table(RouteTableId=owned.id), owned.id, ctx)


@dataclass(frozen=True)
class EndpointParams:
    """The S3 gateway endpoint: data and artifacts reach S3 without the NAT gateway's
    per-GB charge."""

    vpc: Ref[VpcOut]
    route_tables: tuple[Ref[RouteTableOut], ...]
    tags: DesiredTags


@dataclass(frozen=True)
class EndpointLive:
    """What fmctl manages of a gateway endpoint."""

    vpc: Any
    service: str
    route_tables: Any
    tags: Tags


class S3Endpoint(Kind[EndpointParams, EndpointOut, EndpointLive]):
    """The S3 gateway endpoint of the cluster's VPC."""

    name, params, outputs = "s3-endpoint", EndpointParams, EndpointOut
    policy = policies(
        vpc=Policy(How.REPLACE, "an endpoint's VPC is fixed (CreateVpcEndpoint)"),
        service=Policy(How.REPLACE, "an endpoint's service is fixed (CreateVpcEndpoint)"),
        route_tables=Policy(How.UPDATE, "ModifyVpcEndpoint Add/RemoveRouteTableIds"),
    )

    def _items(self, ctx: Context) -> list[dict[str, Any]]:
        return owned_items(ctx, "describe_vpc_endpoints", "VpcEndpoints", "State")

    def read(self, req: Request[EndpointParams]) -> Observed[EndpointOut, EndpointLive] | None:
        item = by_resource(self._items(req.ctx), req.rid)
        if item is None:
            return None
        live = EndpointLive(
            item["VpcId"],
            item["ServiceName"],
            frozenset(item.get("RouteTableIds", [])),
            tags_of(item),
        )
        eid = item["VpcEndpointId"]
        return Observed(EndpointOut(eid), live, eid)

    def desired(
        self, req: Request[EndpointParams], observed: Observed[EndpointOut, EndpointLive]
    ) -> EndpointLive:
        return EndpointLive(
            req.ctx.resolve(req.params.vpc),
            f"com.amazonaws.{req.ctx.region}.s3",
            frozenset(req.ctx.resolve(t) for t in req.params.route_tables),
            req.params.tags.resolve(_born(observed.live.tags)),
        )

    def create(self, req: Request[EndpointParams]) -> EndpointOut:
        endpoint = req.ctx.aws.client("ec2").create_vpc_endpoint(
            VpcEndpointType="Gateway",
            VpcId=req.ctx.get(req.params.vpc).id,
            ServiceName=f"com.amazonaws.{req.ctx.region}.s3",
            RouteTableIds=[req.ctx.get(t).id for t in req.params.route_tables],
            ClientToken=req.ctx.token(req.rid),
            TagSpecifications=req.ctx.tag_spec("vpc-endpoint", req.params.tags),
        )["VpcEndpoint"]
        return EndpointOut(endpoint["VpcEndpointId"])

    def update(
        self,
        req: Request[EndpointParams],
        observed: Observed[EndpointOut, EndpointLive],
        changes: Sequence[FieldChange],
    ) -> EndpointOut:
        if any(c.path == "route_tables" for c in changes):
            want = {req.ctx.get(t).id for t in req.params.route_tables}
            add, remove = (
                sorted(want - observed.live.route_tables),
                sorted(observed.live.route_tables - want),
            )
            extra: dict[str, Any] = {}
            if add:
                extra["AddRouteTableIds"] = add
            if remove:
                extra["RemoveRouteTableIds"] = remove
            req.ctx.aws.client("ec2").modify_vpc_endpoint(VpcEndpointId=observed.id, **extra)
        _tagged(req.ctx, observed.id, changes)
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        return _found(self, self._items(ctx), "VpcEndpointId")

    def delete(self, ctx: Context, owned: Owned) -> None:
        ec2 = ctx.aws.client("ec2")

        def once() -> None:
            # DeleteVpcEndpoints is a bulk call: it answers 200 and lists what it did not
            # delete under Unsuccessful, an endpoint already gone included (EC2's error
            # codes: InvalidVpcEndpointId.NotFound). Gone is deleted; anything else is said.
            answer = ec2.delete_vpc_endpoints(VpcEndpointIds=[owned.id])
            for item in answer.get("Unsuccessful", []):
                error = item.get("Error", {})
                code = error.get("Code", "")
                if code.endswith(".NotFound"):
                    continue
                raise ResourceError(
                    f"VPC endpoint {owned.id} was not deleted: {code}: {error.get('Message', '')}",
                    hint="see the endpoint in the VPC console, then run down again",
                )

        retry_dependency(once, owned.id, ctx)
