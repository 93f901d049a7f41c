"""Amazon EKS for the sandbox: clusters, managed node groups, add-ons and access entries,
with their lifecycles, and a Kubernetes API per cluster (``sandbox.kube``).

moto has EKS clusters and node groups but they are ACTIVE at once, drop ``accessConfig``, and
moto has no add-ons, add-on versions or access entries (FACTS.md). A lifecycle that takes no
time would hide the very thing the plan's order is about (add-ons after nodes), so the
sandbox owns EKS whole, in the REST-JSON shapes botocore parses, and refuses what EKS
refuses where fmctl could get it wrong:

- a cluster whose subnets are not in two availability zones, or an unsupported version;
- a node group on a cluster that is not ACTIVE; ``CAPACITY_BLOCK`` without a launch template
  whose market type is ``capacity-block``; a launch template with a subnet in its interfaces
  or an instance profile (EKS manages both); instance types both in the template and the call;
- an add-on version not offered for the cluster's version; add-ons that run pods go DEGRADED
  when the cluster has no node group ACTIVE (the reason fmctl creates them after the nodes);
- deleting a cluster that still has node groups.

Node groups that become ACTIVE join their nodes to the cluster's Kubernetes API, with the
GPUs of their instance type (from the catalog) and one EFA device per EFA interface of their
launch template: what the device plugins would find on the instance.
"""

from __future__ import annotations

import base64
import re
import time
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from provisioner.sandbox import protocol as p
from provisioner.sandbox.kube import KubeServer
from provisioner.spec.defaults import KUBERNETES_VERSIONS

Answer = tuple[int, dict[str, str], bytes]
ACCOUNT = "123456789012"

#: Documented durations, seconds (before scaling).
DURATIONS = {
    "cluster-create": 600.0,
    "cluster-delete": 300.0,
    "nodegroup-create": 300.0,
    "nodegroup-delete": 300.0,
    "addon-create": 60.0,
    "addon-delete": 30.0,
}
VERSIONS = KUBERNETES_VERSIONS
#: Add-on -> (versions offered, newest first; does it run pods that need a node).
ADDONS: dict[str, tuple[tuple[str, ...], bool]] = {
    "vpc-cni": (("v1.20.4-eksbuild.1", "v1.19.6-eksbuild.7"), False),
    "kube-proxy": (("v1.33.3-eksbuild.6",), False),
    "coredns": (("v1.12.3-eksbuild.1", "v1.11.4-eksbuild.14"), True),
    "eks-pod-identity-agent": (("v1.3.8-eksbuild.2",), False),
    "aws-fsx-csi-driver": (("v1.7.0-eksbuild.1", "v1.6.0-eksbuild.1"), True),
}
CAPACITY_TYPES = ("ON_DEMAND", "SPOT", "CAPACITY_BLOCK")
AMI_TYPES = (
    "AL2023_x86_64_STANDARD",
    "AL2023_x86_64_NVIDIA",
    "AL2023_ARM_64_NVIDIA",
    "AL2023_ARM_64_STANDARD",
    "CUSTOM",
)


