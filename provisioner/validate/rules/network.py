"""Rules for the network section: one AZ, well-formed CIDRs and ids, no world-open SSH."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator

from provisioner.spec.model import ClusterSpec
from provisioner.spec.problems import Problem, SpecPath
from provisioner.validate.rules.registry import RuleContext, rule

VPC_ID_RE = re.compile(r"^vpc-[0-9a-f]{8}(?:[0-9a-f]{9})?$")
SUBNET_ID_RE = re.compile(r"^subnet-[0-9a-f]{8}(?:[0-9a-f]{9})?$")


@rule("az-region")
def availability_zone(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """The AZ is the region's name plus one letter the region has (``catalog.regions``'s
    dated table; local zones cannot host these nodes)."""
    from provisioner.catalog.regions import ZONES_AS_OF, zones_of

    az, region = spec.network.availability_zone, spec.metadata.region
    known = zones_of(region)
    if not re.fullmatch(re.escape(region) + r"[a-z]", az):
        yield Problem(
            "az-region",
            f"availability zone {az!r} is not in region {region!r}",
            ("network", "availabilityZone"),
            hint=f"use a zone of {region}, such as {(known or (region + 'a',))[0]}",
            related=(("metadata", "region"),),
        )
    elif known and az not in known:
        yield Problem(
            "az-region",
            f"{region} has no availability zone {az!r} (its zones: {', '.join(known)})",
            ("network", "availabilityZone"),
            hint=f"use one of them; fmctl's table of zones is of {ZONES_AS_OF.isoformat()} "
            "(aws ec2 describe-availability-zones lists this account's)",
            related=(("metadata", "region"),),
        )


def _cidr(text: str, path: SpecPath) -> tuple[ipaddress.IPv4Network | None, Problem | None]:
    if "/" not in text:
        # ipaddress reads a bare address as a /32: say so rather than guess what was meant.
        try:
            ipaddress.ip_address(text)
            hint = f"write {text}/32 for this address alone, or the range's prefix"
        except ValueError:
            hint = "write it as address/prefix, e.g. 10.0.0.0/16"
        return None, Problem(
            "cidr-invalid", f"{text!r} is not a CIDR block (no /prefix)", path, hint=hint
        )
    try:
        net = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        hint = "write it as address/prefix, e.g. 10.0.0.0/16"
        try:
            loose = ipaddress.ip_network(text, strict=False)
            hint = f"host bits are set; did you mean {loose}?"
        except ValueError:
            pass
        return None, Problem(
            "cidr-invalid", f"{text!r} is not a valid CIDR block ({exc})", path, hint=hint
        )
    if not isinstance(net, ipaddress.IPv4Network):
        return None, Problem(
            "cidr-invalid",
            f"{text!r} is not an IPv4 CIDR block",
            path,
            hint="fmctl's VPCs are IPv4; write an IPv4 block",
        )
    return net, None


@rule("api-private")
def private_api(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Without apiCidrs the EKS API endpoint is private: `up` applies the in-cluster stack
    through it, so a machine outside the VPC gets as far as that step and no further.
    ``apiCidrs: []`` written out says it is meant (fmctl runs inside the VPC): no warning."""
    network = spec.network
    if (
        ctx.scheduler == "kubernetes"
        and not network.api_cidrs
        and "api_cidrs" not in network.model_fields_set
    ):
        yield Problem(
            "api-private",
            "the EKS API endpoint will be private (no network.apiCidrs): `up` must reach it "
            "to apply the in-cluster stack, and cannot from outside the VPC",
            ("network",),
            level="warning",
            hint="add apiCidrs: [YOUR.RANGE/NN] (your office or VPN); or, running fmctl "
            "inside the VPC, write apiCidrs: [] to say so",
        )


