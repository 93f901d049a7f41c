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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fmctl_sandbox import eks_autoscaler, eks_network, eks_repair
from fmctl_sandbox import protocol as p
from fmctl_sandbox.eks_identity import HANDLERS as IDENTITY_HANDLERS
from fmctl_sandbox.eks_model import (
    ADDONS,
    DURATIONS,
    VERSIONS,
    EksError,
    Item,
    creating,
    gpu_model_of,
    gpus_of,
    hardware,
    land,
    minor,
    network_gbps_of,
    node_groups,
    node_slots,
    now,
    offered,
    start_delete,
    start_update,
    template_data,
)
from fmctl_sandbox.eks_parts import HANDLERS as PART_HANDLERS
from fmctl_sandbox.eks_parts import access_entry
from fmctl_sandbox.kube import KubeServer
from fmctl_sandbox.topology import LAYER_LABEL, NodePlace, node_group_places

Answer = tuple[int, dict[str, str], bytes]
#: The Deployment (in kube-system) of the AWS Load Balancer Controller's Helm chart.
LB_CONTROLLER = "aws-load-balancer-controller"


@dataclass
class Eks:
    """EKS state of one sandbox; called under the shims' lock."""

    scale: float
    kube: KubeServer
    ca_pem: bytes = b""
    #: The account whose EKS this is (ARNs name it).
    account: str = "123456789012"
    #: (region, cluster) -> the id of its Kubernetes API's endpoint (``/k8s/ID``): unique
    #: per cluster, as EKS's endpoint hosts are, so two regions' clusters of one name and a
    #: cluster made again after a delete never share an API.
    endpoints: dict[tuple[str, str], str] = field(default_factory=dict)
    #: (region, cluster) -> what it has in its VPC (``eks_network``).
    networks: dict[tuple[str, str], eks_network.ClusterNetwork] = field(default_factory=dict)
    clusters: dict[tuple[str, str], Item] = field(default_factory=dict)  # (region, name)
    nodegroups: dict[tuple[str, str, str], Item] = field(default_factory=dict)
    addons: dict[tuple[str, str, str], Item] = field(default_factory=dict)
    access: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    #: Pod Identity associations, by (region, cluster, association id).
    identities: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    #: What each cluster's Cluster Autoscaler keeps between scans (``eks_autoscaler``).
    autoscalers: dict[tuple[str, str], eks_autoscaler.Memory] = field(default_factory=dict)
    #: The account's capacity reservations (the EC2 shim's), by region and id.
    reservation_source: Callable[[str, str], dict[str, Any] | None] = field(
        default=lambda region, rid: None
    )

    def instance_places(self, region: str) -> list[tuple[str, str, str, NodePlace]]:
        """(instance id, type, zone, place) of every node-group instance in ``region``:
        what DescribeInstanceTopology answers for them (the sandbox's node groups launch no
        moto instances)."""
        out = []
        zone = f"{region}a"
        for (r, _, name), item in sorted(self.nodegroups.items()):
            if r != region or item.data.get("status") not in ("ACTIVE", "UPDATING"):
                continue
            template = template_data(self.account, region, item.data.get("launchTemplate"))
            itype, _ = hardware(template or {}, item.data)
            slots = node_slots(region, item.data)
            for instance, place in node_group_places(
                self.account, zone, name, itype, slots
            ).items():
                out.append((instance, itype, zone, place))
        return out

    def reservation(self, region: str, rid: str) -> dict[str, Any] | None:
        """A capacity reservation of the account (the EC2 shim's), None when unknown."""
        return self.reservation_source(region, rid)

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
                self.kube.drop(self.endpoints.pop(ckey, ""))
                net = self.networks.pop(ckey, None)
                if net is not None:
                    eks_network.delete_cluster(self.account, ckey[0], net)
            elif item.gone_at is None and now >= item.ready_at and creating(item):
                item.data["status"] = "ACTIVE"
            land(item, now)
        for key, item in list(self.nodegroups.items()):
            if item.gone_at is not None and now >= item.gone_at:
                del self.nodegroups[key]
                self.kube.leave(self.endpoints.get(key[:2], ""), key[2])
                net = self.networks.get(key[:2])
                if net is not None:
                    eks_network.leave(self.account, key[0], net, key[2])
            elif item.gone_at is None and now >= item.ready_at and creating(item):
                item.data["status"] = "ACTIVE"
                self.sync_nodes(key[0], item.data)
            land(item, now)
        eks_repair.repair(self, now)
        eks_autoscaler.autoscale(self, now)
        for key, item in list(self.addons.items()):
            land(item, now)
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
        self._balancers()

    def _balancers(self) -> None:
        """The load balancer controller, in each cluster where it runs."""
        for ckey, item in self.clusters.items():
            net = self.networks.get(ckey)
            endpoint = self.endpoints.get(ckey, "")
            if net is None or item.data["status"] != "ACTIVE" or not self._has_nodes(*ckey):
                continue
            if not self.kube.has(endpoint, "deployments", "kube-system", LB_CONTROLLER):
                continue
            eks_network.sync_balancers(
                self.account,
                ckey[0],
                ckey[1],
                item.data["resourcesVpcConfig"]["vpcId"],
                net,
                self.kube.load_balancers(endpoint),
            )

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

    def cordon(self, region: str, cluster: str, nodegroup: str) -> None:
        """The node group's nodes take no new pods (it is being deleted)."""
        self.kube.cordon(self.endpoints.get((region, cluster), ""), nodegroup)

    def sync_nodes(self, region: str, ng: dict[str, Any], fresh: bool = False) -> None:
        """Make a node group's nodes in its cluster's API what its config says: as many as
        its desired size, with its labels and taints, the GPUs of its instance type (moto's
        DescribeInstanceTypes) and one EFA device per EFA interface of its launch template;
        ``fresh``: every node replaced (a rolling update)."""
        template = template_data(self.account, region, ng.get("launchTemplate")) or {}
        itype, efa = hardware(template, ng)
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
        if fresh:
            ng["_generation"] = ng.get("_generation", 0) + 1
            ng["_slots"] = []
            ng["_next"] = 0  # a generation numbers its nodes afresh
            ng.pop("_booting", None)
        subnet = zlib.crc32(ng["nodegroupName"].encode()) % 250
        zone = f"{region}a"
        slots = node_slots(region, ng)
        places = node_group_places(self.account, zone, ng["nodegroupName"], itype, slots)
        nodes = [
            {
                "name": f"ip-10-0-{subnet}-{index}.ec2.internal",
                # As the AWS cloud provider registers a node: aws:///ZONE/INSTANCE-ID (the
                # sandbox's nodes are Kubernetes objects only, with ids of their own).
                "provider_id": f"aws:///{zone}/{instance}",
                "labels": {
                    **ng.get("labels", {}),
                    **{
                        LAYER_LABEL.format(i): node
                        for i, node in enumerate(places[instance].network, 1)
                    },
                },
                "taints": taints,
                "gpus": gpus_of(itype),
                "network_gbps": network_gbps_of(itype),
                "gpu_model": gpu_model_of(itype),
                "efa": efa,
                "instance_type": itype,
                "clique": places[instance].clique,
            }
            for index, instance in slots
            # A replacement the Auto Scaling group launched joins once booted (eks_asg).
            if instance not in (ng.get("_booting") or {})
        ]
        endpoint = self.endpoints.get((region, ng["clusterName"]), "")
        self.kube.sync(endpoint, ng["nodegroupName"], nodes)
        net = self.networks.get((region, ng["clusterName"]))
        if net is not None and ng.get("subnets"):
            eks_network.sync_nodes(
                self.account,
                region,
                ng["clusterName"],
                net,
                ng["nodegroupName"],
                [str(n["name"]) for n in nodes],
                ng["subnets"][0],
                node_groups(template),
            )


