"""Amazon EKS for the sandbox: clusters, managed node groups, add-ons, access entries and
Pod Identity associations (``sandbox.eks_identity``), with their lifecycles, and a
Kubernetes API per cluster (``sandbox.kube``).

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

from provisioner.sandbox import protocol as p
from provisioner.sandbox.eks_identity import HANDLERS as IDENTITY_HANDLERS
from provisioner.sandbox.eks_model import (
    ACCOUNT,
    ADDONS,
    DURATIONS,
    VERSIONS,
    EksError,
    Item,
    creating,
    hardware,
    now,
    start_delete,
)
from provisioner.sandbox.eks_parts import HANDLERS as PART_HANDLERS
from provisioner.sandbox.eks_parts import access_entry
from provisioner.sandbox.kube import KubeServer

Answer = tuple[int, dict[str, str], bytes]


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
    #: Pod Identity associations, by (region, cluster, association id).
    identities: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)

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
            elif item.gone_at is None and now >= item.ready_at and creating(item):
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

        itype, efa = hardware(region, ng)
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
        "createdAt": now(),
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
        s.access[(region, name, creator)] = access_entry(region, name, creator, "STANDARD", {})
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
        start_delete(s, item, "cluster-delete")
        for key in [k for k in s.addons if k[:2] == (call.region, name)]:
            del s.addons[key]
        for key in [k for k in s.access if k[:2] == (call.region, name)]:
            del s.access[key]
        for key in [k for k in s.identities if k[:2] == (call.region, name)]:
            del s.identities[key]
    return {"cluster": item.data}


_HANDLERS: dict[str, Any] = {
    "CreateCluster": _create_cluster,
    "ListClusters": _list_clusters,
    "DescribeCluster": _describe_cluster,
    "DeleteCluster": _delete_cluster,
    **PART_HANDLERS,
    **IDENTITY_HANDLERS,
}


def _ok(body: dict[str, Any]) -> Answer:
    import json

    return 200, {"Content-Type": "application/json"}, json.dumps(body, default=str).encode()


def _error(err: EksError) -> Answer:
    return p.rest_json_error(err.status, err.code, err.message)