@rule("cidr-invalid", "cidr-world-open")
def cidrs(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """CIDRs parse, the VPC block fits AWS's limits, and nothing is open to the world."""
    network = spec.network
    if network.vpc_cidr is not None:
        path: SpecPath = ("network", "vpcCidr")
        net, problem = _cidr(network.vpc_cidr, path)
        if problem:
            yield problem
        elif net is not None and not 16 <= net.prefixlen <= 24:
            yield Problem(
                "cidr-invalid",
                f"a VPC block must be /16 to /24, not /{net.prefixlen}",
                path,
                hint="AWS allows /16 to /28; fmctl needs room for two subnets "
                "and hundreds of EFA nodes: use /16 to /24",
            )
        elif net is not None and not net.is_private:
            yield Problem(
                "cidr-invalid",
                f"{net} is not a private address range",
                path,
                hint="use a block in 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16",
            )
    named: list[tuple[str, SpecPath]] = []
    if network.ssh_cidr is not None:
        named.append((network.ssh_cidr, ("network", "sshCidr")))
    named += [(c, ("network", "apiCidrs", i)) for i, c in enumerate(network.api_cidrs)]
    for text, path in named:
        net, problem = _cidr(text, path)
        if problem:
            yield problem
        elif net is not None and net.prefixlen == 0:
            yield Problem(
                "cidr-world-open",
                f"{path[-1] if isinstance(path[-1], str) else 'apiCidrs'} "
                "0.0.0.0/0 opens the port to the whole internet",
                path,
                level="warning",
                hint="narrow it to your office or VPN range; or remove sshCidr and use SSM",
            )


@rule("vpc-choice")
def vpc_choice(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Either a new VPC (vpcCidr) or an existing one (vpcId + subnetId), well-formed."""
    n = spec.network
    if n.vpc_id and n.vpc_cidr:
        yield Problem(
            "vpc-choice",
            "vpcCidr and vpcId both given",
            ("network", "vpcCidr"),
            hint="give vpcCidr for a new VPC, or vpcId + subnetId to reuse one",
            related=(("network", "vpcId"),),
        )
    if n.vpc_id and not n.subnet_id:
        yield Problem(
            "vpc-choice",
            "vpcId needs subnetId",
            ("network", "vpcId"),
            hint="name the private subnet in the AZ that the nodes use",
            related=(("network", "subnetId"),),
        )
    if n.vpc_id and spec.scheduler == "kubernetes" and not n.secondary_subnet_id:
        yield Problem(
            "vpc-choice",
            "an EKS cluster in an existing VPC needs secondarySubnetId",
            ("network", "vpcId"),
            hint="name a subnet of the VPC in another AZ: EKS puts control-plane interfaces "
            "in two AZs (the nodes stay in availabilityZone)",
        )
    if (n.subnet_id or n.public_subnet_id or n.secondary_subnet_id) and not n.vpc_id:
        key = next(
            k
            for k, v in (
                ("subnetId", n.subnet_id),
                ("publicSubnetId", n.public_subnet_id),
                ("secondarySubnetId", n.secondary_subnet_id),
            )
            if v
        )
        yield Problem(
            "vpc-choice",
            "subnetId needs vpcId",
            ("network", key),
            hint="add vpcId: the VPC the subnet belongs to",
            related=(("network", "vpcId"),),
        )
    if n.vpc_id and not VPC_ID_RE.match(n.vpc_id):
        yield Problem(
            "vpc-choice",
            f"{n.vpc_id!r} is not a VPC id",
            ("network", "vpcId"),
            hint="VPC ids look like vpc-0123456789abcdef0",
        )
    for key, value in (
        ("subnetId", n.subnet_id),
        ("publicSubnetId", n.public_subnet_id),
        ("secondarySubnetId", n.secondary_subnet_id),
    ):
        if value and not SUBNET_ID_RE.match(value):
            yield Problem(
                "vpc-choice",
                f"{value!r} is not a subnet id",
                ("network", key),
                hint="subnet ids look like subnet-0123456789abcdef0",
            )
