"""The tags fmctl keeps on the Auto Scaling group EKS runs a managed node group as: those
the Kubernetes Cluster Autoscaler reads (``catalog.autoscaler``: the discovery tag and the
node-template tags), on the groups of pools it sizes, and the one that lets the verify
controller replace a node that failed the verify gate (``catalog.eks_repair``). EKS does
not pass a node group's own tags on to its Auto Scaling group (aws/containers-roadmap#608),
so fmctl puts them there (CreateOrUpdateTags, not propagated to instances) and takes off
those it no longer wants (DeleteTags); the group goes with its node group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from provisioner.catalog import autoscaler
from provisioner.catalog.eks_repair import VERIFY_REPAIR_TAG
from provisioner.resources.context import Context
from provisioner.resources.errors import ResourceError

Held = frozenset[tuple[str, str]]


def asg_of(ng: Mapping[str, Any]) -> str | None:
    """The Auto Scaling group EKS runs a node group as (DescribeNodegroup's
    ``resources.autoScalingGroups``; absent until EKS has made it)."""
    groups = (ng.get("resources") or {}).get("autoScalingGroups") or []
    return str(groups[0]["name"]) if groups else None


def managed(key: str) -> bool:
    """A tag fmctl keeps on a node group's Auto Scaling group (the Cluster Autoscaler's, the
    verify controller's)."""
    return key in (autoscaler.DISCOVERY_TAG, VERIFY_REPAIR_TAG) or key.startswith(
        autoscaler.TEMPLATE_PREFIX
    )


def of_groups(ctx: Context, nodegroups: Sequence[Mapping[str, Any]]) -> dict[str, Held]:
    """fmctl's tags on the Auto Scaling group of each of ``nodegroups`` (DescribeNodegroup
    answers), by group name: one DescribeAutoScalingGroups for them all, once per run."""

    def load() -> dict[str, Held]:
        names = sorted({asg for ng in nodegroups if (asg := asg_of(ng))})
        if not names:
            return {}
        found: dict[str, Held] = {}
        pages = ctx.aws.client("autoscaling").get_paginator("describe_auto_scaling_groups")
        for page in pages.paginate(AutoScalingGroupNames=names):
            for group in page["AutoScalingGroups"]:
                found[group["AutoScalingGroupName"]] = frozenset(
                    (str(tag["Key"]), str(tag.get("Value", "")))
                    for tag in group.get("Tags") or []
                    if managed(str(tag["Key"]))
                )
        return found

    return ctx.cached("autoscaling:nodegroup-tags", load)


def retag(
    ctx: Context, rid: str, nodegroup: str, wanted: tuple[tuple[str, str], ...], held: Held
) -> None:
    """Put ``wanted`` on the node group's Auto Scaling group, and take off what of ``held``
    it no longer wants."""
    described = ctx.aws.client("eks").describe_nodegroup(
        clusterName=ctx.cluster, nodegroupName=nodegroup
    )
    asg = asg_of(described["nodegroup"])
    if asg is None:
        raise ResourceError(f"node group {nodegroup} has no Auto Scaling group to tag yet")
    client = ctx.aws.client("autoscaling")
    want = dict(wanted)
    kind = "auto-scaling-group"
    stale = sorted({k for k, _ in held} - set(want))
    if stale:
        client.delete_tags(
            Tags=[{"ResourceId": asg, "ResourceType": kind, "Key": k} for k in stale]
        )
    changed = sorted((k, v) for k, v in want.items() if (k, v) not in held)
    if changed:
        ctx.emit(rid, "updating", f"{len(changed)} tag(s) on Auto Scaling group {asg}")
        client.create_or_update_tags(
            Tags=[
                {
                    "ResourceId": asg,
                    "ResourceType": kind,
                    "Key": k,
                    "Value": v,
                    "PropagateAtLaunch": False,
                }
                for k, v in changed
            ]
        )
