"""An EKS upgrade over several minor versions, interleaved as EKS requires.

EKS moves the control plane one minor version at a time, and refuses UpdateClusterVersion
while any managed node group runs another version than the control plane ("all of your node
groups' Kubernetes versions must match the cluster's Kubernetes version in order to update
the cluster to a new Kubernetes version": botocore's EKS documentation of
UpdateClusterVersion); a node group may never be newer than its control plane
(UpdateNodegroupVersion). So 1.33 -> 1.35 is: control plane 1.34, every node group 1.34,
add-ons that 1.34 no longer offers to its default, then control plane 1.35 (the node group
and add-on kinds take the last minor themselves, after the cluster, in the plan's order).

Every step is decided from what EKS says now, never from what this run did before: a run
killed between any two steps finds the control plane, node groups and add-ons where the
last one left them, waits out an update still in flight, and goes on from there.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from provisioner.resources.context import Context
from provisioner.resources.eks_api import health, unless_gone
from provisioner.resources.errors import ResourceError
from provisioner.resources.launch_template import template_version
from provisioner.resources.tags import OWNER_TAG

if TYPE_CHECKING:
    from types_boto3_eks.type_defs import NodegroupTypeDef

#: A rolling update of a node group (every node replaced), and an add-on update: the node
#: group and add-on kinds' own figures.
NODEGROUP_UPDATE_SECONDS = 600.0
ADDON_UPDATE_SECONDS = 60.0
#: Statuses a node group or add-on is on its way out of: waited out before judging it.
_MOVING = ("CREATING", "UPDATING")


def no_surge(capacity_type: str, instance_type: str | None) -> bool:
    """A node group on an UltraServer Capacity Block: the block is the whole pool, so a
    rolling update has no room for its new node (AWS's EKS guide for P6e-GB200: scale the
    node group to 0 and back for a change that replaces nodes)."""
    from provisioner.catalog import load_catalog

    if capacity_type != "CAPACITY_BLOCK" or instance_type is None:
        return False
    itype = load_catalog().get(instance_type)
    return itype is not None and itype.ultra_server


def scale(ctx: Context, rid: str, name: str, low: int, high: int, desired: int) -> None:
    """UpdateNodegroupConfig's scaling, and the node group ACTIVE again."""
    ctx.emit(rid, "updating", f"node group {name}: scaling to {desired} (no surge room)")
    ctx.aws.client("eks").update_nodegroup_config(
        clusterName=ctx.cluster,
        nodegroupName=name,
        scalingConfig={"minSize": low, "maxSize": high, "desiredSize": desired},
    )
    settled_nodegroup(ctx, rid, name)


def instance_type_of(ctx: Context, ng: Mapping[str, Any]) -> str | None:
    """A node group's instance type: its launch template's, or its own list's first."""
    template = ng.get("launchTemplate") or {}
    if not template.get("id"):
        types = ng.get("instanceTypes") or []
        return str(types[0]) if types else None
    data = template_version(ctx, template["id"], str(template.get("version", "$Default")))
    return None if data is None else data.get("InstanceType")


def minor(version: str) -> tuple[int, int]:
    """(major, minor) of a Kubernetes version."""
    major, rest = version.split(".")[:2]
    return int(major), int(rest)


def catch_up(ctx: Context, rid: str, version: str) -> None:
    """Bring what must follow the control plane to ``version`` before it moves on: every
    managed node group, then the add-ons ``version`` does not offer their version for."""
    for name in _nodegroups(ctx):
        _nodegroup_to(ctx, rid, name, version)
    for name in _addons(ctx):
        _addon_to(ctx, rid, name, version)


def _nodegroups(ctx: Context) -> list[str]:
    eks = ctx.aws.client("eks")
    pages = eks.get_paginator("list_nodegroups").paginate(clusterName=ctx.cluster)
    return sorted(name for page in pages for name in page["nodegroups"])


def _addons(ctx: Context) -> list[str]:
    eks = ctx.aws.client("eks")
    pages = eks.get_paginator("list_addons").paginate(clusterName=ctx.cluster)
    return sorted(name for page in pages for name in page["addons"])


