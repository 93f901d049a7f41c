"""EKS managed add-ons and Pod Identity associations.

Add-ons are made once nodes exist (an add-on that runs pods and has no node goes DEGRADED)
and deleted after the node groups (the VPC CNI must outlive the pods' interfaces): the one
relation that is not the mirror of creation, so it is an ``After``. Their version follows
the spec's pin, or EKS's default for the spec's Kubernetes version — so a cluster upgrade
moves them to the new version's defaults (UpdateAddon).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from provisioner.drivers.aws_errors import AlreadyExists
from provisioner.graph.ref import After, Ref
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
from provisioner.resources.eks_api import created_or_found, eks_retag, health, unless_gone
from provisioner.resources.eks_nodegroup_model import NodegroupOut
from provisioner.resources.errors import Foreign, ResourceError
from provisioner.resources.iam import RoleOut
from provisioner.resources.tags import CREATED_TAG, OWNER_TAG, RESOURCE_TAG, DesiredTags, Tags

if TYPE_CHECKING:
    from types_boto3_eks.type_defs import AddonTypeDef, PodIdentityAssociationTypeDef


@dataclass(frozen=True)
class AddonOut:
    """An add-on by name, and its version."""

    id: str
    version: str


@dataclass(frozen=True)
class AddonParams:
    """A managed add-on at the pinned version, or EKS's default for ``kubernetes_version``;
    with a Pod Identity role for its service account where it calls AWS."""

    cluster: Ref[EksOut]
    addon_name: str
    kubernetes_version: str
    #: The system node group it first runs on.
    nodes: After[NodegroupOut]
    tags: DesiredTags
    version: str | None = None
    role: Ref[RoleOut] | None = None
    service_account: str | None = None
    #: The Pod Identity Agent add-on, for an add-on whose role reaches it through the agent.
    agent: Ref[AddonOut] | None = None
    #: The add-on's configuration values (JSON), e.g. the VPC CNI's network policy agent.
    configuration: str | None = None


@dataclass(frozen=True)
class AddonLive:
    """What fmctl manages of an add-on."""

    version: str
    roles: Any
    tags: Tags
    #: Its configuration values, parsed (sorted pairs; empty for EKS's defaults).
    configuration: Any = ()


def _configuration(text: str | None) -> tuple[tuple[str, Any], ...]:
    """Configuration values as comparable data."""
    return tuple(sorted(json.loads(text).items())) if text else ()


class Addon(Kind[AddonParams, AddonOut, AddonLive]):
    """A managed add-on."""

    name, params, outputs = "eks-addon", AddonParams, AddonOut
    create_seconds, update_seconds, delete_seconds = 60.0, 60.0, 30.0
    policy = policies(
        version=Policy(How.UPDATE, "UpdateAddon addonVersion"),
        roles=Policy(How.UPDATE, "UpdateAddon podIdentityAssociations"),
        configuration=Policy(How.UPDATE, "UpdateAddon configurationValues"),
    )

    def _addons(self, ctx: Context) -> dict[str, AddonTypeDef]:
        def load() -> dict[str, AddonTypeDef]:
            if not cluster_ours(ctx):
                return {}
            eks = ctx.aws.client("eks")
            out = {}
            for name in eks.list_addons(clusterName=ctx.cluster)["addons"]:
                found = unless_gone(
                    functools.partial(eks.describe_addon, clusterName=ctx.cluster, addonName=name)
                )
                if found is not None:
                    out[name] = found["addon"]
            return out

        return ctx.cached("eks:addons", load)

    @staticmethod
    def _claim(ctx: Context, item: AddonTypeDef) -> None:
        """An add-on of fmctl's own cluster that fmctl did not make (someone added it by
        hand, console or eksctl) is not taken over: its version and settings are theirs."""
        if (item.get("tags") or {}).get(OWNER_TAG) != ctx.cluster:
            name = item.get("addonName", "?")
            raise Foreign(
                f"add-on {name} of cluster {ctx.cluster} was not made by fmctl (it carries no "
                f"{OWNER_TAG}={ctx.cluster} tag)",
                hint=f"delete it (`aws eks delete-addon --cluster-name {ctx.cluster} "
                f"--addon-name {name} --preserve`), then run `up` again to have fmctl manage it",
            )

    def read(self, req: Request[AddonParams]) -> Observed[AddonOut, AddonLive] | None:
        item = self._addons(req.ctx).get(req.params.addon_name)
        if item is None or item.get("status") == "DELETING":
            return None
        self._claim(req.ctx, item)
        if item["status"] in ("CREATE_FAILED", "DEGRADED"):
            raise ResourceError(
                f"add-on {req.params.addon_name} is {item['status']}: {health(item)}",
                hint="its pods need nodes to run on; `fmctl status` shows the node groups",
            )
        live = AddonLive(
            str(item["addonVersion"]),
            frozenset(item.get("podIdentityAssociations") or []),
            Tags.of(item.get("tags") or {}),
            _configuration(item.get("configurationValues")),
        )
        pending = None if item["status"] == "ACTIVE" else str(item["status"])
        return Observed(
            AddonOut(req.params.addon_name, live.version), live, req.params.addon_name, pending
        )

    def version(self, ctx: Context, params: AddonParams) -> str:
        """The pinned version, or EKS's default for the spec's Kubernetes version."""
        if params.version:
            return params.version
        cluster_version = params.kubernetes_version

        def load() -> dict[str, str]:
            """Add-on -> its default version for ``cluster_version`` (one paged listing of
            every add-on, not a call per add-on)."""
            eks = ctx.aws.client("eks")
            defaults: dict[str, str] = {}
            pages = eks.get_paginator("describe_addon_versions").paginate(
                kubernetesVersion=cluster_version
            )
            for page in pages:
                for item in page["addons"]:
                    for v in item["addonVersions"]:
                        if any(
                            c.get("defaultVersion") and c.get("clusterVersion") == cluster_version
                            for c in v.get("compatibilities", [])
                        ):
                            defaults.setdefault(str(item["addonName"]), str(v["addonVersion"]))
            return defaults

        found = ctx.cached(f"eks:addon-defaults:{cluster_version}", load).get(params.addon_name)
        if found is None:
            raise ResourceError(
                f"EKS offers no default version of {params.addon_name} for {cluster_version}",
                hint="pin one with kubernetes.addonVersions",
            )
        return found

    def desired(
        self, req: Request[AddonParams], observed: Observed[AddonOut, AddonLive]
    ) -> AddonLive:
        roles = (
            frozenset([req.ctx.resolve(req.params.role, "arn")]) if req.params.role else frozenset()
        )
        return AddonLive(
            self.version(req.ctx, req.params),
            roles,
            req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
            _configuration(req.params.configuration),
        )

    def _identities(self, ctx: Context, params: AddonParams) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if params.configuration:
            extra["configurationValues"] = params.configuration
        if params.role is None:
            return extra
        return {
            **extra,
            "podIdentityAssociations": [
                {"serviceAccount": params.service_account, "roleArn": ctx.get(params.role).arn}
            ],
        }

    def create(self, req: Request[AddonParams]) -> AddonOut:
        version = self.version(req.ctx, req.params)
        eks = req.ctx.aws.client("eks")
        try:
            eks.create_addon(
                clusterName=req.ctx.cluster,
                addonName=req.params.addon_name,
                addonVersion=version,
                # EKS installed self-managed vpc-cni, kube-proxy and coredns with the cluster.
                resolveConflicts="OVERWRITE",
                tags=req.params.tags.at_creation(),
                clientRequestToken=req.ctx.token(req.rid),
                **self._identities(req.ctx, req.params),
            )
        except AlreadyExists:
            # Made by a run whose answer was lost (tagged as this cluster's), or someone else's.
            name = req.params.addon_name
            found = unless_gone(
                lambda: eks.describe_addon(clusterName=req.ctx.cluster, addonName=name)
            )
            if found is not None:
                self._claim(req.ctx, found["addon"])
        return self._active(req.ctx, req.rid, req.params.addon_name, self.create_seconds)

    def _active(self, ctx: Context, rid: str, addon: str, expected: float) -> AddonOut:
        eks = ctx.aws.client("eks")

        def probe() -> AddonOut | None:
            item = unless_gone(
                lambda: eks.describe_addon(clusterName=ctx.cluster, addonName=addon)["addon"]
            )
            if item is None:
                raise ResourceError(f"add-on {addon} disappeared while it was being made")
            if item["status"] in ("CREATE_FAILED", "DEGRADED", "UPDATE_FAILED"):
                raise ResourceError(f"add-on {addon} is {item['status']}: {health(item)}")
            return AddonOut(addon, item["addonVersion"]) if item["status"] == "ACTIVE" else None

        return ctx.wait_until(f"add-on {addon} to be ACTIVE", probe, expected, 1200, rid)

    def wait(self, req: Request[AddonParams], observed: Observed[AddonOut, AddonLive]) -> AddonOut:
        return self._active(req.ctx, req.rid, req.params.addon_name, self.create_seconds)

    def update(
        self,
        req: Request[AddonParams],
        observed: Observed[AddonOut, AddonLive],
        changes: Sequence[FieldChange],
    ) -> AddonOut:
        paths = {c.path for c in changes}
        out = observed.outputs
        if paths & {"version", "roles", "configuration"}:
            version = self.version(req.ctx, req.params)
            req.ctx.emit(req.rid, "updating", f"{observed.live.version} -> {version}")
            req.ctx.aws.client("eks").update_addon(
                clusterName=req.ctx.cluster,
                addonName=req.params.addon_name,
                addonVersion=version,
                resolveConflicts="OVERWRITE",
                clientRequestToken=req.ctx.token(f"{req.rid}/{version}"),
                **self._identities(req.ctx, req.params),
            )
            out = self._active(req.ctx, req.rid, req.params.addon_name, self.update_seconds)
        if "tags" in paths:
            arn = req.ctx.aws.client("eks").describe_addon(
                clusterName=req.ctx.cluster, addonName=req.params.addon_name
            )["addon"]["addonArn"]
            eks_retag(req.ctx, arn, changes)
        return out

    def find_owned(self, ctx: Context) -> list[Owned]:
        return [
            self.owned_item((item.get("tags") or {}).get(RESOURCE_TAG, "?"), name)
            for name, item in sorted(self._addons(ctx).items())
            if (item.get("tags") or {}).get(OWNER_TAG) == ctx.cluster
        ]

    def delete(self, ctx: Context, owned: Owned) -> None:
        eks = ctx.aws.client("eks")
        if (
            unless_gone(lambda: eks.delete_addon(clusterName=ctx.cluster, addonName=owned.id))
            is None
        ):
            return
        ctx.wait_until(
            f"add-on {owned.id} to be deleted",
            lambda: (
                None
                if unless_gone(
                    lambda: eks.describe_addon(clusterName=ctx.cluster, addonName=owned.id)
                )
                else True
            ),
            self.delete_seconds,
            1200,
            owned.resource,
        )


@dataclass(frozen=True)
class IdentityOut:
    """A Pod Identity association by id."""

    id: str


@dataclass(frozen=True)
class IdentityParams:
    """A service account of the cluster that assumes one of fmctl's roles."""

    cluster: Ref[EksOut]
    namespace: str
    service_account: str
    role: Ref[RoleOut]
    #: The Pod Identity Agent add-on hands the role's credentials to the pods.
    agent: Ref[AddonOut]
    tags: DesiredTags