# -- clusters ------------------------------------------------------------------------------
def _create_cluster(s: Eks, call: p.Call, base: str) -> dict[str, Any]:
    q = call.params
    name, region = q["name"], call.region
    if (region, name) in s.clusters:
        raise EksError(409, "ResourceInUseException", f"Cluster already exists with name: {name}")
    version = q.get("version") or VERSIONS[-3]
    if version not in offered():
        raise EksError(400, "InvalidParameterException", f"unsupported version {version}")
    vpc_config = q.get("resourcesVpcConfig", {})
    vpc_id = _check_subnets(s.account, region, vpc_config.get("subnetIds", []))
    endpoint = uuid.uuid4().hex.upper()
    net = eks_network.create_cluster(
        s.account,
        region,
        name,
        vpc_id,
        vpc_config.get("subnetIds", []),
        vpc_config.get("securityGroupIds", []),
    )
    s.networks[(region, name)] = net
    if not re.fullmatch(r"arn:aws:iam::\d{12}:role/.+", q.get("roleArn", "")):
        raise EksError(400, "InvalidParameterException", "roleArn is not an IAM role ARN")
    data = {
        "name": name,
        "arn": f"arn:aws:eks:{region}:{s.account}:cluster/{name}",
        "createdAt": now(),
        "version": version,
        "endpoint": f"{base}/k8s/{endpoint}",
        "roleArn": q["roleArn"],
        "resourcesVpcConfig": {
            **vpc_config,
            "vpcId": vpc_id,
            "clusterSecurityGroupId": net.group,
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
    _log_group_for(s.account, region, name, data["logging"])
    s.endpoints[(region, name)] = endpoint
    s.kube.ensure(endpoint, name, version)
    if q.get("accessConfig", {}).get("bootstrapClusterCreatorAdminPermissions", True):
        creator = f"arn:aws:iam::{s.account}:user/sandbox"
        s.access[(region, name, creator)] = access_entry(
            s.account, region, name, creator, "STANDARD", {}
        )
    return {"cluster": data}


def _log_group_for(account: str, region: str, name: str, logging: dict[str, Any]) -> None:
    """As EKS does once a log type is on: the logs go to /aws/eks/NAME/cluster, which it
    creates when missing, untagged and without a retention (EKS User Guide, "Send control
    plane logs to CloudWatch Logs"; eksctl sets a retention on it only afterwards)."""
    from moto.logs.models import logs_backends

    if not any(e.get("enabled") and e.get("types") for e in logging.get("clusterLogging", [])):
        return
    backend = logs_backends[account][region]
    group = f"/aws/eks/{name}/cluster"
    if group not in backend.groups:
        backend.create_log_group(group, {})


def _check_subnets(account: str, region: str, subnet_ids: list[str]) -> str:
    from moto.ec2.models import ec2_backends

    backend = ec2_backends[account][region]
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


def _update_version(s: Eks, call: p.Call, base: str, name: str) -> dict[str, Any]:
    """One minor version at a time, as EKS allows (InvalidParameterException otherwise), and
    only while every managed node group runs the cluster's version (botocore's EKS
    documentation of UpdateClusterVersion: "all of your node groups' Kubernetes versions
    must match the cluster's Kubernetes version in order to update the cluster to a new
    Kubernetes version"; the error code EKS answers with is not documented there:
    InvalidRequestException, its code for a request the resource's state does not allow)."""
    item = s._cluster(call.region, name)
    current, asked = item.data["version"], call.params.get("version", "")
    if asked not in offered() or minor(asked) != (minor(current)[0], minor(current)[1] + 1):
        raise EksError(
            400,
            "InvalidParameterException",
            f"Unsupported Kubernetes minor version update from {current} to {asked}",
        )
    behind = sorted(
        f"{ng_name} ({ng.data['version']})"
        for (region, cluster, ng_name), ng in s.nodegroups.items()
        if region == call.region
        and cluster == name
        and ng.gone_at is None
        and ng.data["version"] != current
    )
    if behind:
        raise EksError(
            400,
            "InvalidRequestException",
            f"Nodegroups {', '.join(behind)} must be on the cluster's version {current} "
            "before the cluster is updated",
        )
    endpoint = s.endpoints.get((call.region, name), "")
    update = start_update(
        s,
        item,
        "VersionUpdate",
        [("Version", asked), ("PlatformVersion", "eks.1")],
        {"version": asked, "platformVersion": "eks.1"},
        "cluster-version",
        done=lambda: s.kube.set_version(endpoint, asked),
    )
    return {"update": update}


def _update_config(s: Eks, call: p.Call, base: str, name: str) -> dict[str, Any]:
    """Endpoint access and CIDRs, subnets and groups, logging, access config, upgrade
    policy: one kind of change per call, as EKS takes them."""
    item = s._cluster(call.region, name)
    q = call.params
    changes: dict[str, Any] = {}
    kinds = []
    if "resourcesVpcConfig" in q:
        vpc = {**item.data["resourcesVpcConfig"], **q["resourcesVpcConfig"]}
        if "subnetIds" in q["resourcesVpcConfig"]:
            _check_subnets(s.account, call.region, vpc["subnetIds"])
        changes["resourcesVpcConfig"] = vpc
        kinds.append("EndpointAccessUpdate")
    if "logging" in q:
        changes["logging"] = q["logging"]
        kinds.append("LoggingUpdate")
        _log_group_for(s.account, call.region, name, q["logging"])
    if "accessConfig" in q:
        changes["accessConfig"] = {**item.data["accessConfig"], **q["accessConfig"]}
        kinds.append("AccessConfigUpdate")
    if "upgradePolicy" in q:
        changes["upgradePolicy"] = q["upgradePolicy"]
        kinds.append("UpgradePolicyUpdate")
    if len(kinds) != 1:
        raise EksError(
            400, "InvalidParameterException", "exactly one kind of cluster config per update"
        )
    params = [(k, v) for k, v in sorted(changes.items())]
    return {"update": start_update(s, item, kinds[0], params, changes, "cluster-config")}


def _updates_of(s: Eks, region: str, name: str, query: str) -> Item:
    from urllib.parse import parse_qs

    where = {k: v[0] for k, v in parse_qs(query).items()}
    if "nodegroupName" in where:
        return s.nodegroups.get((region, name, where["nodegroupName"])) or s._cluster(region, "")
    if "addonName" in where:
        return s.addons.get((region, name, where["addonName"])) or s._cluster(region, "")
    return s._cluster(region, name)


def _describe_update(s: Eks, call: p.Call, base: str, name: str, update_id: str) -> Any:
    item = _updates_of(s, call.region, name, call.params.get("_query", ""))
    for update in item.updates:
        if update["id"] == update_id:
            return {"update": update}
    raise EksError(404, "ResourceNotFoundException", f"No update found for ID: {update_id}")


def _list_updates(s: Eks, call: p.Call, base: str, name: str) -> Any:
    item = _updates_of(s, call.region, name, call.params.get("_query", ""))
    return {"updateIds": [u["id"] for u in item.updates]}


def _tagged(s: Eks, region: str, arn: str) -> dict[str, Any]:
    """The resource an EKS ARN names (clusters, node groups, add-ons, access entries, Pod
    Identity associations), as the dict that holds its tags."""
    for table in (s.clusters, s.nodegroups, s.addons):
        for key, item in table.items():
            if key[0] == region and arn in (
                item.data.get("arn"),
                item.data.get("nodegroupArn"),
                item.data.get("addonArn"),
            ):
                return item.data
    for entries in (s.access, s.identities):
        for key, entry in entries.items():
            if key[0] == region and arn in (
                entry.get("accessEntryArn"),
                entry.get("associationArn"),
            ):
                return entry
    raise EksError(404, "NotFoundException", f"Resource {arn} not found")


def _tag(s: Eks, call: p.Call, base: str, arn: str) -> Any:
    from urllib.parse import unquote

    item = _tagged(s, call.region, unquote(arn))
    item.setdefault("tags", {}).update(call.params.get("tags", {}))
    return {}


def _untag(s: Eks, call: p.Call, base: str, arn: str) -> Any:
    from urllib.parse import parse_qs, unquote

    item = _tagged(s, call.region, unquote(arn))
    for key in parse_qs(call.params.get("_query", "")).get("tagKeys", []):
        item.get("tags", {}).pop(key, None)
    return {}


def _list_tags(s: Eks, call: p.Call, base: str, arn: str) -> Any:
    from urllib.parse import unquote

    return {"tags": _tagged(s, call.region, unquote(arn)).get("tags", {})}


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
    "UpdateClusterVersion": _update_version,
    "UpdateClusterConfig": _update_config,
    "DescribeUpdate": _describe_update,
    "ListUpdates": _list_updates,
    "TagResource": _tag,
    "UntagResource": _untag,
    "ListTagsForResource": _list_tags,
    **PART_HANDLERS,
    **IDENTITY_HANDLERS,
}


def _ok(body: dict[str, Any]) -> Answer:
    import json

    return 200, {"Content-Type": "application/json"}, json.dumps(body, default=str).encode()


def _error(err: EksError) -> Answer:
    return p.rest_json_error(err.status, err.code, err.message)