def settled_nodegroup(ctx: Context, rid: str, name: str) -> NodegroupTypeDef | None:
    """The node group once no update of it is in flight (None: it is gone)."""
    eks = ctx.aws.client("eks")
    describe = functools.partial(
        eks.describe_nodegroup, clusterName=ctx.cluster, nodegroupName=name
    )
    now = unless_gone(describe)
    if now is None or now["nodegroup"]["status"] not in _MOVING:
        return None if now is None else now["nodegroup"]

    def probe() -> list[NodegroupTypeDef] | None:
        """[the group] once settled, [] once gone, None while an update is in flight."""
        found = unless_gone(describe)
        if found is None:
            return []
        ng = found["nodegroup"]
        if ng["status"] in _MOVING:
            return None
        return [ng]

    settled = ctx.wait_until(
        f"node group {name} to finish its update", probe, NODEGROUP_UPDATE_SECONDS, 3600, rid
    )
    return settled[0] if settled else None


def _nodegroup_to(ctx: Context, rid: str, name: str, version: str) -> None:
    ng = settled_nodegroup(ctx, rid, name)
    if ng is None or minor(str(ng["version"])) >= minor(version):
        return
    if (ng.get("tags") or {}).get(OWNER_TAG) != ctx.cluster:
        # Nothing foreign is touched: EKS will not move the cluster past it either.
        raise ResourceError(
            f"node group {name} is not fmctl's and runs Kubernetes {ng['version']}: EKS "
            f"upgrades the cluster past {version} only once every node group runs {version}",
            hint=f"aws eks update-nodegroup-version --cluster-name {ctx.cluster} "
            f"--nodegroup-name {name} --kubernetes-version {version}, then `fmctl up` again",
        )
    if ng["status"] != "ACTIVE":
        raise ResourceError(f"node group {name} is {ng['status']}: {health(ng)}")
    eks = ctx.aws.client("eks")
    sizes = ng.get("scalingConfig") or {}
    stop = no_surge(str(ng.get("capacityType", "")), instance_type_of(ctx, ng)) and int(
        sizes.get("desiredSize", 0)
    )
    if stop:
        scale(ctx, rid, name, 0, int(sizes.get("maxSize", 1)), 0)
    ctx.emit(rid, "updating", f"node group {name} {ng['version']} -> {version} (rolling update)")
    eks.update_nodegroup_version(
        clusterName=ctx.cluster,
        nodegroupName=name,
        version=version,
        clientRequestToken=ctx.token(f"{rid}/nodegroup/{name}/{version}"),
    )
    after = settled_nodegroup(ctx, rid, name)
    if after is not None and after["status"] != "ACTIVE":
        raise ResourceError(f"node group {name} is {after['status']}: {health(after)}")
    if stop:
        low, high = int(sizes.get("minSize", 0)), int(sizes.get("maxSize", 1))
        scale(ctx, rid, name, low, high, int(sizes.get("desiredSize", 0)))


def _offered(ctx: Context, addon: str, version: str) -> tuple[set[str], str | None]:
    """The versions of ``addon`` EKS offers for Kubernetes ``version``, and its default."""
    eks = ctx.aws.client("eks")
    pages = eks.get_paginator("describe_addon_versions").paginate(
        addonName=addon, kubernetesVersion=version
    )
    offered: set[str] = set()
    default = None
    for page in pages:
        for item in page["addons"]:
            for v in item["addonVersions"]:
                for c in v.get("compatibilities", []):
                    if c.get("clusterVersion") == version:
                        offered.add(str(v["addonVersion"]))
                        if c.get("defaultVersion"):
                            default = str(v["addonVersion"])
    return offered, default


def _addon_to(ctx: Context, rid: str, addon: str, version: str) -> None:
    eks = ctx.aws.client("eks")
    describe = functools.partial(eks.describe_addon, clusterName=ctx.cluster, addonName=addon)
    found = unless_gone(describe)
    if found is None:
        return
    item = found["addon"]
    if (item.get("tags") or {}).get(OWNER_TAG) != ctx.cluster:
        return  # not fmctl's: its owner keeps it compatible
    offered, default = _offered(ctx, addon, version)
    if str(item["addonVersion"]) in offered or default is None:
        return
    ctx.emit(rid, "updating", f"add-on {addon} {item['addonVersion']} -> {default} ({version})")
    eks.update_addon(
        clusterName=ctx.cluster,
        addonName=addon,
        addonVersion=default,
        resolveConflicts="OVERWRITE",
        clientRequestToken=ctx.token(f"{rid}/addon/{addon}/{default}"),
    )

    def probe() -> bool | None:
        now = unless_gone(describe)
        if now is None:
            return True
        status = now["addon"]["status"]
        if status in ("DEGRADED", "UPDATE_FAILED", "CREATE_FAILED"):
            raise ResourceError(f"add-on {addon} is {status}: {health(now['addon'])}")
        return True if status == "ACTIVE" else None

    ctx.wait_until(f"add-on {addon} on {default}", probe, ADDON_UPDATE_SECONDS, 1800, rid)
