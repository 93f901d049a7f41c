"""The sandbox EKS's node groups, add-ons (with their versions) and access entries: the
handlers of their operations, on the state in ``sandbox.eks.Eks``."""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import parse_qs

from fmctl_sandbox import protocol as p
from fmctl_sandbox.eks_model import (
    ADDONS,
    AMI_TYPES,
    CAPACITY_TYPES,
    VERSIONS,
    EksError,
    EksState,
    Item,
    active,
    addon_default,
    addon_versions,
    child,
    children,
    minor,
    now,
    start_delete,
    start_update,
    template_data,
)


# -- node groups ---------------------------------------------------------------------------
def _create_nodegroup(s: EksState, call: p.Call, base: str, cluster: str) -> dict[str, Any]:
    q, region = call.params, call.region
    active(s, region, cluster)
    cluster_version = s._cluster(region, cluster).data["version"]
    name = q["nodegroupName"]
    if (region, cluster, name) in s.nodegroups:
        raise EksError(409, "ResourceInUseException", f"NodeGroup already exists with name {name}")
    capacity = q.get("capacityType", "ON_DEMAND")
    if capacity not in CAPACITY_TYPES or q.get("amiType", AMI_TYPES[0]) not in AMI_TYPES:
        raise EksError(400, "InvalidParameterException", "capacityType or amiType not supported")
    if "nodeRepairConfig" in q:
        _check_repair(q["nodeRepairConfig"])
    data = template_data(s.account, region, q.get("launchTemplate"))
    if data is not None:
        _check_template(data, q, capacity)
    elif capacity == "CAPACITY_BLOCK":
        raise EksError(
            400, "InvalidParameterException", "CAPACITY_BLOCK node groups need a launch template"
        )
    ng: dict[str, Any] = {
        **{
            k: q[k]
            for k in (
                "nodegroupName",
                "scalingConfig",
                "subnets",
                "nodeRole",
                "labels",
                "taints",
                "launchTemplate",
                "instanceTypes",
                "updateConfig",
                "nodeRepairConfig",
            )
            if k in q
        },
        "clusterName": cluster,
        "nodegroupArn": (
            f"arn:aws:eks:{region}:{s.account}:nodegroup/{cluster}/{name}/{uuid.uuid4()}"
        ),
        "capacityType": capacity,
        "amiType": q.get("amiType", "AL2023_x86_64_STANDARD"),
        # EKS: "If you don't specify a Kubernetes version, the cluster's is used"; a node
        # group may not run a newer one than its cluster.
        "version": _nodegroup_version(q.get("version"), cluster_version),
        "status": "CREATING",
        "createdAt": now(),
        "tags": q.get("tags", {}),
        "health": {"issues": []},
        "resources": {"autoScalingGroups": [{"name": f"eks-{name}-{uuid.uuid4().hex[:8]}"}]},
    }
    s.nodegroups[(region, cluster, name)] = Item(ng, s._after("nodegroup-create"))
    return {"nodegroup": ng}


#: NodeRepairConfig's pairs of which a request may set one (botocore's EKS model: "When
#: using this, you cannot also set ... at the same time").
_REPAIR_EXCLUSIVE = (
    ("maxUnhealthyNodeThresholdCount", "maxUnhealthyNodeThresholdPercentage"),
    ("maxParallelNodesRepairedCount", "maxParallelNodesRepairedPercentage"),
)
#: A NodeRepairConfigOverride: "If you use this, you must specify all the values".
_OVERRIDE_FIELDS = (
    "nodeMonitoringCondition",
    "nodeUnhealthyReason",
    "minRepairWaitTimeMins",
    "repairAction",
)


def _check_repair(config: dict[str, Any]) -> None:
    """What EKS refuses in a nodeRepairConfig (botocore's EKS model, NodeRepairConfig)."""
    bad = "InvalidParameterException"
    for count, share in _REPAIR_EXCLUSIVE:
        if count in config and share in config:
            raise EksError(400, bad, f"{count} and {share} cannot both be set")
    for key in ("maxParallelNodesRepairedCount", "maxUnhealthyNodeThresholdCount"):
        if key in config and int(config[key]) < 1:
            raise EksError(400, bad, f"{key} must be at least 1")
    for override in config.get("nodeRepairConfigOverrides") or []:
        missing = [f for f in _OVERRIDE_FIELDS if f not in override]
        if missing:
            raise EksError(400, bad, f"nodeRepairConfigOverrides needs {', '.join(missing)}")
        if override["repairAction"] not in ("Replace", "Reboot", "NoAction"):
            raise EksError(400, bad, f"repairAction {override['repairAction']} is not valid")


