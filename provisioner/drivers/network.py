"""Network kinds: VPC, subnets, internet and NAT gateways, Elastic IP, route tables, the S3
gateway endpoint; and the existing VPC/subnet a spec may name (used, never changed)."""

from __future__ import annotations

import functools
from typing import Any

from provisioner.drivers.ec2_base import Ec2Kind, is_gone, retry_dependency
from provisioner.plan.context import Engine
from provisioner.plan.graph import Found, Node, Outputs


class Vpc(Ec2Kind):
    """The cluster's VPC, with DNS support (FSx and EKS endpoints need it)."""

    name, after = "vpc", ()
    describe_call, result_key, id_field, state_field = "describe_vpcs", "Vpcs", "VpcId", "State"

    def outputs_of(self, item: dict[str, Any]) -> Outputs:
        return {"id": item["VpcId"], "cidr": item["CidrBlock"]}

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        items = self._describe(engine, engine.owner_filters(node.id))
        if not items:
            return None
        self._configure(engine, items[0]["VpcId"])  # a crash may have come before this
        return self.outputs_of(items[0])

    def _configure(self, engine: Engine, vpc_id: str) -> None:
        ec2 = engine.aws.client("ec2")
        for attribute in ("EnableDnsSupport", "EnableDnsHostnames"):
            ec2.modify_vpc_attribute(VpcId=vpc_id, **{attribute: {"Value": True}})

    def create(self, engine: Engine, node: Node) -> Outputs:
        once = engine.aws.client("ec2", retries=False)

        def make() -> Outputs:
            vpc = once.create_vpc(
                CidrBlock=node.params["cidr"], TagSpecifications=engine.tag_spec("vpc", node.id)
            )["Vpc"]
            return self.outputs_of(vpc)

        outputs = self.create_adopting(engine, node, make)
        self._configure(engine, outputs["id"])
        return outputs

    def delete(self, engine: Engine, found: Found) -> None:
        ec2 = engine.aws.client("ec2")
        retry_dependency(lambda: ec2.delete_vpc(VpcId=found.id), found.id, engine)


class ExistingVpc(Ec2Kind):
    """A VPC the spec names: looked up, never modified, never deleted."""

    name, after = "existing-vpc", ()

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        try:
            vpcs = engine.aws.client("ec2").describe_vpcs(VpcIds=[node.params["id"]])["Vpcs"]
        except Exception as exc:
            if is_gone(exc):
                return None
            raise
        return {"id": vpcs[0]["VpcId"], "cidr": vpcs[0]["CidrBlock"]} if vpcs else None

    def create(self, engine: Engine, node: Node) -> Outputs:
        raise LookupError(f"VPC {node.params['id']} does not exist")

    def find_all(self, engine: Engine) -> list[Found]:
        return []  # not ours

    def delete(self, engine: Engine, found: Found) -> None:
        raise AssertionError("fmctl never deletes a VPC it did not create")


class ExistingSubnet(ExistingVpc):
    """A subnet the spec names: looked up, never modified, never deleted."""

    name = "existing-subnet"

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        try:
            subnets = engine.aws.client("ec2").describe_subnets(SubnetIds=[node.params["id"]])[
                "Subnets"
            ]
        except Exception as exc:
            if is_gone(exc):
                return None
            raise
        return (
            {"id": subnets[0]["SubnetId"], "az": subnets[0]["AvailabilityZone"]}
            if subnets
            else None
        )


class Subnet(Ec2Kind):
    """A subnet of the cluster's VPC."""

    name, after = "subnet", ("vpc",)
    describe_call, result_key, id_field, state_field = (
        "describe_subnets",
        "Subnets",
        "SubnetId",
        "State",
    )

    def create(self, engine: Engine, node: Node) -> Outputs:
        az = node.params.get("az") or _second_az(engine, node.params["avoid_az"])
        once = engine.aws.client("ec2", retries=False)

        def make() -> Outputs:
            subnet = once.create_subnet(
                VpcId=engine.output(node.params["vpc"]),
                CidrBlock=node.params["cidr"],
                AvailabilityZone=az,
                TagSpecifications=engine.tag_spec("subnet", node.id),
            )["Subnet"]
            if node.params.get("public"):
                engine.aws.client("ec2").modify_subnet_attribute(
                    SubnetId=subnet["SubnetId"], MapPublicIpOnLaunch={"Value": True}
                )
            return {"id": subnet["SubnetId"], "az": az}

        return self.create_adopting(engine, node, make)

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        items = self._describe(engine, engine.owner_filters(node.id))
        if not items:
            return None
        subnet = items[0]
        if node.params.get("public") and not subnet.get("MapPublicIpOnLaunch"):
            engine.aws.client("ec2").modify_subnet_attribute(  # a crash came before it
                SubnetId=subnet["SubnetId"], MapPublicIpOnLaunch={"Value": True}
            )
        return {"id": subnet["SubnetId"], "az": subnet["AvailabilityZone"]}

    def delete(self, engine: Engine, found: Found) -> None:
        ec2 = engine.aws.client("ec2")
        retry_dependency(lambda: ec2.delete_subnet(SubnetId=found.id), found.id, engine)


