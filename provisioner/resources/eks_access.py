"""EKS access entries: the node role's (EC2_LINUX) and the caller's, as cluster admin."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from provisioner.drivers.aws_errors import AlreadyExists
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
from provisioner.resources.eks import EksOut, cluster_ours
from provisioner.resources.eks_api import caller_principal, eks_retag, unless_gone
from provisioner.resources.iam import RoleOut
from provisioner.resources.tags import (
    CREATED_TAG,
    OWNER_TAG,
    RESOURCE_TAG,
    DesiredTags,
    Tags,
)

if TYPE_CHECKING:
    from types_boto3_eks.type_defs import AccessEntryTypeDef

ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"


@dataclass(frozen=True)
class AccessOut:
    """An access entry by principal."""

    id: str


@dataclass(frozen=True)
class AccessParams:
    """An access entry: the node role (EC2_LINUX), or the caller (``principal`` None) as
    cluster admin."""

    cluster: Ref[EksOut]
    principal: Ref[RoleOut] | None
    entry_type: str
    tags: DesiredTags
    policy: str | None = None


@dataclass(frozen=True)
class AccessLive:
    """What fmctl manages of an access entry."""

    entry_type: str
    policies: Any
    tags: Tags


class AccessEntry(Kind[AccessParams, AccessOut, AccessLive]):
    """An EKS access entry."""

    name, params, outputs = "eks-access-entry", AccessParams, AccessOut
    policy = policies(
        entry_type=Policy(How.REPLACE, "an access entry's type is fixed (CreateAccessEntry)"),
        policies=Policy(How.UPDATE, "AssociateAccessPolicy / DisassociateAccessPolicy"),
    )

    def _principal(self, ctx: Context, params: AccessParams) -> Any:
        if params.principal is None:
            return caller_principal(ctx)
        return ctx.resolve(params.principal, "arn")

    def _entries(self, ctx: Context) -> dict[str, AccessEntryTypeDef]:
        """Principal -> the cluster's access entry (one listing, one describe each, per
        run)."""

        def load() -> dict[str, AccessEntryTypeDef]:
            if not cluster_ours(ctx):
                return {}
            eks = ctx.aws.client("eks")
            out = {}
            for principal in eks.list_access_entries(clusterName=ctx.cluster)["accessEntries"]:
                entry = unless_gone(
                    functools.partial(
                        eks.describe_access_entry, clusterName=ctx.cluster, principalArn=principal
                    )
                )
                if entry is not None:
                    out[principal] = entry["accessEntry"]
            return out

        return ctx.cached("eks:access-entries", load)

    def read(self, req: Request[AccessParams]) -> Observed[AccessOut, AccessLive] | None:
        principal = self._principal(req.ctx, req.params)
        if principal is UNKNOWN:
            return None
        entry = self._entries(req.ctx).get(principal)
        if entry is None:
            return None
        listed = req.ctx.aws.client("eks").list_associated_access_policies(
            clusterName=req.ctx.cluster, principalArn=principal
        )["associatedAccessPolicies"]
        policies = frozenset(p["policyArn"] for p in listed)
        live = AccessLive(entry["type"], policies, Tags.of(entry.get("tags") or {}))
        return Observed(AccessOut(principal), live, principal)

    def desired(
        self, req: Request[AccessParams], observed: Observed[AccessOut, AccessLive]
    ) -> AccessLive:
        return AccessLive(
            req.params.entry_type,
            frozenset([req.params.policy] if req.params.policy else []),
            req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
        )

    def create(self, req: Request[AccessParams]) -> AccessOut:
        principal = self._principal(req.ctx, req.params)
        # The cluster's creator has an entry from bootstrapClusterCreatorAdminPermissions.
        with contextlib.suppress(AlreadyExists):
            req.ctx.aws.client("eks").create_access_entry(
                clusterName=req.ctx.cluster,
                principalArn=principal,
                type=req.params.entry_type,
                tags=req.params.tags.at_creation(),
                clientRequestToken=req.ctx.token(f"{req.rid}/{principal}"),
            )
        self._associate(req.ctx, req.params, principal)
        return AccessOut(principal)

    def _associate(self, ctx: Context, params: AccessParams, principal: str) -> None:
        if params.policy:
            ctx.aws.client("eks").associate_access_policy(
                clusterName=ctx.cluster,
                principalArn=principal,
                policyArn=params.policy,
                accessScope={"type": "cluster"},
            )

    def update(
        self,
        req: Request[AccessParams],
        observed: Observed[AccessOut, AccessLive],
        changes: Sequence[FieldChange],
    ) -> AccessOut:
        eks = req.ctx.aws.client("eks")
        if any(c.path == "policies" for c in changes):
            self._associate(req.ctx, req.params, observed.id)
            for stale in sorted(observed.live.policies - {req.params.policy}):
                eks.disassociate_access_policy(
                    clusterName=req.ctx.cluster, principalArn=observed.id, policyArn=stale
                )
        if any(c.path == "tags" for c in changes):
            entry = eks.describe_access_entry(clusterName=req.ctx.cluster, principalArn=observed.id)
            eks_retag(req.ctx, entry["accessEntry"]["accessEntryArn"], changes)
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        out = []
        for principal, entry in sorted(self._entries(ctx).items()):
            tags = entry.get("tags") or {}
            if tags.get(OWNER_TAG) == ctx.cluster:
                out.append(self.owned_item(tags.get(RESOURCE_TAG, "?"), principal))
        return out

    def delete(self, ctx: Context, owned: Owned) -> None:
        eks = ctx.aws.client("eks")
        unless_gone(lambda: eks.delete_access_entry(clusterName=ctx.cluster, principalArn=owned.id))