def _nodegroup_version(asked: str | None, cluster_version: str) -> str:
    version = asked or cluster_version
    if minor(version) > minor(cluster_version):
        raise EksError(
            400,
            "InvalidParameterException",
            f"Requested Nodegroup Kubernetes version {version} is newer than the cluster's "
            f"{cluster_version}",
        )
    return version


def _check_template(data: dict[str, Any], q: dict[str, Any], capacity: str) -> None:
    """What EKS refuses in a managed node group's launch template."""
    bad = "InvalidParameterException"
    if any("SubnetId" in i for i in data.get("NetworkInterfaces") or []):
        raise EksError(400, bad, "Launch template network interfaces must not specify SubnetId")
    if data.get("IamInstanceProfile"):
        raise EksError(400, bad, "Launch template must not specify an IamInstanceProfile")
    if data.get("InstanceType") and q.get("instanceTypes"):
        raise EksError(400, bad, "Instance types are in both the launch template and the request")
    market = (data.get("InstanceMarketOptions") or {}).get("MarketType")
    if capacity == "CAPACITY_BLOCK" and market != "capacity-block":
        raise EksError(
            400,
            bad,
            "CAPACITY_BLOCK needs InstanceMarketOptions.MarketType "
            "capacity-block in the launch template",
        )


def _nodegroup(s: EksState, region: str, cluster: str, name: str) -> Item:
    return child(s.nodegroups, (region, cluster, name), f"No node group found for name: {name}.")


def _describe_nodegroup(s: EksState, call: p.Call, base: str, cluster: str, name: str) -> Any:
    return {"nodegroup": _nodegroup(s, call.region, cluster, name).data}


def _list_nodegroups(s: EksState, call: p.Call, base: str, cluster: str) -> dict[str, Any]:
    s._cluster(call.region, cluster)
    return {"nodegroups": children(s.nodegroups, call.region, cluster)}


def _delete_nodegroup(s: EksState, call: p.Call, base: str, cluster: str, name: str) -> Any:
    item = _nodegroup(s, call.region, cluster, name)
    start_delete(s, item, "nodegroup-delete")
    s.cordon(call.region, cluster, name)
    return {"nodegroup": item.data}


def _update_nodegroup_config(s: EksState, call: p.Call, base: str, cluster: str, name: str) -> Any:
    """Scaling, labels, taints, update config, node auto repair; the nodes follow once it
    lands."""
    q, region = call.params, call.region
    item = _nodegroup(s, region, cluster, name)
    ng = item.data
    changes: dict[str, Any] = {}
    params: list[tuple[str, Any]] = []
    if "scalingConfig" in q:
        scaling = {**ng["scalingConfig"], **q["scalingConfig"]}
        low, high, want = scaling["minSize"], scaling["maxSize"], scaling["desiredSize"]
        if not (0 <= low <= want <= high) or high < 1:
            raise EksError(
                400,
                "InvalidParameterException",
                "desired size must be between min and max size, and max size at least 1",
            )
        changes["scalingConfig"] = scaling
        params += [("MinSize", low), ("MaxSize", high), ("DesiredSize", want)]
    if "labels" in q:
        labels = dict(ng.get("labels") or {})
        labels.update(q["labels"].get("addOrUpdateLabels") or {})
        for key in q["labels"].get("removeLabels") or []:
            labels.pop(key, None)
        changes["labels"] = labels
        params.append(("LabelsToAdd", q["labels"].get("addOrUpdateLabels")))
    if "taints" in q:
        gone = {(t["key"], t["effect"]) for t in q["taints"].get("removeTaints") or []}
        added = q["taints"].get("addOrUpdateTaints") or []
        keys = {(t["key"], t["effect"]) for t in added}
        taints = [t for t in ng.get("taints") or [] if (t["key"], t["effect"]) not in gone | keys]
        changes["taints"] = taints + list(added)
        params.append(("TaintsToAdd", added))
    if "updateConfig" in q:
        changes["updateConfig"] = q["updateConfig"]
        params.append(("MaxUnavailable", q["updateConfig"].get("maxUnavailable")))
    if "nodeRepairConfig" in q:
        _check_repair(q["nodeRepairConfig"])
        changes["nodeRepairConfig"] = q["nodeRepairConfig"]
        params.append(("NodeRepairEnabled", q["nodeRepairConfig"].get("enabled")))
    if not changes:
        raise EksError(400, "InvalidParameterException", "no change requested")
    update = start_update(
        s,
        item,
        "ConfigUpdate",
        params,
        changes,
        "nodegroup-config",
        lambda: s.sync_nodes(region, ng),
    )
    return {"update": update}


