"""AWS Parallel Computing Service for the sandbox (moto has none).

Requests are checked against botocore's own ``pcs`` model (its parameter validator: unknown
keys, types, required members, lengths and patterns), so what fmctl sends is what PCS
accepts; answers are built in the model's shapes. Lifecycles follow botocore's status
enums: CREATING -> ACTIVE, UPDATING -> ACTIVE, DELETING -> gone. Errors are PCS's, as its
model documents them: ConflictException for a name already taken, a cluster that is not
ACTIVE, a cluster deleted while it still has node groups or queues, and a node group
deleted while a queue still uses it (DeleteComputeNodeGroup: "You must delete all queues
associated with the compute node group first"); ServiceQuotaExceededException for a
second cluster Creating in the region (CreateCluster: "There can only be 1 cluster in a
Creating state per AWS Region per AWS account"); ResourceNotFoundException. Slurm versions:
CreateCluster refuses one past its end of life on the sandbox's day (``pcs_model.today``),
UpdateCluster takes only a newer one, and only while the cluster's node groups and queues
are ACTIVE (the User Guide's "Updating a cluster" and "Slurm versions" pages).

A node group, once ACTIVE, keeps ``minInstanceCount`` instances running in the emulator's
EC2, launched from its launch template (its instance tags, as EC2 applies them) with PCS's
own tags ``aws:pcs:cluster-id`` and ``aws:pcs:compute-node-group-id``, so status, SSM (the
login node) and teardown see real instances; deleting the group terminates them, and an
update that changes its node lifecycle actions replaces them (``pcs_lifecycle``).

Durations (before the sandbox's scale): PCS documents no figures ("several minutes");
these are the orders the PCS getting-started tutorial gives for a cluster and a node group.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from fmctl_sandbox import pcs_repair
from fmctl_sandbox.pcs_health import health_checks
from fmctl_sandbox.pcs_lifecycle import lifecycle_actions
from fmctl_sandbox.pcs_model import (
    CLUSTER_TAG,
    DURATIONS,
    GROUP_TAG,
    UNSTABLE,
    Answer,
    PcsError,
    Thing,
    busy,
    check_create_version,
    check_groups,
    check_subnets,
    check_update_version,
    instance_ids,
    need_active,
    new_id,
    stamp,
    today,
    validate,
)
from fmctl_sandbox.pcs_queues import (
    create_queue,
    delete_queue,
    get_queue,
    list_queues,
    update_queue,
)
from fmctl_sandbox.protocol import Call


@dataclass
class Pcs:
    """One account's PCS; called under the shims' lock."""

    account: str
    scale: float
    #: (region, id) -> the thing; ids are PCS's (pcs_ and 10 characters).
    things: dict[tuple[str, str], Thing] = field(default_factory=dict)
    #: ARN -> tags.
    tags: dict[str, dict[str, str]] = field(default_factory=dict)
    #: (region, operation, client token) -> the id it made.
    tokens: dict[tuple[str, str, str], str] = field(default_factory=dict)
    #: The day versions are judged on (their end of life): the sandbox's clock.
    today: Callable[[], date] = today
    #: (region, instance) -> a fault injected on it (``pcs_repair``).
    faults: dict[tuple[str, str], pcs_repair.InstanceFault] = field(default_factory=dict)

    # -- plumbing --------------------------------------------------------------------------
    def handle(self, call: Call) -> Answer:
        """Answer a PCS call."""
        self.advance(call.region, time.monotonic())
        try:
            handler = _HANDLERS.get(call.action)
            if handler is None:
                raise PcsError("UnknownOperationException", f"{call.action} is not served")
            validate(call)
            body = handler(self, call)
            return (
                200,
                {"Content-Type": "application/x-amz-json-1.0"},
                json.dumps(body, default=str).encode(),
            )
        except PcsError as err:
            return (
                err.status,
                {"Content-Type": "application/x-amz-json-1.0", "x-amzn-ErrorType": err.code},
                json.dumps({"__type": err.code, "message": err.message}).encode(),
            )

    def _after(self, key: str) -> float:
        return time.monotonic() + DURATIONS[key] * self.scale

    def _arn(self, region: str, kind: str, *ids: str) -> str:
        path = {"cluster": "cluster", "group": "computenodegroup", "queue": "queue"}[kind]
        return f"arn:aws:pcs:{region}:{self.account}:{path}/{'/'.join(ids)}"

    def advance(self, region: str, now: float) -> None:
        """Move every lifecycle of ``region`` on to ``now``."""
        for key, thing in list(self.things.items()):
            if key[0] != region:
                continue
            if thing.gone_at is not None and now >= thing.gone_at:
                if thing.kind == "group":
                    self._scale(region, thing, 0)
                self.tags.pop(thing.data["arn"], None)
                del self.things[key]
                continue
            if thing.gone_at is not None:
                continue
            status = thing.data["status"]
            if status in ("CREATING", "UPDATING") and now >= thing.ready_at:
                renew = False
                if thing.landing:
                    key_ = "nodeLifecycleActions"
                    renew = key_ in thing.landing and thing.landing[key_] != thing.data.get(key_)
                    thing.data.update(thing.landing)
                    thing.landing = None
                thing.data["status"] = "ACTIVE"
                thing.data["modifiedAt"] = stamp()
                if thing.kind == "group" and renew:
                    # New lifecycle actions: "Configuration changes drain and replace existing
                    # nodes" (the PCS User Guide's node lifecycle actions page). The sandbox
                    # runs no Slurm to drain: the nodes are replaced at once.
                    self._scale(region, thing, 0)
                if thing.kind == "group":
                    count = thing.data["scalingConfiguration"]["minInstanceCount"]
                    self._scale(region, thing, int(count))
        pcs_repair.repair(self, region)

    def terminate(self, region: str, group: Thing, instance: str) -> None:
        """End one instance of ``group``; the group launches another in its place."""
        from moto.ec2.models import ec2_backends

        ec2_backends[self.account][region].terminate_instances([instance])
        count = group.data["scalingConfiguration"]["minInstanceCount"]
        self._scale(region, group, int(count))

    # -- lookups ---------------------------------------------------------------------------
    def cluster(self, region: str, ident: str) -> Thing:
        """A cluster by id or name."""
        for (r, _), thing in self.things.items():
            if (
                r == region
                and thing.kind == "cluster"
                and ident
                in (
                    thing.data["id"],
                    thing.data["name"],
                )
            ):
                return thing
        raise PcsError("ResourceNotFoundException", f"cluster {ident} not found", 404)

    def child(self, region: str, kind: str, cluster: str, ident: str) -> Thing:
        """A node group or queue of a cluster, by id or name."""
        for (r, _), thing in self.things.items():
            if (
                r == region
                and thing.kind == kind
                and thing.data["clusterId"] == cluster
                and ident in (thing.data["id"], thing.data["name"])
            ):
                return thing
        what = "compute node group" if kind == "group" else "queue"
        raise PcsError("ResourceNotFoundException", f"{what} {ident} not found", 404)

    def children(self, region: str, kind: str, cluster: str) -> list[Thing]:
        """The node groups or queues of a cluster."""
        return [
            t
            for (r, _), t in self.things.items()
            if r == region and t.kind == kind and t.data["clusterId"] == cluster
        ]

    def _again(self, call: Call, operation: str) -> str | None:
        """What an earlier request with this client token made, while it exists (a token
        whose resource is gone makes a new one)."""
        token = call.params.get("clientToken")
        made = self.tokens.get((call.region, operation, token)) if token else None
        return made if made is not None and (call.region, made) in self.things else None

    def _remember(self, call: Call, operation: str, ident: str) -> None:
        token = call.params.get("clientToken")
        if token:
            self.tokens[(call.region, operation, token)] = ident

    # -- instances -------------------------------------------------------------------------
    def _scale(self, region: str, group: Thing, count: int) -> None:
        """Keep ``count`` instances of the group running (launched from its template)."""
        from moto.ec2.models import ec2_backends

        backend = ec2_backends[self.account][region]
        alive = []
        for instance_id in group.instances:
            found = (
                backend.get_instance(instance_id) if instance_id in instance_ids(backend) else None
            )
            if found is not None and found.state != "terminated":
                alive.append(instance_id)
        group.instances = alive
        extra = group.instances[count:]
        if extra:
            backend.terminate_instances(extra)
            group.instances = group.instances[:count]
        missing = count - len(group.instances)
        if missing <= 0:
            return
        data = group.data
        template = data["customLaunchTemplate"]
        lt = backend.describe_launch_templates(
            template_ids=[template["id"]], template_names=[], filters={}
        )
        version = lt[0].get_version(template["version"]) if lt else None
        lt_data = version.data if version is not None else {}
        tags = {
            t["Key"]: t["Value"]
            for spec in lt_data.get("TagSpecifications", [])
            if spec.get("ResourceType") == "instance"
            for t in spec.get("Tag", spec.get("Tags", []))
        }
        tags |= {CLUSTER_TAG: data["clusterId"], GROUP_TAG: data["id"]}
        primary: dict[str, Any] = next(
            (
                nic
                for nic in lt_data.get("NetworkInterface", lt_data.get("NetworkInterfaces", []))
                if str(nic.get("DeviceIndex", "0")) == "0"
                and str(nic.get("NetworkCardIndex", "0")) == "0"
            ),
            {},
        )
        groups = primary.get("SecurityGroupId", primary.get("Groups", []))
        reservation = backend.run_instances(
            data.get("amiId") or lt_data.get("ImageId") or "ami-12c6146b",
            missing,
            None,
            [],
            instance_type=data["instanceConfigs"][0]["instanceType"],
            is_instance_type_default=False,
            region_name=region,
            subnet_id=data["subnetIds"][0],
            key_name=data.get("sshKeyName"),
            security_group_ids=list(groups) if isinstance(groups, list) else [groups],
            tags={"instance": tags},
        )
        # Launched into the placement group the template names (PCS launches through EC2
        # Fleet with the template; moto's RunInstances here keeps only the zone of it).
        placed = str((lt_data.get("Placement") or {}).get("GroupName") or "")
        for instance in reservation.instances:
            instance.placement.group_name = placed
        group.instances += [i.id for i in reservation.instances]


# -- clusters ------------------------------------------------------------------------------
def _create_cluster(s: Pcs, call: Call) -> dict[str, Any]:
    q = call.params
    again = s._again(call, "CreateCluster")
    if again is not None:
        return {"cluster": s.cluster(call.region, again).data}
    for (r, _), t in s.things.items():
        if r == call.region and t.kind == "cluster" and t.data["name"] == q["clusterName"]:
            raise PcsError(
                "ConflictException", f"a cluster named {q['clusterName']} already exists"
            )
    if any(
        r == call.region and t.kind == "cluster" and t.data["status"] == "CREATING"
        for (r, _), t in s.things.items()
    ):
        raise PcsError(
            "ServiceQuotaExceededException",
            "There can only be 1 cluster in a Creating state per Region per account",
        )
    check_create_version(q["scheduler"]["version"], s.today())
    net = q["networking"]
    check_subnets(s.account, call.region, net.get("subnetIds", []))
    check_groups(s.account, call.region, net.get("securityGroupIds", []))
    ident = new_id()
    arn = s._arn(call.region, "cluster", ident)
    slurm = dict(q.get("slurmConfiguration") or {})
    slurm.setdefault("accounting", {"mode": "NONE"})
    data = {
        "name": q["clusterName"],
        "id": ident,
        "arn": arn,
        "status": "CREATING",
        "createdAt": stamp(),
        "modifiedAt": stamp(),
        "scheduler": q["scheduler"],
        "size": q["size"],
        "slurmConfiguration": slurm,
        "networking": {**net, "networkType": net.get("networkType", "IPV4")},
        "endpoints": [
            {"type": "SLURMCTLD", "privateIpAddress": "10.0.0.10", "port": "6817"},
        ],
    }
    s.things[(call.region, ident)] = Thing(data, "cluster", s._after("cluster-create"))
    s.tags[arn] = dict(q.get("tags") or {})
    s._remember(call, "CreateCluster", ident)
    return {"cluster": data}


def _get_cluster(s: Pcs, call: Call) -> dict[str, Any]:
    return {"cluster": s.cluster(call.region, call.params["clusterIdentifier"]).data}


def _list_clusters(s: Pcs, call: Call) -> dict[str, Any]:
    keys = ("name", "id", "arn", "createdAt", "modifiedAt", "status")
    found = [
        {k: t.data[k] for k in keys}
        for (r, _), t in sorted(s.things.items())
        if r == call.region and t.kind == "cluster"
    ]
    return {"clusters": found}


def _update_cluster(s: Pcs, call: Call) -> dict[str, Any]:
    cluster = s.cluster(call.region, call.params["clusterIdentifier"])
    busy(cluster)
    # "All associated resources (Queues, Compute Node Groups) must be in ACTIVE state" (AWS
    # PCS User Guide, "Updating a cluster in AWS PCS": prerequisites).
    for child in s.children(call.region, "group", cluster.data["id"]) + s.children(
        call.region, "queue", cluster.data["id"]
    ):
        busy(child)
    changes: dict[str, Any] = {}
    if "slurmConfiguration" in call.params:
        changes["slurmConfiguration"] = {
            **cluster.data["slurmConfiguration"],
            **call.params["slurmConfiguration"],
        }
    if "scheduler" in call.params:
        wanted = call.params["scheduler"]["version"]
        check_update_version(cluster.data["scheduler"]["version"], wanted)
        changes["scheduler"] = {**cluster.data["scheduler"], "version": wanted}
    cluster.data["status"] = "UPDATING"
    cluster.landing = changes
    cluster.ready_at = s._after("cluster-update")
    return {"cluster": cluster.data}


def _delete_cluster(s: Pcs, call: Call) -> dict[str, Any]:
    cluster = s.cluster(call.region, call.params["clusterIdentifier"])
    if cluster.gone_at is not None:
        return {}
    if cluster.data["status"] in UNSTABLE:
        raise PcsError(
            "ConflictException",
            f"cluster {cluster.data['id']} is in an unstable state ({cluster.data['status']})",
        )
    left = s.children(call.region, "group", cluster.data["id"])
    left += s.children(call.region, "queue", cluster.data["id"])
    if left:
        raise PcsError(
            "ConflictException",
            f"cluster {cluster.data['id']} still has node groups or queues: "
            + ", ".join(t.data["name"] for t in left),
        )
    cluster.data["status"] = "DELETING"
    cluster.gone_at = s._after("cluster-delete")
    return {}


# -- compute node groups -------------------------------------------------------------------
def _create_group(s: Pcs, call: Call) -> dict[str, Any]:
    q = call.params
    cluster = s.cluster(call.region, q["clusterIdentifier"])
    again = s._again(call, "CreateComputeNodeGroup")
    if again is not None:
        return {"computeNodeGroup": s.child(call.region, "group", cluster.data["id"], again).data}
    need_active(cluster)
    for t in s.children(call.region, "group", cluster.data["id"]):
        if t.data["name"] == q["computeNodeGroupName"]:
            raise PcsError(
                "ConflictException", f"a node group named {q['computeNodeGroupName']} exists"
            )
    check_subnets(s.account, call.region, q["subnetIds"])
    role = q["iamInstanceProfileArn"].rsplit("/", 1)[-1]
    if not (role.startswith("AWSPCS") or "/aws-pcs/" in q["iamInstanceProfileArn"]):
        raise PcsError(
            "ValidationException",
            "the instance profile's role name must start with AWSPCS or have the path /aws-pcs/",
        )
    if (
        q["scalingConfiguration"]["minInstanceCount"]
        > q["scalingConfiguration"]["maxInstanceCount"]
    ):
        raise PcsError("ValidationException", "minInstanceCount exceeds maxInstanceCount")
    health_checks(q.get("instanceHealthChecks"), q["instanceConfigs"][0]["instanceType"])
    lifecycle_actions(q.get("nodeLifecycleActions"))
    ident = new_id()
    arn = s._arn(call.region, "group", cluster.data["id"], ident)
    data = {
        **{k: v for k, v in q.items() if k not in ("clientToken", "tags", "clusterIdentifier")},
        "name": q["computeNodeGroupName"],
        "id": ident,
        "arn": arn,
        "clusterId": cluster.data["id"],
        "createdAt": stamp(),
        "modifiedAt": stamp(),
        "status": "CREATING",
        "purchaseOption": q.get("purchaseOption", "ONDEMAND"),
    }
    data.pop("computeNodeGroupName", None)
    s.things[(call.region, ident)] = Thing(data, "group", s._after("group-create"))
    s.tags[arn] = dict(q.get("tags") or {})
    s._remember(call, "CreateComputeNodeGroup", ident)
    return {"computeNodeGroup": data}


def _get_group(s: Pcs, call: Call) -> dict[str, Any]:
    cluster = s.cluster(call.region, call.params["clusterIdentifier"])
    group = s.child(
        call.region, "group", cluster.data["id"], call.params["computeNodeGroupIdentifier"]
    )
    return {"computeNodeGroup": group.data}


def _list_groups(s: Pcs, call: Call) -> dict[str, Any]:
    cluster = s.cluster(call.region, call.params["clusterIdentifier"])
    keys = ("name", "id", "arn", "clusterId", "createdAt", "modifiedAt", "status")
    return {
        "computeNodeGroups": [
            {k: t.data[k] for k in keys}
            for t in s.children(call.region, "group", cluster.data["id"])
        ]
    }


_GROUP_UPDATABLE = (
    "amiId",
    "securityGroupIds",
    "sshKeyName",
    "subnetIds",
    "customLaunchTemplate",
    "purchaseOption",
    "spotOptions",
    "scalingConfiguration",
    "iamInstanceProfileArn",
    "slurmConfiguration",
    # "These settings replace all of the current instance health check settings" (its model).
    "instanceHealthChecks",
    # Replaced whole (pcs_lifecycle: the model does not say).
    "nodeLifecycleActions",
)


def _update_group(s: Pcs, call: Call) -> dict[str, Any]:
    q = call.params
    cluster = s.cluster(call.region, q["clusterIdentifier"])
    need_active(cluster)
    group = s.child(call.region, "group", cluster.data["id"], q["computeNodeGroupIdentifier"])
    busy(group)
    types = [c.get("instanceType", "") for c in group.data.get("instanceConfigs") or []]
    health_checks(q.get("instanceHealthChecks"), types[0] if types else "")
    lifecycle_actions(q.get("nodeLifecycleActions"))
    group.data["status"] = "UPDATING"
    group.landing = {k: q[k] for k in _GROUP_UPDATABLE if k in q}
    group.ready_at = s._after("group-update")
    return {"computeNodeGroup": group.data}


def _delete_group(s: Pcs, call: Call) -> dict[str, Any]:
    cluster = s.cluster(call.region, call.params["clusterIdentifier"])
    group = s.child(
        call.region, "group", cluster.data["id"], call.params["computeNodeGroupIdentifier"]
    )
    if group.gone_at is not None:
        return {}
    if group.data["status"] in UNSTABLE:
        raise PcsError(
            "ConflictException", f"node group {group.data['id']} is {group.data['status']}"
        )
    users = [
        q.data["name"]
        for q in s.children(call.region, "queue", cluster.data["id"])
        if any(
            c.get("computeNodeGroupId") == group.data["id"]
            for c in q.data["computeNodeGroupConfigurations"]
        )
    ]
    if users:
        raise PcsError(
            "ConflictException",
            f"node group {group.data['id']} is used by queue(s) {', '.join(users)}: "
            "delete them first",
        )
    group.data["status"] = "DELETING"
    group.gone_at = s._after("group-delete")
    return {}


# -- tags ----------------------------------------------------------------------------------
def _known(s: Pcs, arn: str) -> dict[str, str]:
    if arn not in s.tags:
        raise PcsError("ResourceNotFoundException", f"{arn} not found", 404)
    return s.tags[arn]


def _tag(s: Pcs, call: Call) -> dict[str, Any]:
    _known(s, call.params["resourceArn"]).update(call.params["tags"])
    return {}


def _untag(s: Pcs, call: Call) -> dict[str, Any]:
    tags = _known(s, call.params["resourceArn"])
    for key in call.params["tagKeys"]:
        tags.pop(key, None)
    return {}


def _list_tags(s: Pcs, call: Call) -> dict[str, Any]:
    return {"tags": dict(_known(s, call.params["resourceArn"]))}


def _register(s: Pcs, call: Call) -> dict[str, Any]:
    raise PcsError("AccessDeniedException", "only an instance of a node group may register")


_HANDLERS = {
    "CreateCluster": _create_cluster,
    "GetCluster": _get_cluster,
    "ListClusters": _list_clusters,
    "UpdateCluster": _update_cluster,
    "DeleteCluster": _delete_cluster,
    "CreateComputeNodeGroup": _create_group,
    "GetComputeNodeGroup": _get_group,
    "ListComputeNodeGroups": _list_groups,
    "UpdateComputeNodeGroup": _update_group,
    "DeleteComputeNodeGroup": _delete_group,
    "CreateQueue": create_queue,
    "GetQueue": get_queue,
    "ListQueues": list_queues,
    "UpdateQueue": update_queue,
    "DeleteQueue": delete_queue,
    "TagResource": _tag,
    "UntagResource": _untag,
    "ListTagsForResource": _list_tags,
    "RegisterComputeNodeGroupInstance": _register,
}