def _second_az(engine: Engine, avoid: str) -> str:
    """Another AZ of the region (EKS control planes want subnets in two)."""
    zones = engine.aws.client("ec2").describe_availability_zones(
        Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}]
    )["AvailabilityZones"]
    names = sorted(str(z["ZoneName"]) for z in zones if z["ZoneName"] != avoid)
    return names[0]


class InternetGateway(Ec2Kind):
    """The VPC's internet gateway."""

    name, after = "igw", ("vpc",)
    describe_call, result_key, id_field = (
        "describe_internet_gateways",
        "InternetGateways",
        "InternetGatewayId",
    )

    def create(self, engine: Engine, node: Node) -> Outputs:
        once = engine.aws.client("ec2", retries=False)

        def make() -> Outputs:
            igw = once.create_internet_gateway(
                TagSpecifications=engine.tag_spec("internet-gateway", node.id)
            )["InternetGateway"]
            engine.aws.client("ec2").attach_internet_gateway(
                InternetGatewayId=igw["InternetGatewayId"],
                VpcId=engine.output(node.params["vpc"]),
            )
            return {"id": igw["InternetGatewayId"]}

        return self.create_adopting(engine, node, make)

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        items = self._describe(engine, engine.owner_filters(node.id))
        if not items:
            return None
        if not items[0].get("Attachments"):  # crashed between create and attach
            engine.aws.client("ec2").attach_internet_gateway(
                InternetGatewayId=items[0]["InternetGatewayId"],
                VpcId=engine.output(node.params["vpc"]),
            )
        return {"id": items[0]["InternetGatewayId"]}

    def delete(self, engine: Engine, found: Found) -> None:
        ec2 = engine.aws.client("ec2")
        for attachment in found.data.get("Attachments", []):
            vpc_id = str(attachment["VpcId"])
            retry_dependency(
                functools.partial(
                    ec2.detach_internet_gateway, InternetGatewayId=found.id, VpcId=vpc_id
                ),
                found.id,
                engine,
            )
        retry_dependency(
            lambda: ec2.delete_internet_gateway(InternetGatewayId=found.id), found.id, engine
        )


class ElasticIp(Ec2Kind):
    """The NAT gateway's address."""

    name, after = "eip", ("igw",)
    describe_call, result_key, id_field = "describe_addresses", "Addresses", "AllocationId"

    def create(self, engine: Engine, node: Node) -> Outputs:
        once = engine.aws.client("ec2", retries=False)

        def make() -> Outputs:
            address = once.allocate_address(
                Domain="vpc", TagSpecifications=engine.tag_spec("elastic-ip", node.id)
            )
            return {"id": address["AllocationId"]}

        return self.create_adopting(engine, node, make)

    def delete(self, engine: Engine, found: Found) -> None:
        ec2 = engine.aws.client("ec2")
        retry_dependency(lambda: ec2.release_address(AllocationId=found.id), found.id, engine)


class NatGateway(Ec2Kind):
    """Outbound internet for the private subnet (package installs, container pulls)."""

    name, after = "natgw", ("subnet", "eip", "igw")
    create_seconds, delete_seconds = 120.0, 60.0
    describe_call, result_key, id_field, state_field = (
        "describe_nat_gateways",
        "NatGateways",
        "NatGatewayId",
        "State",
    )

    def create(self, engine: Engine, node: Node) -> Outputs:
        nat = engine.aws.client("ec2").create_nat_gateway(
            SubnetId=engine.output(node.params["subnet"]),
            AllocationId=engine.output(node.params["eip"]),
            ClientToken=engine.token(node.id),
            TagSpecifications=engine.tag_spec("natgateway", node.id),
        )["NatGateway"]
        return {"id": nat["NatGatewayId"]}

    def wait(self, engine: Engine, node: Node, outputs: Outputs) -> Outputs:
        ec2 = engine.aws.client("ec2")

        def probe() -> Outputs | None:
            nat = ec2.describe_nat_gateways(NatGatewayIds=[outputs["id"]])["NatGateways"][0]
            if nat["State"] == "failed":
                raise RuntimeError(
                    f"NAT gateway {outputs['id']} failed: {nat.get('FailureMessage', '')}"
                )
            return outputs if nat["State"] == "available" else None

        result: Outputs = engine.wait_until(
            f"NAT gateway {outputs['id']} to be available", probe, self.create_seconds, 900, node.id
        )
        return result

    def delete(self, engine: Engine, found: Found) -> None:
        ec2 = engine.aws.client("ec2")
        retry_dependency(lambda: ec2.delete_nat_gateway(NatGatewayId=found.id), found.id, engine)

        def gone() -> bool | None:
            nats = ec2.describe_nat_gateways(NatGatewayIds=[found.id])["NatGateways"]
            return True if not nats or nats[0]["State"] == "deleted" else None

        engine.wait_until(
            f"NAT gateway {found.id} to be deleted",
            gone,
            self.delete_seconds,
            900,
            found.logical_id,
        )