def _update_nodegroup_version(s: EksState, call: p.Call, base: str, cluster: str, name: str) -> Any:
    """A rolling update to a Kubernetes version or a launch template version: every node is
    replaced once it lands."""
    q, region = call.params, call.region
    item = _nodegroup(s, region, cluster, name)
    ng = item.data
    changes: dict[str, Any] = {}
    params: list[tuple[str, Any]] = []
    cluster_version = s._cluster(region, cluster).data["version"]
    if q.get("version"):
        version = q["version"]
        if minor(version) > minor(cluster_version) or minor(version) < minor(ng["version"]):
            raise EksError(
                400,
                "InvalidParameterException",
                f"Requested Nodegroup Kubernetes version {version} is not between the node "
                f"group's {ng['version']} and the cluster's {cluster_version}",
            )
        changes["version"] = version
        params.append(("Version", version))
    if q.get("launchTemplate"):
        asked = q["launchTemplate"]
        current = ng.get("launchTemplate") or {}
        if not current or asked.get("id", current.get("id")) != current.get("id"):
            raise EksError(
                400,
                "InvalidParameterException",
                "a node group updates to a version of the launch template it was made with",
            )
        template_data(s.account, region, {"id": current["id"], "version": asked.get("version")})
        changes["launchTemplate"] = {**current, "version": str(asked.get("version"))}
        params.append(("LaunchTemplateVersion", asked.get("version")))
    if not changes:
        changes["version"] = cluster_version  # the latest AMI of the cluster's version
        params.append(("Version", cluster_version))
    update = start_update(
        s,
        item,
        "VersionUpdate",
        params,
        changes,
        "nodegroup-version",
        lambda: s.sync_nodes(region, ng, fresh=True),
    )
    full = _no_surge_room(s, region, ng, changes.get("launchTemplate") or ng.get("launchTemplate"))
    if full is not None and item.pending is not None:
        item.pending.fails = [{"errorCode": "NodeCreationFailure", "errorMessage": full}]
    return {"update": update}


def _no_surge_room(
    s: EksState, region: str, ng: dict[str, Any], lt: dict[str, Any] | None
) -> str | None:
    """Why a rolling update of this node group cannot launch its first new node, or None.
    EKS's rolling update scales the group up before it drains old nodes (the EKS User
    Guide, "Managed node update behavior": the scale-up phase adds new nodes first); on a
    Capacity Block, or an ODCR its launch template targets, that the group already fills
    there is no instance to add."""
    data = template_data(s.account, region, lt) if lt and lt.get("id") else None
    target = ((data or {}).get("CapacityReservationSpecification") or {}).get(
        "CapacityReservationTarget"
    ) or {}
    rid = target.get("CapacityReservationId")
    found = s.reservation(region, rid) if rid else None
    if found is None:
        return None
    total = int(found.get("totalInstanceCount", 0))
    desired = int((ng.get("scalingConfig") or {}).get("desiredSize", 0))
    if desired == 0 or desired < total:
        return None
    kind = "Capacity Block" if ng.get("capacityType") == "CAPACITY_BLOCK" else "reservation"
    return (
        f"InsufficientInstanceCapacity: {kind} {rid} holds {total} instances and the "
        f"node group runs {desired}: no room for the update's new node"
    )


# -- add-ons -------------------------------------------------------------------------------
def _addon_versions(s: EksState, call: p.Call, base: str) -> dict[str, Any]:
    query = parse_qs(call.params.get("_query", ""))
    version = query.get("kubernetesVersion", [""])[0]
    only = query.get("addonName", [""])[0]
    out = []
    for name in sorted(ADDONS):
        if only and name != only:
            continue
        clusters = [version] if version else list(VERSIONS)
        out.append(
            {
                "addonName": name,
                "type": "networking",
                "owner": "aws",
                "addonVersions": [
                    {
                        "addonVersion": v,
                        "architecture": ["amd64", "arm64"],
                        "compatibilities": [
                            {"clusterVersion": cv, "defaultVersion": addon_default(name, cv) == v}
                            for cv in clusters
                            if _compatible(name, v, cv)
                        ],
                    }
                    for v in addon_versions(name)
                    if any(_compatible(name, v, cv) for cv in clusters)
                ],
            }
        )
    return {"addons": out}


