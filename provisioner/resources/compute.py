"""Security groups (EFA, FSx) and cluster placement groups."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from provisioner.drivers.aws_errors import AlreadyExists, NotFound
from provisioner.graph.ref import UNKNOWN, Ref
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
    owned_items,
    retag,
    retry_dependency,
    tags_of,
)
from provisioner.resources.errors import Foreign
from provisioner.resources.network import VpcOut, sweep_cni_interfaces
from provisioner.resources.tags import (
    CREATED_TAG,
    FMCTL_PREFIX,
    RESOURCE_TAG,
    RETAINED_TAG,
    DesiredTags,
    Tags,
    tag_updates,
)

if TYPE_CHECKING:
    from types_boto3_ec2.type_defs import IpPermissionTypeDef

#: Lustre's ports: 988 and 1018-1023
#: (https://docs.aws.amazon.com/fsx/latest/LustreGuide/limit-access-security-groups.html)
LUSTRE_PORTS = ((988, 988), (1018, 1023))
ANYWHERE = "0.0.0.0/0"


@dataclass(frozen=True)
class SgOut:
    """A security group by id."""

    id: str


@dataclass(frozen=True)
class Rule:
    """One security-group rule: a protocol and port range to or from one peer — another
    group (``group``; None with no ``cidr`` means the group itself) or a CIDR block."""

    protocol: str  # "-1" for all traffic
    from_port: int | None = None
    to_port: int | None = None
    group: Ref[SgOut] | None = None
    cidr: str | None = None


@dataclass(frozen=True)
class SgParams:
    """A security group of the cluster's VPC and its rules, both ways."""

    vpc: Ref[VpcOut]
    group_name: str
    description: str
    ingress: tuple[Rule, ...]
    egress: tuple[Rule, ...]
    tags: DesiredTags


#: A rule as AWS has it: (protocol, from, to, peer group id or CIDR).
LiveRule = tuple[str, int | None, int | None, str]


@dataclass(frozen=True)
class SgLive:
    """What fmctl manages of a security group."""

    vpc: Any
    group_name: str
    ingress: Any  # frozenset[LiveRule]
    egress: Any
    tags: Tags


def _flatten(permissions: Sequence[Mapping[str, Any]]) -> frozenset[LiveRule]:
    rules: set[LiveRule] = set()
    for perm in permissions:
        protocol = str(perm.get("IpProtocol", "-1"))
        ports = (None, None) if protocol == "-1" else (perm.get("FromPort"), perm.get("ToPort"))
        for pair in perm.get("UserIdGroupPairs", []):
            rules.add((protocol, *ports, str(pair["GroupId"])))
        for block in perm.get("IpRanges", []):
            rules.add((protocol, *ports, str(block["CidrIp"])))
    return frozenset(rules)


def _permission(rule: LiveRule) -> IpPermissionTypeDef:
    protocol, low, high, peer = rule
    perm: IpPermissionTypeDef = {"IpProtocol": protocol}
    # Every protocol but "-1" (all) names its ports (a LiveRule read from AWS carries them).
    if protocol != "-1" and low is not None and high is not None:
        perm["FromPort"], perm["ToPort"] = low, high
    if peer.startswith("sg-"):
        perm["UserIdGroupPairs"] = [{"GroupId": peer}]
    else:
        perm["IpRanges"] = [{"CidrIp": peer}]
    return perm