class RouteTable(Ec2Kind):
    """A route table with a default route (internet or NAT gateway) and its subnets."""

    name, after = "route-table", ("vpc", "igw", "natgw", "subnet")
    describe_call, result_key, id_field = "describe_route_tables", "RouteTables", "RouteTableId"

    def create(self, engine: Engine, node: Node) -> Outputs:
        once = engine.aws.client("ec2", retries=False)

        def make() -> Outputs:
            table = once.create_route_table(
                VpcId=engine.output(node.params["vpc"]),
                TagSpecifications=engine.tag_spec("route-table", node.id),
            )["RouteTable"]
            return self._complete(engine, node, table["RouteTableId"])

        return self.create_adopting(engine, node, make)

    def discover(self, engine: Engine, node: Node) -> Outputs | None:
        items = self._describe(engine, engine.owner_filters(node.id))
        return self._complete(engine, node, items[0]["RouteTableId"], items[0]) if items else None

    def _complete(
        self, engine: Engine, node: Node, table_id: str, seen: dict[str, Any] | None = None
    ) -> Outputs:
        """Add the default route and associations that are missing (a crash may have left
        the table half-made)."""
        ec2 = engine.aws.client("ec2")
        seen = seen or {}
        if not any(r.get("DestinationCidrBlock") == "0.0.0.0/0" for r in seen.get("Routes", [])):
            target = node.params["target"]
            key = "GatewayId" if target.startswith("igw") else "NatGatewayId"
            ec2.create_route(
                RouteTableId=table_id,
                DestinationCidrBlock="0.0.0.0/0",
                **{key: engine.output(target)},
            )
        associated = {a.get("SubnetId") for a in seen.get("Associations", [])}
        for subnet in node.params["subnets"]:
            subnet_id = engine.output(subnet)
            if subnet_id not in associated:
                ec2.associate_route_table(RouteTableId=table_id, SubnetId=subnet_id)
        return {"id": table_id}

    def delete(self, engine: Engine, found: Found) -> None:
        ec2 = engine.aws.client("ec2")
        for association in found.data.get("Associations", []):
            if not association.get("Main"):
                association_id = str(association["RouteTableAssociationId"])
                retry_dependency(
                    functools.partial(ec2.disassociate_route_table, AssociationId=association_id),
                    found.id,
                    engine,
                )
        retry_dependency(lambda: ec2.delete_route_table(RouteTableId=found.id), found.id, engine)


class S3Endpoint(Ec2Kind):
    """S3 gateway endpoint: data and artifacts reach S3 without the NAT gateway's charges."""

    name, after = "s3-endpoint", ("route-table",)
    describe_call, result_key, id_field, state_field = (
        "describe_vpc_endpoints",
        "VpcEndpoints",
        "VpcEndpointId",
        "State",
    )

    def create(self, engine: Engine, node: Node) -> Outputs:
        endpoint = engine.aws.client("ec2").create_vpc_endpoint(
            VpcEndpointType="Gateway",
            VpcId=engine.output(node.params["vpc"]),
            ServiceName=f"com.amazonaws.{engine.region}.s3",
            RouteTableIds=[engine.output(t) for t in node.params["route_tables"]],
            ClientToken=engine.token(node.id),
            TagSpecifications=engine.tag_spec("vpc-endpoint", node.id),
        )["VpcEndpoint"]
        return {"id": endpoint["VpcEndpointId"]}

    def delete(self, engine: Engine, found: Found) -> None:
        ec2 = engine.aws.client("ec2")
        retry_dependency(
            lambda: ec2.delete_vpc_endpoints(VpcEndpointIds=[found.id]), found.id, engine
        )