def _compatible(addon: str, version: str, cluster_version: str) -> bool:
    """kube-proxy runs the cluster's own minor; the rest run on every supported version."""
    if addon != "kube-proxy":
        return True
    return version.startswith(f"v{cluster_version}.")


def _create_addon(s: EksState, call: p.Call, base: str, cluster: str) -> dict[str, Any]:
    q, region = call.params, call.region
    active(s, region, cluster)
    name = q["addonName"]
    if name not in ADDONS:
        raise EksError(404, "ResourceNotFoundException", f"Addon {name} is not supported")
    if (region, cluster, name) in s.addons:
        raise EksError(409, "ResourceInUseException", f"Addon already exists: {name}")
    cluster_version = s._cluster(region, cluster).data["version"]
    version = q.get("addonVersion") or addon_default(name, cluster_version)
    _check_addon_version(name, version, cluster_version)
    data = {
        "addonName": name,
        "clusterName": cluster,
        "status": "CREATING",
        "addonVersion": version,
        "health": {"issues": []},
        "addonArn": f"arn:aws:eks:{region}:{s.account}:addon/{cluster}/{name}/{uuid.uuid4()}",
        "createdAt": now(),
        "tags": q.get("tags", {}),
        "podIdentityAssociations": [
            a.get("roleArn", "") for a in q.get("podIdentityAssociations", [])
        ],
    }
    if "configurationValues" in q:
        data["configurationValues"] = _checked_configuration(name, q["configurationValues"])
    s.addons[(region, cluster, name)] = Item(data, s._after("addon-create"))
    return {"addon": data}


def _checked_configuration(name: str, text: str) -> str:
    """EKS checks configuration values against the add-on version's JSON schema
    (DescribeAddonConfiguration) and answers InvalidParameterException; here: JSON objects
    only."""
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise EksError(
            400, "InvalidParameterException", f"ConfigurationValue is not valid JSON: {exc}"
        ) from exc
    if not isinstance(parsed, dict):
        raise EksError(400, "InvalidParameterException", f"{name}: configuration must be an object")
    return text


def _check_addon_version(name: str, version: str, cluster_version: str) -> None:
    if version not in addon_versions(name) or not _compatible(name, version, cluster_version):
        raise EksError(
            400,
            "InvalidParameterException",
            f"Addon version {version} is not supported for {name} on {cluster_version}",
        )


def _addon(s: EksState, region: str, cluster: str, name: str) -> Item:
    return child(s.addons, (region, cluster, name), f"No addon: {name} found in cluster")


def _describe_addon(s: EksState, call: p.Call, base: str, cluster: str, name: str) -> Any:
    return {"addon": _addon(s, call.region, cluster, name).data}


def _list_addons(s: EksState, call: p.Call, base: str, cluster: str) -> dict[str, Any]:
    s._cluster(call.region, cluster)
    return {"addons": children(s.addons, call.region, cluster)}


def _update_addon(s: EksState, call: p.Call, base: str, cluster: str, name: str) -> Any:
    q, region = call.params, call.region
    item = _addon(s, region, cluster, name)
    cluster_version = s._cluster(region, cluster).data["version"]
    version = q.get("addonVersion") or item.data["addonVersion"]
    _check_addon_version(name, version, cluster_version)
    changes: dict[str, Any] = {"addonVersion": version}
    if "configurationValues" in q:
        changes["configurationValues"] = _checked_configuration(name, q["configurationValues"])
    if "podIdentityAssociations" in q:
        changes["podIdentityAssociations"] = [
            a.get("roleArn", "") for a in q["podIdentityAssociations"]
        ]
    update = start_update(
        s, item, "AddonUpdate", [("AddonVersion", version)], changes, "addon-update"
    )
    return {"update": update}


def _delete_addon(s: EksState, call: p.Call, base: str, cluster: str, name: str) -> Any:
    item = _addon(s, call.region, cluster, name)
    start_delete(s, item, "addon-delete")
    return {"addon": item.data}