class SecurityGroup(Kind[SgParams, SgOut, SgLive]):
    """``efa``: all traffic to and from itself, in and out (EFA needs both directions).
    ``fsx``: Lustre's ports from the node group, and to and from itself; no way out to the
    world (a file system only answers its clients)."""

    name, params, outputs = "sg", SgParams, SgOut
    policy = policies(
        vpc=Policy(How.REPLACE, "a security group's VPC is fixed (CreateSecurityGroup)"),
        group_name=Policy(How.REPLACE, "a security group's name is fixed"),
        ingress=Policy(How.UPDATE, "AuthorizeSecurityGroupIngress / Revoke..."),
        egress=Policy(How.UPDATE, "AuthorizeSecurityGroupEgress / Revoke..."),
    )

    def _items(self, ctx: Context) -> list[dict[str, Any]]:
        return owned_items(ctx, "describe_security_groups", "SecurityGroups")

    def read(self, req: Request[SgParams]) -> Observed[SgOut, SgLive] | None:
        item = by_resource(self._items(req.ctx), req.rid)
        if item is None:
            return None
        return self._observed(item)

    def _observed(self, item: Mapping[str, Any]) -> Observed[SgOut, SgLive]:
        live = SgLive(
            item["VpcId"],
            item["GroupName"],
            _flatten(item.get("IpPermissions", [])),
            _flatten(item.get("IpPermissionsEgress", [])),
            tags_of(item),
        )
        return Observed(SgOut(item["GroupId"]), live, item["GroupId"])

    def _rules(self, ctx: Context, rules: tuple[Rule, ...], own: str) -> Any:
        out: set[LiveRule] = set()
        for rule in rules:
            if rule.cidr is not None:
                peer: Any = rule.cidr
            elif rule.group is None:
                peer = own
            else:
                peer = ctx.resolve(rule.group)
            if peer is UNKNOWN:
                return UNKNOWN
            out.add((rule.protocol, rule.from_port, rule.to_port, str(peer)))
        return frozenset(out)

    def desired(self, req: Request[SgParams], observed: Observed[SgOut, SgLive]) -> SgLive:
        return SgLive(
            req.ctx.resolve(req.params.vpc),
            req.params.group_name,
            self._rules(req.ctx, req.params.ingress, observed.id),
            self._rules(req.ctx, req.params.egress, observed.id),
            req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
        )

    def create(self, req: Request[SgParams]) -> SgOut:
        ec2 = req.ctx.aws.client("ec2")
        try:
            group = ec2.create_security_group(
                GroupName=req.params.group_name,
                Description=req.params.description,
                VpcId=req.ctx.get(req.params.vpc).id,
                TagSpecifications=req.ctx.tag_spec("security-group", req.params.tags),
            )
            group_id = str(group["GroupId"])
        except AlreadyExists as exc:
            req.ctx.forget("ec2:describe_security_groups")
            found = self.read(req)
            if found is None:
                raise Foreign(
                    f"a security group named {req.params.group_name} exists in the VPC and is not "
                    f"fmctl cluster {req.ctx.cluster}'s",
                    hint="delete it, or pick another cluster name",
                ) from exc
            group_id = found.id
        described = ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0]
        observed = self._observed(described)
        self._converge(req.ctx, req.params, observed)
        return SgOut(group_id)

    def _converge(self, ctx: Context, params: SgParams, observed: Observed[SgOut, SgLive]) -> None:
        """Authorize the missing rules and revoke the ones the spec does not ask for."""
        ec2 = ctx.aws.client("ec2")
        calls = (
            ("ingress", ec2.authorize_security_group_ingress, ec2.revoke_security_group_ingress),
            ("egress", ec2.authorize_security_group_egress, ec2.revoke_security_group_egress),
        )
        for direction, authorize, revoke in calls:
            want: frozenset[LiveRule] = self._rules(ctx, getattr(params, direction), observed.id)
            have: frozenset[LiveRule] = getattr(observed.live, direction)
            for rule in sorted(want - have, key=repr):
                with contextlib.suppress(AlreadyExists):
                    authorize(GroupId=observed.id, IpPermissions=[_permission(rule)])
            for rule in sorted(have - want, key=repr):
                with contextlib.suppress(NotFound):  # gone already is fine
                    revoke(GroupId=observed.id, IpPermissions=[_permission(rule)])

    def update(
        self,
        req: Request[SgParams],
        observed: Observed[SgOut, SgLive],
        changes: Sequence[FieldChange],
    ) -> SgOut:
        if any(c.path in ("ingress", "egress") for c in changes):
            self._converge(req.ctx, req.params, observed)
        for change in changes:
            if change.path == "tags":
                retag(req.ctx, observed.id, *tag_updates(change.before, change.after))
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        return [
            self.owned_item(tags_of(i).get(RESOURCE_TAG) or "?", i["GroupId"])
            for i in self._items(ctx)
        ]

    def release(self, ctx: Context, owned: Owned) -> str:
        """Keep the group a retained file system uses: its rules from other groups of the
        cluster (which go with it) become the same ports from the VPC's block, so they no
        longer block those groups' deletion and the file system stays reachable in the
        VPC; no fmctl tag is left on it but where it came from."""
        ec2 = ctx.aws.client("ec2")
        item = ec2.describe_security_groups(GroupIds=[owned.id])["SecurityGroups"][0]
        cidr = ec2.describe_vpcs(VpcIds=[item["VpcId"]])["Vpcs"][0]["CidrBlock"]
        for permissions, revoke, authorize in (
            (
                item.get("IpPermissions", []),
                ec2.revoke_security_group_ingress,
                ec2.authorize_security_group_ingress,
            ),
            (
                item.get("IpPermissionsEgress", []),
                ec2.revoke_security_group_egress,
                ec2.authorize_security_group_egress,
            ),
        ):
            live = _flatten(permissions)
            others = sorted(
                (r for r in live if r[3].startswith("sg-") and r[3] != owned.id), key=repr
            )
            if not others:
                continue
            revoke(GroupId=owned.id, IpPermissions=[_permission(r) for r in others])
            wanted = {(r[0], r[1], r[2], cidr) for r in others} - set(live)
            if wanted:
                authorize(
                    GroupId=owned.id,
                    IpPermissions=[_permission(r) for r in sorted(wanted, key=repr)],
                )
        tags = tags_of(item)
        ours = [k for k, _ in tags.items if k.startswith(FMCTL_PREFIX)]
        retag(ctx, owned.id, {RETAINED_TAG: ctx.cluster}, ours)
        return (
            f"kept security group {owned.id} with the file system (its rules now name the "
            f"VPC's block {cidr})"
        )

    def delete(self, ctx: Context, owned: Owned) -> None:
        ec2 = ctx.aws.client("ec2")
        try:
            item = ec2.describe_security_groups(GroupIds=[owned.id])["SecurityGroups"][0]
        except NotFound:
            return  # gone
        sweep_cni_interfaces(ctx, "sg", "group-id", owned.id)
        # Rules naming other groups block their deletion: empty this group first.
        for permissions, revoke in (
            (item.get("IpPermissions", []), ec2.revoke_security_group_ingress),
            (item.get("IpPermissionsEgress", []), ec2.revoke_security_group_egress),
        ):
            rules = [r for r in _flatten(permissions) if r[3].startswith("sg-")]
            if rules:
                perms = [_permission(r) for r in sorted(rules, key=repr)]
                retry_dependency(
                    functools.partial(revoke, GroupId=owned.id, IpPermissions=perms),
                    owned.id,
                    ctx,
                )
        retry_dependency(lambda: ec2.delete_security_group(GroupId=owned.id), owned.id, ctx)


