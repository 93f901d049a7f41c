"""The sandbox EKS's node groups, add-ons (with their versions) and access entries: the
handlers of their operations, on the state in ``sandbox.eks.Eks``."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from provisioner.sandbox import protocol as p
from provisioner.sandbox.eks_model import (
    ACCOUNT,
    ADDONS,
    AMI_TYPES,
    CAPACITY_TYPES,
    VERSIONS,
    EksError,
    Item,
    active,
    child,
    children,
    now,
    start_delete,
    template_data,
)

if TYPE_CHECKING:
    from provisioner.sandbox.eks import Eks


# -- node groups ---------------------------------------------------------------------------
def _create_nodegroup(s: Eks, call: p.Call, base: str, cluster: str) -> dict[str, Any]:
    q, region = call.params, call.region
    active(s, region, cluster)
    name = q["nodegroupName"]
    if (region, cluster, name) in s.nodegroups:
        raise EksError(409, "ResourceInUseException", f"NodeGroup already exists with name {name}")
    capacity = q.get("capacityType", "ON_DEMAND")
    if capacity not in CAPACITY_TYPES or q.get("amiType", AMI_TYPES[0]) not in AMI_TYPES:
        raise EksError(400, "InvalidParameterException", "capacityType or amiType not supported")
    data = template_data(region, q.get("launchTemplate"))
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
            )
            if k in q
        },
        "clusterName": cluster,
        "nodegroupArn": f"arn:aws:eks:{region}:{ACCOUNT}:nodegroup/{cluster}/{name}/{uuid.uuid4()}",
        "capacityType": capacity,
        "amiType": q.get("amiType", "AL2023_x86_64_STANDARD"),
        "status": "CREATING",
        "createdAt": now(),
        "tags": q.get("tags", {}),
        "health": {"issues": []},
        "resources": {"autoScalingGroups": [{"name": f"eks-{name}-{uuid.uuid4().hex[:8]}"}]},
    }
    s.nodegroups[(region, cluster, name)] = Item(ng, s._after("nodegroup-create"))
    return {"nodegroup": ng}


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


def _nodegroup(s: Eks, region: str, cluster: str, name: str) -> Item:
    return child(s.nodegroups, (region, cluster, name), f"No node group found for name: {name}.")


def _describe_nodegroup(s: Eks, call: p.Call, base: str, cluster: str, name: str) -> Any:
    return {"nodegroup": _nodegroup(s, call.region, cluster, name).data}


def _list_nodegroups(s: Eks, call: p.Call, base: str, cluster: str) -> dict[str, Any]:
    s._cluster(call.region, cluster)
    return {"nodegroups": children(s.nodegroups, call.region, cluster)}


def _delete_nodegroup(s: Eks, call: p.Call, base: str, cluster: str, name: str) -> Any:
    item = _nodegroup(s, call.region, cluster, name)
    start_delete(s, item, "nodegroup-delete")
    return {"nodegroup": item.data}


# -- add-ons -------------------------------------------------------------------------------
def _addon_versions(s: Eks, call: p.Call, base: str) -> dict[str, Any]:
    query = parse_qs(call.params.get("_query", ""))
    version = query.get("kubernetesVersion", [""])[0]
    only = query.get("addonName", [""])[0]
    out = []
    for name, (versions, _) in sorted(ADDONS.items()):
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
                            {"clusterVersion": cv, "defaultVersion": i == 0} for cv in clusters
                        ],
                    }
                    for i, v in enumerate(versions)
                ],
            }
        )
    return {"addons": out}


def _create_addon(s: Eks, call: p.Call, base: str, cluster: str) -> dict[str, Any]:
    q, region = call.params, call.region
    active(s, region, cluster)
    name = q["addonName"]
    if name not in ADDONS:
        raise EksError(404, "ResourceNotFoundException", f"Addon {name} is not supported")
    if (region, cluster, name) in s.addons:
        raise EksError(409, "ResourceInUseException", f"Addon already exists: {name}")
    version = q.get("addonVersion") or ADDONS[name][0][0]
    if version not in ADDONS[name][0]:
        raise EksError(
            400, "InvalidParameterException", f"Addon version {version} is not supported for {name}"
        )
    data = {
        "addonName": name,
        "clusterName": cluster,
        "status": "CREATING",
        "addonVersion": version,
        "health": {"issues": []},
        "addonArn": f"arn:aws:eks:{region}:{ACCOUNT}:addon/{cluster}/{name}/{uuid.uuid4()}",
        "createdAt": now(),
        "tags": q.get("tags", {}),
        "podIdentityAssociations": [
            a.get("roleArn", "") for a in q.get("podIdentityAssociations", [])
        ],
    }
    s.addons[(region, cluster, name)] = Item(data, s._after("addon-create"))
    return {"addon": data}


def _addon(s: Eks, region: str, cluster: str, name: str) -> Item:
    return child(s.addons, (region, cluster, name), f"No addon: {name} found in cluster")


def _describe_addon(s: Eks, call: p.Call, base: str, cluster: str, name: str) -> Any:
    return {"addon": _addon(s, call.region, cluster, name).data}


def _list_addons(s: Eks, call: p.Call, base: str, cluster: str) -> dict[str, Any]:
    s._cluster(call.region, cluster)
    return {"addons": children(s.addons, call.region, cluster)}


def _delete_addon(s: Eks, call: p.Call, base: str, cluster: str, name: str) -> Any:
    item = _addon(s, call.region, cluster, name)
    start_delete(s, item, "addon-delete")
    return {"addon": item.data}


# -- access entries ------------------------------------------------------------------------
def access_entry(
    region: str, cluster: str, principal: str, kind: str, tags: dict[str, str]
) -> dict[str, Any]:
    """An access entry as EKS describes it (and the policies associated with it)."""
    return {
        "clusterName": cluster,
        "principalArn": principal,
        "type": kind,
        "kubernetesGroups": [],
        "createdAt": now(),
        "tags": tags,
        "accessEntryArn": f"arn:aws:eks:{region}:{ACCOUNT}:access-entry/{cluster}/{uuid.uuid4()}",
        "policies": [],
    }


def _create_access(s: Eks, call: p.Call, base: str, cluster: str) -> dict[str, Any]:
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
    s.access[key] = access_entry(region, cluster, q["principalArn"], kind, q.get("tags", {}))
    return {"accessEntry": _public(s.access[key])}


def _public(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k != "policies"}


def _access(s: Eks, region: str, cluster: str, principal: str) -> dict[str, Any]:
    entry = s.access.get((region, cluster, principal))
    if entry is None:
        raise EksError(
            404,
            "ResourceNotFoundException",
            "The specified access entry resource could not be found.",
        )
    return entry


def _describe_access(s: Eks, call: p.Call, base: str, cluster: str, principal: str) -> Any:
    return {"accessEntry": _public(_access(s, call.region, cluster, principal))}


def _list_access(s: Eks, call: p.Call, base: str, cluster: str) -> dict[str, Any]:
    s._cluster(call.region, cluster)
    return {"accessEntries": children(s.access, call.region, cluster)}


def _delete_access(s: Eks, call: p.Call, base: str, cluster: str, principal: str) -> Any:
    _access(s, call.region, cluster, principal)
    del s.access[(call.region, cluster, principal)]
    return {}


def _associate(s: Eks, call: p.Call, base: str, cluster: str, principal: str) -> Any:
    entry = _access(s, call.region, cluster, principal)
    policy = {"policyArn": call.params["policyArn"], "accessScope": call.params["accessScope"]}
    if policy not in entry["policies"]:
        entry["policies"].append(policy)
    return {"clusterName": cluster, "principalArn": principal, "associatedAccessPolicy": policy}


def _list_policies(s: Eks, call: p.Call, base: str, cluster: str, principal: str) -> Any:
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
    "DeleteNodegroup": _delete_nodegroup,
    "DescribeAddonVersions": _addon_versions,
    "CreateAddon": _create_addon,
    "ListAddons": _list_addons,
    "DescribeAddon": _describe_addon,
    "DeleteAddon": _delete_addon,
    "CreateAccessEntry": _create_access,
    "ListAccessEntries": _list_access,
    "DescribeAccessEntry": _describe_access,
    "DeleteAccessEntry": _delete_access,
    "AssociateAccessPolicy": _associate,
    "ListAssociatedAccessPolicies": _list_policies,
}