class EksError(Exception):
    """An EKS error answer."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class Item:
    """A resource with a lifecycle: CREATING until ``ready_at``, DELETING until ``gone_at``."""

    data: dict[str, Any]
    ready_at: float
    gone_at: float | None = None


@dataclass
class Eks:
    """EKS state of one sandbox; called under the shims' lock."""

    scale: float
    kube: KubeServer
    ca_pem: bytes = b""
    clusters: dict[tuple[str, str], Item] = field(default_factory=dict)  # (region, name)
    nodegroups: dict[tuple[str, str, str], Item] = field(default_factory=dict)
    addons: dict[tuple[str, str, str], Item] = field(default_factory=dict)
    access: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)

    def handles(self, call: p.Call) -> bool:
        """True for an EKS REST call."""
        return call.service == "eks"

    def handle(self, call: p.Call, base_url: str) -> Answer:
        """Answer an EKS call."""
        self.advance(time.monotonic())
        try:
            handler = _HANDLERS.get(call.action)
            if handler is None:
                raise EksError(404, "NotFoundException", f"{call.action} is not served")
            return _ok(handler(self, call, base_url, *call.params.get("_args", [])))
        except EksError as err:
            return _error(err)

    def _after(self, key: str) -> float:
        return time.monotonic() + DURATIONS[key] * self.scale

    def advance(self, now: float) -> None:
        """Move every lifecycle on to ``now``."""
        for ckey, item in list(self.clusters.items()):
            if item.gone_at is not None and now >= item.gone_at:
                del self.clusters[ckey]
                self.kube.drop(ckey[1])
            elif item.gone_at is None and now >= item.ready_at:
                item.data["status"] = "ACTIVE"
        for key, item in list(self.nodegroups.items()):
            if item.gone_at is not None and now >= item.gone_at:
                del self.nodegroups[key]
                self.kube.leave(key[1], key[2])
            elif item.gone_at is None and now >= item.ready_at and item.data["status"] != "ACTIVE":
                item.data["status"] = "ACTIVE"
                self._join(key[0], item.data)
        for key, item in list(self.addons.items()):
            if item.gone_at is not None and now >= item.gone_at:
                del self.addons[key]
            elif item.gone_at is None and now >= item.ready_at and _creating(item):
                degraded = ADDONS[key[2]][1] and not self._has_nodes(key[0], key[1])
                item.data["status"] = "DEGRADED" if degraded else "ACTIVE"
                if degraded:
                    item.data["health"] = {
                        "issues": [
                            {
                                "code": "InsufficientNumberOfReplicas",
                                "message": "no nodes to schedule on",
                            }
                        ]
                    }

    def _has_nodes(self, region: str, cluster: str) -> bool:
        return any(
            k[:2] == (region, cluster) and i.data["status"] == "ACTIVE"
            for k, i in self.nodegroups.items()
        )

    def _cluster(self, region: str, name: str) -> Item:
        item = self.clusters.get((region, name))
        if item is None:
            raise EksError(404, "ResourceNotFoundException", f"No cluster found for name: {name}.")
        return item

    def _join(self, region: str, ng: dict[str, Any]) -> None:
        """Register a node group's nodes with its cluster's API."""
        from provisioner.catalog import load_catalog

        itype, efa = _hardware(region, ng)
        known = load_catalog().get(itype)
        gpus = known.gpu.count if known is not None and known.gpu is not None else 0
        taints = [
            {
                "key": t["key"],
                "value": t.get("value", ""),
                "effect": {
                    "NO_SCHEDULE": "NoSchedule",
                    "NO_EXECUTE": "NoExecute",
                    "PREFER_NO_SCHEDULE": "PreferNoSchedule",
                }[t["effect"]],
            }
            for t in ng.get("taints", [])
        ]
        subnet = zlib.crc32(ng["nodegroupName"].encode()) % 250
        nodes = [
            {
                "name": f"ip-10-0-{subnet}-{i + 10}.ec2.internal",
                "labels": dict(ng.get("labels", {})),
                "taints": taints,
                "gpus": gpus,
                "efa": efa,
                "instance_type": itype,
            }
            for i in range(ng["scalingConfig"]["desiredSize"])
        ]
        self.kube.join(ng["clusterName"], ng["nodegroupName"], nodes)


def _hardware(region: str, ng: dict[str, Any]) -> tuple[str, int]:
    """Instance type and EFA interfaces of a node group (from its launch template)."""
    data = _template_data(region, ng.get("launchTemplate")) or {}
    itype = data.get("InstanceType") or (ng.get("instanceTypes") or ["m7i.2xlarge"])[0]
    efa = sum(
        1
        for i in data.get("NetworkInterfaces") or []
        if i.get("InterfaceType") in ("efa", "efa-only")
    )
    return itype, efa


def _template_data(region: str, spec: dict[str, Any] | None) -> dict[str, Any] | None:
    if not spec:
        return None
    from moto.ec2.models import ec2_backends

    backend = ec2_backends[ACCOUNT][region]
    lt_id = spec.get("id") or backend.launch_template_name_to_ids.get(spec.get("name", ""))
    template = backend.launch_templates.get(str(lt_id))
    if template is None:
        raise EksError(
            400,
            "InvalidParameterException",
            f"Launch template {spec.get('id') or spec.get('name')} does not exist",
        )
    version = str(spec.get("version", "")) or str(template.default_version_number)
    found = template.get_version(version) if version.isdigit() else template.latest_version()
    data: dict[str, Any] = found.data
    return data