@dataclass(frozen=True)
class PlacementGroupOut:
    """A placement group by name (what launch templates and ParallelCluster name)."""

    id: str


@dataclass(frozen=True)
class PlacementGroupParams:
    """A cluster placement group for one GPU pool (one spine, lowest latency)."""

    group_name: str
    tags: DesiredTags
    strategy: Literal["cluster", "partition", "spread"] = "cluster"


@dataclass(frozen=True)
class PlacementGroupLive:
    """What fmctl manages of a placement group."""

    group_name: str
    strategy: str
    tags: Tags


class PlacementGroup(Kind[PlacementGroupParams, PlacementGroupOut, PlacementGroupLive]):
    """A cluster placement group for a GPU pool."""

    name, params, outputs = "placement-group", PlacementGroupParams, PlacementGroupOut
    policy = policies(
        group_name=Policy(How.REPLACE, "a placement group's name is fixed"),
        strategy=Policy(How.REPLACE, "a placement group's strategy is fixed"),
    )

    def _items(self, ctx: Context) -> list[dict[str, Any]]:
        return owned_items(ctx, "describe_placement_groups", "PlacementGroups", "State")

    def read(
        self, req: Request[PlacementGroupParams]
    ) -> Observed[PlacementGroupOut, PlacementGroupLive] | None:
        item = by_resource(self._items(req.ctx), req.rid)
        if item is None:
            return None
        live = PlacementGroupLive(item["GroupName"], item.get("Strategy", ""), tags_of(item))
        return Observed(PlacementGroupOut(item["GroupName"]), live, item["GroupName"])

    def desired(
        self,
        req: Request[PlacementGroupParams],
        observed: Observed[PlacementGroupOut, PlacementGroupLive],
    ) -> PlacementGroupLive:
        return PlacementGroupLive(
            req.params.group_name,
            req.params.strategy,
            req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
        )

    def create(self, req: Request[PlacementGroupParams]) -> PlacementGroupOut:
        try:
            req.ctx.aws.client("ec2").create_placement_group(
                GroupName=req.params.group_name,
                Strategy=req.params.strategy,
                TagSpecifications=req.ctx.tag_spec("placement-group", req.params.tags),
            )
        except AlreadyExists as exc:
            req.ctx.forget("ec2:describe_placement_groups")
            if self.read(req) is None:  # same name, but not this cluster's
                raise Foreign(
                    f"a placement group named {req.params.group_name} exists and is not owned by "
                    f"fmctl cluster {req.ctx.cluster}",
                    hint="rename the pool or delete that group",
                ) from exc
        return PlacementGroupOut(req.params.group_name)

    def update(
        self,
        req: Request[PlacementGroupParams],
        observed: Observed[PlacementGroupOut, PlacementGroupLive],
        changes: Sequence[FieldChange],
    ) -> PlacementGroupOut:
        for change in changes:
            if change.path == "tags":
                group_id = self._group_id(req.ctx, observed.id)
                retag(req.ctx, group_id, *tag_updates(change.before, change.after))
        return observed.outputs

    def _group_id(self, ctx: Context, name: str) -> str:
        """EC2 tags a placement group by its id (pg-...), not its name."""
        groups = ctx.aws.client("ec2").describe_placement_groups(GroupNames=[name])
        return str(groups["PlacementGroups"][0]["GroupId"])

    def find_owned(self, ctx: Context) -> list[Owned]:
        return [
            self.owned_item(tags_of(i).get(RESOURCE_TAG) or "?", i["GroupName"])
            for i in self._items(ctx)
        ]

    def delete(self, ctx: Context, owned: Owned) -> None:
        ec2 = ctx.aws.client("ec2")
        # A group must hold no instances to go (DeletePlacementGroup's reference); the last
        # ones of a deleted node group or queue may still be terminating: EC2 says
        # InvalidPlacementGroup.InUse (typed InUse) until they are gone.
        retry_dependency(lambda: ec2.delete_placement_group(GroupName=owned.id), owned.id, ctx)