@dataclass(frozen=True)
class IdentityLive:
    """What fmctl manages of an association."""

    role: Any
    tags: Tags


class PodIdentity(Kind[IdentityParams, IdentityOut, IdentityLive]):
    """An EKS Pod Identity association (Prometheus remote-writing to AMP)."""

    name, params, outputs = "eks-pod-identity", IdentityParams, IdentityOut
    policy = policies(role=Policy(How.UPDATE, "UpdatePodIdentityAssociation roleArn"))

    def _associations(self, ctx: Context) -> list[PodIdentityAssociationTypeDef]:
        def load() -> list[PodIdentityAssociationTypeDef]:
            if not cluster_ours(ctx):
                return []
            eks = ctx.aws.client("eks")
            out = []
            listed = eks.list_pod_identity_associations(clusterName=ctx.cluster)["associations"]
            for summary in listed:
                found = unless_gone(
                    functools.partial(
                        eks.describe_pod_identity_association,
                        clusterName=ctx.cluster,
                        associationId=summary["associationId"],
                    )
                )
                if found is not None:
                    out.append(found["association"])
            return out

        return ctx.cached("eks:pod-identities", load)

    def read(self, req: Request[IdentityParams]) -> Observed[IdentityOut, IdentityLive] | None:
        for item in self._associations(req.ctx):
            if (item["namespace"], item["serviceAccount"]) != (
                req.params.namespace,
                req.params.service_account,
            ):
                continue
            if (item.get("tags") or {}).get(OWNER_TAG) != req.ctx.cluster:
                raise Foreign(
                    f"service account {req.params.namespace}/{req.params.service_account} of "
                    f"{req.ctx.cluster} already has a Pod Identity association fmctl did not make "
                    f"({item['associationId']})",
                    hint="delete it, or let fmctl's Prometheus go without remote write",
                )
            live = IdentityLive(item["roleArn"], Tags.of(item.get("tags") or {}))
            aid = str(item["associationId"])
            return Observed(IdentityOut(aid), live, aid)
        return None

    def desired(
        self, req: Request[IdentityParams], observed: Observed[IdentityOut, IdentityLive]
    ) -> IdentityLive:
        return IdentityLive(
            req.ctx.resolve(req.params.role, "arn"),
            req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
        )

    def create(self, req: Request[IdentityParams]) -> IdentityOut:
        eks = req.ctx.aws.client("eks")

        def make() -> IdentityOut:
            item = eks.create_pod_identity_association(
                clusterName=req.ctx.cluster,
                namespace=req.params.namespace,
                serviceAccount=req.params.service_account,
                roleArn=req.ctx.get(req.params.role).arn,
                tags=req.params.tags.at_creation(),
                clientRequestToken=req.ctx.token(req.rid),
            )["association"]
            return IdentityOut(item["associationId"])

        def again() -> IdentityOut | None:
            req.ctx.forget("eks:pod-identities")
            found = self.read(req)
            return found.outputs if found else None

        return created_or_found(make, again)

    def update(
        self,
        req: Request[IdentityParams],
        observed: Observed[IdentityOut, IdentityLive],
        changes: Sequence[FieldChange],
    ) -> IdentityOut:
        eks = req.ctx.aws.client("eks")
        if any(c.path == "role" for c in changes):
            eks.update_pod_identity_association(
                clusterName=req.ctx.cluster,
                associationId=observed.id,
                roleArn=req.ctx.get(req.params.role).arn,
            )
        if any(c.path == "tags" for c in changes):
            arn = eks.describe_pod_identity_association(
                clusterName=req.ctx.cluster, associationId=observed.id
            )["association"]["associationArn"]
            eks_retag(req.ctx, arn, changes)
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        return [
            self.owned_item((item.get("tags") or {}).get(RESOURCE_TAG, "?"), item["associationId"])
            for item in self._associations(ctx)
            if (item.get("tags") or {}).get(OWNER_TAG) == ctx.cluster
        ]

    def delete(self, ctx: Context, owned: Owned) -> None:
        eks = ctx.aws.client("eks")
        unless_gone(
            lambda: eks.delete_pod_identity_association(
                clusterName=ctx.cluster, associationId=owned.id
            )
        )