def _creating(item: Item) -> bool:
    return bool(item.data["status"] == "CREATING")


def _active(s: Eks, region: str, cluster: str) -> None:
    if s._cluster(region, cluster).data["status"] != "ACTIVE":
        raise EksError(400, "InvalidRequestException", f"Cluster '{cluster}' is not ACTIVE")


def _now() -> float:
    return time.time()


# -- clusters ------------------------------------------------------------------------------
def _create_cluster(s: Eks, call: p.Call, base: str) -> dict[str, Any]:
    q = call.params
    name, region = q["name"], call.region
    if (region, name) in s.clusters:
        raise EksError(409, "ResourceInUseException", f"Cluster already exists with name: {name}")
    version = q.get("version") or VERSIONS[-2]
    if version not in VERSIONS:
        raise EksError(400, "InvalidParameterException", f"unsupported version {version}")
    vpc_config = q.get("resourcesVpcConfig", {})
    vpc_id = _check_subnets(region, vpc_config.get("subnetIds", []))
    if not re.fullmatch(r"arn:aws:iam::\d{12}:role/.+", q.get("roleArn", "")):
        raise EksError(400, "InvalidParameterException", "roleArn is not an IAM role ARN")
    data = {
        "name": name,
        "arn": f"arn:aws:eks:{region}:{ACCOUNT}:cluster/{name}",
        "createdAt": _now(),
        "version": version,
        "endpoint": f"{base}/_fmctl/kube/{name}",
        "roleArn": q["roleArn"],
        "resourcesVpcConfig": {
            **vpc_config,
            "vpcId": vpc_id,
            "clusterSecurityGroupId": f"sg-eks{uuid.uuid4().hex[:13]}",
        },
        "kubernetesNetworkConfig": {"serviceIpv4Cidr": "172.20.0.0/16", "ipFamily": "ipv4"},
        "logging": q.get("logging", {}),
        "status": "CREATING",
        "certificateAuthority": {"data": base64.b64encode(s.ca_pem).decode()},
        "platformVersion": "eks.10",
        "tags": q.get("tags", {}),
        "encryptionConfig": q.get("encryptionConfig", []),
        "accessConfig": {
            "authenticationMode": q.get("accessConfig", {}).get(
                "authenticationMode", "API_AND_CONFIG_MAP"
            )
        },
    }
    s.clusters[(region, name)] = Item(data, s._after("cluster-create"))
    s.kube.ensure(name)
    if q.get("accessConfig", {}).get("bootstrapClusterCreatorAdminPermissions", True):
        creator = f"arn:aws:iam::{ACCOUNT}:user/sandbox"
        s.access[(region, name, creator)] = _entry(region, name, creator, "STANDARD", {})
    return {"cluster": data}


def _check_subnets(region: str, subnet_ids: list[str]) -> str:
    from moto.ec2.models import ec2_backends

    backend = ec2_backends[ACCOUNT][region]
    try:
        subnets = [backend.get_subnet(i) for i in subnet_ids]
    except Exception as exc:
        raise EksError(400, "InvalidParameterException", f"subnet not found: {exc}") from exc
    if len({s.availability_zone for s in subnets}) < 2:
        raise EksError(
            400,
            "UnsupportedAvailabilityZoneException",
            "Subnets specified must be in at least two different AZs",
        )
    return str(subnets[0].vpc_id)


def _describe_cluster(s: Eks, call: p.Call, base: str, name: str) -> dict[str, Any]:
    return {"cluster": s._cluster(call.region, name).data}


def _list_clusters(s: Eks, call: p.Call, base: str) -> dict[str, Any]:
    return {"clusters": sorted(n for r, n in s.clusters if r == call.region)}


def _delete_cluster(s: Eks, call: p.Call, base: str, name: str) -> dict[str, Any]:
    item = s._cluster(call.region, name)
    if any(k[:2] == (call.region, name) for k in s.nodegroups):
        raise EksError(409, "ResourceInUseException", f"Cluster has nodegroups attached: {name}")
    if item.gone_at is None:
        item.data["status"] = "DELETING"
        item.gone_at = s._after("cluster-delete")
        for key in [k for k in s.addons if k[:2] == (call.region, name)]:
            del s.addons[key]
        for key in [k for k in s.access if k[:2] == (call.region, name)]:
            del s.access[key]
    return {"cluster": item.data}


