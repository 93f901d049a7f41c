"""PCS queues in the sandbox (CreateQueue, GetQueue, ListQueues, UpdateQueue, DeleteQueue),
as ``fmctl_sandbox.pcs`` describes them: a queue's node groups must be the cluster's,
and a queue or its cluster must not be busy.
"""

from __future__ import annotations

from typing import Any

from fmctl_sandbox.pcs_model import PcsError, Thing, busy, need_active, new_id, stamp
from fmctl_sandbox.protocol import Call

#: The sandbox's PCS (fmctl_sandbox.pcs.Pcs, which imports this module: typed loosely
#: here so that the imports point one way).
Pcs = Any


# -- queues --------------------------------------------------------------------------------
def _check_queue_groups(s: Pcs, region: str, cluster: str, configs: list[dict[str, Any]]) -> None:
    for c in configs:
        s.child(region, "group", cluster, str(c.get("computeNodeGroupId")))


def create_queue(s: Pcs, call: Call) -> dict[str, Any]:
    q = call.params
    cluster = s.cluster(call.region, q["clusterIdentifier"])
    again = s._again(call, "CreateQueue")
    if again is not None:
        return {"queue": s.child(call.region, "queue", cluster.data["id"], again).data}
    need_active(cluster)
    if any(
        t.data["name"] == q["queueName"]
        for t in s.children(call.region, "queue", cluster.data["id"])
    ):
        raise PcsError("ConflictException", f"a queue named {q['queueName']} already exists")
    configs = list(q.get("computeNodeGroupConfigurations") or [])
    _check_queue_groups(s, call.region, cluster.data["id"], configs)
    ident = new_id()
    arn = s._arn(call.region, "queue", cluster.data["id"], ident)
    data = {
        "name": q["queueName"],
        "id": ident,
        "arn": arn,
        "clusterId": cluster.data["id"],
        "createdAt": stamp(),
        "modifiedAt": stamp(),
        "status": "CREATING",
        "computeNodeGroupConfigurations": configs,
    }
    if "slurmConfiguration" in q:
        data["slurmConfiguration"] = q["slurmConfiguration"]
    s.things[(call.region, ident)] = Thing(data, "queue", s._after("queue-create"))
    s.tags[arn] = dict(q.get("tags") or {})
    s._remember(call, "CreateQueue", ident)
    return {"queue": data}


def get_queue(s: Pcs, call: Call) -> dict[str, Any]:
    cluster = s.cluster(call.region, call.params["clusterIdentifier"])
    return {
        "queue": s.child(
            call.region, "queue", cluster.data["id"], call.params["queueIdentifier"]
        ).data
    }


def list_queues(s: Pcs, call: Call) -> dict[str, Any]:
    cluster = s.cluster(call.region, call.params["clusterIdentifier"])
    keys = ("name", "id", "arn", "clusterId", "createdAt", "modifiedAt", "status")
    return {
        "queues": [
            {k: t.data[k] for k in keys}
            for t in s.children(call.region, "queue", cluster.data["id"])
        ]
    }


def update_queue(s: Pcs, call: Call) -> dict[str, Any]:
    q = call.params
    cluster = s.cluster(call.region, q["clusterIdentifier"])
    queue = s.child(call.region, "queue", cluster.data["id"], q["queueIdentifier"])
    busy(queue)
    changes: dict[str, Any] = {}
    if "computeNodeGroupConfigurations" in q:
        configs = list(q["computeNodeGroupConfigurations"])
        _check_queue_groups(s, call.region, cluster.data["id"], configs)
        # The queue uses its new groups at once (a later delete of an old one may follow).
        queue.data["computeNodeGroupConfigurations"] = configs
    if "slurmConfiguration" in q:
        changes["slurmConfiguration"] = q["slurmConfiguration"]
    queue.data["status"] = "UPDATING"
    queue.landing = changes
    queue.ready_at = s._after("queue-update")
    return {"queue": queue.data}


def delete_queue(s: Pcs, call: Call) -> dict[str, Any]:
    cluster = s.cluster(call.region, call.params["clusterIdentifier"])
    queue = s.child(call.region, "queue", cluster.data["id"], call.params["queueIdentifier"])
    if queue.gone_at is None:
        queue.data["status"] = "DELETING"
        queue.gone_at = s._after("queue-delete")
    return {}