# -- access entries ------------------------------------------------------------------------
def access_entry(
    account: str, region: str, cluster: str, principal: str, kind: str, tags: dict[str, str]
) -> dict[str, Any]:
    """An access entry as EKS describes it (and the policies associated with it)."""
    return {
        "clusterName": cluster,
        "principalArn": principal,
        "type": kind,
        "kubernetesGroups": [],
        "createdAt": now(),
        "tags": tags,
        "accessEntryArn": f"arn:aws:eks:{region}:{account}:access-entry/{cluster}/{uuid.uuid4()}",
        "policies": [],
    }


def _create_access(s: EksState, call: p.Call, base: str, cluster: str) -> dict[str, Any]:
    q, region = call.params, call.region
    s._cluster(region, cluster)
    key = (region, cluster, q["principalArn"])
    if key in s.access:
        raise EksError(
            409,
            "ResourceInUseException",
            "The specified access entry resource is already in use on this cluster.",
        )
    kind = q.get("type", "STANDARD")
    if kind not in ("STANDARD", "EC2_LINUX", "EC2_WINDOWS", "FARGATE_LINUX"):
        raise EksError(400, "InvalidParameterException", f"type {kind} is not supported")
    s.access[key] = access_entry(
        s.account, region, cluster, q["principalArn"], kind, q.get("tags", {})
    )
    return {"accessEntry": _public(s.access[key])}


def _public(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k != "policies"}


def _access(s: EksState, region: str, cluster: str, principal: str) -> dict[str, Any]:
    entry = s.access.get((region, cluster, principal))
    if entry is None:
        raise EksError(
            404,
            "ResourceNotFoundException",
            "The specified access entry resource could not be found.",
        )
    return entry


def _describe_access(s: EksState, call: p.Call, base: str, cluster: str, principal: str) -> Any:
    return {"accessEntry": _public(_access(s, call.region, cluster, principal))}


def _list_access(s: EksState, call: p.Call, base: str, cluster: str) -> dict[str, Any]:
    s._cluster(call.region, cluster)
    return {"accessEntries": children(s.access, call.region, cluster)}


def _delete_access(s: EksState, call: p.Call, base: str, cluster: str, principal: str) -> Any:
    _access(s, call.region, cluster, principal)
    del s.access[(call.region, cluster, principal)]
    return {}


def _associate(s: EksState, call: p.Call, base: str, cluster: str, principal: str) -> Any:
    entry = _access(s, call.region, cluster, principal)
    policy = {"policyArn": call.params["policyArn"], "accessScope": call.params["accessScope"]}
    if policy not in entry["policies"]:
        entry["policies"].append(policy)
    return {"clusterName": cluster, "principalArn": principal, "associatedAccessPolicy": policy}


def _disassociate(
    s: EksState, call: p.Call, base: str, cluster: str, principal: str, policy: str
) -> Any:
    from urllib.parse import unquote

    entry = _access(s, call.region, cluster, principal)
    entry["policies"] = [x for x in entry["policies"] if x["policyArn"] != unquote(policy)]
    return {}


def _list_policies(s: EksState, call: p.Call, base: str, cluster: str, principal: str) -> Any:
    entry = _access(s, call.region, cluster, principal)
    return {
        "clusterName": cluster,
        "principalArn": principal,
        "associatedAccessPolicies": entry["policies"],
    }


#: Operation -> handler, for what this module serves.
HANDLERS: dict[str, Any] = {
    "CreateNodegroup": _create_nodegroup,
    "ListNodegroups": _list_nodegroups,
    "DescribeNodegroup": _describe_nodegroup,
    "UpdateNodegroupConfig": _update_nodegroup_config,
    "UpdateNodegroupVersion": _update_nodegroup_version,
    "DeleteNodegroup": _delete_nodegroup,
    "DescribeAddonVersions": _addon_versions,
    "CreateAddon": _create_addon,
    "ListAddons": _list_addons,
    "DescribeAddon": _describe_addon,
    "UpdateAddon": _update_addon,
    "DeleteAddon": _delete_addon,
    "CreateAccessEntry": _create_access,
    "ListAccessEntries": _list_access,
    "DescribeAccessEntry": _describe_access,
    "DeleteAccessEntry": _delete_access,
    "AssociateAccessPolicy": _associate,
    "ListAssociatedAccessPolicies": _list_policies,
    "DisassociateAccessPolicy": _disassociate,
}