# -- node groups ---------------------------------------------------------------------------
def _create_nodegroup(s: Eks, call: p.Call, base: str, cluster: str) -> dict[str, Any]:
    q, region = call.params, call.region
    _active(s, region, cluster)
    name = q["nodegroupName"]
    if (region, cluster, name) in s.nodegroups:
        raise EksError(409, "ResourceInUseException", f"NodeGroup already exists with name {name}")
    capacity = q.get("capacityType", "ON_DEMAND")
    if capacity not in CAPACITY_TYPES or q.get("amiType", AMI_TYPES[0]) not in AMI_TYPES:
        raise EksError(400, "InvalidParameterException", "capacityType or amiType not supported")
    data = _template_data(region, q.get("launchTemplate"))
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
        "createdAt": _now(),
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
    item = s.nodegroups.get((region, cluster, name))
    if item is None:
        raise EksError(404, "ResourceNotFoundException", f"No node group found for name: {name}.")
    return item


def _describe_nodegroup(s: Eks, call: p.Call, base: str, cluster: str, name: str) -> Any:
    return {"nodegroup": _nodegroup(s, call.region, cluster, name).data}


def _list_nodegroups(s: Eks, call: p.Call, base: str, cluster: str) -> dict[str, Any]:
    s._cluster(call.region, cluster)
    return {"nodegroups": sorted(k[2] for k in s.nodegroups if k[:2] == (call.region, cluster))}


def _delete_nodegroup(s: Eks, call: p.Call, base: str, cluster: str, name: str) -> Any:
    item = _nodegroup(s, call.region, cluster, name)
    if item.gone_at is None:
        item.data["status"] = "DELETING"
        item.gone_at = s._after("nodegroup-delete")
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
    _active(s, region, cluster)
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
        "createdAt": _now(),
        "tags": q.get("tags", {}),
        "podIdentityAssociations": [
            a.get("roleArn", "") for a in q.get("podIdentityAssociations", [])
        ],
    }
    s.addons[(region, cluster, name)] = Item(data, s._after("addon-create"))
    return {"addon": data}


def _addon(s: Eks, region: str, cluster: str, name: str) -> Item:
    item = s.addons.get((region, cluster, name))
    if item is None:
        raise EksError(404, "ResourceNotFoundException", f"No addon: {name} found in cluster")
    return item


def _describe_addon(s: Eks, call: p.Call, base: str, cluster: str, name: str) -> Any:
    return {"addon": _addon(s, call.region, cluster, name).data}


def _list_addons(s: Eks, call: p.Call, base: str, cluster: str) -> dict[str, Any]:
    s._cluster(call.region, cluster)
    return {"addons": sorted(k[2] for k in s.addons if k[:2] == (call.region, cluster))}


def _delete_addon(s: Eks, call: p.Call, base: str, cluster: str, name: str) -> Any:
    item = _addon(s, call.region, cluster, name)
    if item.gone_at is None:
        item.data["status"] = "DELETING"
        item.gone_at = s._after("addon-delete")
    return {"addon": item.data}


# -- access entries ------------------------------------------------------------------------
def _entry(
    region: str, cluster: str, principal: str, kind: str, tags: dict[str, str]
) -> dict[str, Any]:
    return {
        "clusterName": cluster,
        "principalArn": principal,
        "type": kind,
        "kubernetesGroups": [],
        "createdAt": _now(),
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
    s.access[key] = _entry(region, cluster, q["principalArn"], kind, q.get("tags", {}))
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
    return {"accessEntries": sorted(k[2] for k in s.access if k[:2] == (call.region, cluster))}


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


_HANDLERS: dict[str, Any] = {
    "CreateCluster": _create_cluster,
    "ListClusters": _list_clusters,
    "DescribeCluster": _describe_cluster,
    "DeleteCluster": _delete_cluster,
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


def _ok(body: dict[str, Any]) -> Answer:
    import json

    return 200, {"Content-Type": "application/json"}, json.dumps(body, default=str).encode()


def _error(err: EksError) -> Answer:
    import json

    body = json.dumps({"message": err.message}).encode()
    return err.status, {"Content-Type": "application/json", "x-amzn-ErrorType": err.code}, body
