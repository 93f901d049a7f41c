"""The AWS PCS side of `fmctl status`: the cluster and its controller's endpoint, each node
group with the instances PCS runs for it (found by PCS's own ``aws:pcs:compute-node-group-id``
tag), and the queues on them. Read-only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from provisioner.catalog.pcs import NODE_GROUP_TAG
from provisioner.resources.context import Context


@dataclass(frozen=True)
class PcsInstance:
    """One instance of a node group."""

    id: str
    state: str
    ip: str


@dataclass(frozen=True)
class PcsGroupRow:
    """A compute node group."""

    name: str
    id: str
    status: str
    instance_type: str
    min_count: int
    max_count: int
    instances: tuple[PcsInstance, ...]

    def as_data(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "name": self.name,
            "id": self.id,
            "status": self.status,
            "instanceType": self.instance_type,
            "minCount": self.min_count,
            "maxCount": self.max_count,
            "instances": [{"id": i.id, "state": i.state, "ip": i.ip} for i in self.instances],
        }


@dataclass(frozen=True)
class PcsQueueRow:
    """A queue and the node groups (by name) it runs on."""

    name: str
    status: str
    node_groups: tuple[str, ...]


@dataclass(frozen=True)
class PcsStatus:
    """The PCS cluster."""

    id: str
    status: str
    slurm_version: str
    size: str
    endpoint: str
    groups: tuple[PcsGroupRow, ...]
    queues: tuple[PcsQueueRow, ...]

    @property
    def login(self) -> PcsInstance | None:
        """The first running login node (Prometheus and Grafana run there)."""
        for group in self.groups:
            if group.name == "login":
                running = [i for i in group.instances if i.state == "running"]
                return running[0] if running else None
        return None

    def as_data(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "provider": "pcs",
            "id": self.id,
            "status": self.status,
            "slurmVersion": self.slurm_version,
            "size": self.size,
            "endpoint": self.endpoint,
            "nodeGroups": [g.as_data() for g in self.groups],
            "queues": [
                {"name": q.name, "status": q.status, "nodeGroups": list(q.node_groups)}
                for q in self.queues
            ],
        }

    def lines(self) -> list[str]:
        """What the text of `status` (and `up`) shows."""
        out = [
            f"PCS cluster {self.id}: {self.status} (Slurm {self.slurm_version}, {self.size}), "
            f"controller {self.endpoint or 'not yet reachable'}"
        ]
        for g in self.groups:
            ids = ", ".join(f"{i.id} {i.state}" for i in g.instances) or "none running"
            out.append(
                f"  node group {g.name} ({g.instance_type}, {g.min_count}-{g.max_count}): "
                f"{g.status}; instances: {ids}"
            )
        for q in self.queues:
            out.append(f"  queue {q.name} on {', '.join(q.node_groups)}: {q.status}")
        return out


def pcs_status(ctx: Context) -> PcsStatus | None:
    """The cluster's PCS side, or None when it has no PCS cluster."""
    from provisioner.resources.pcs import PcsCluster, cluster_id
    from provisioner.resources.pcs_nodes import PcsNodeGroup
    from provisioner.resources.pcs_queues import PcsQueue

    ident = cluster_id(ctx)
    if ident is None:
        return None
    cluster = next(c for c in PcsCluster().mine(ctx) if c["id"] == ident)
    endpoint = PcsCluster.outputs_of(cluster).endpoint
    groups = [g for g in PcsNodeGroup().groups(ctx) if g["clusterId"] == ident]
    names = {str(g["id"]): str(g["name"]) for g in groups}
    ec2 = ctx.aws.client("ec2")
    rows = []
    for g in sorted(groups, key=lambda g: str(g["name"])):
        found = ec2.describe_instances(
            Filters=[{"Name": f"tag:{NODE_GROUP_TAG}", "Values": [g["id"]]}]
        )["Reservations"]
        instances = tuple(
            PcsInstance(i["InstanceId"], i["State"]["Name"], i.get("PrivateIpAddress", ""))
            for r in found
            for i in r["Instances"]
            if i["State"]["Name"] != "terminated"
        )
        scaling = g.get("scalingConfiguration") or {}
        types = [c.get("instanceType", "") for c in g.get("instanceConfigs") or []]
        rows.append(
            PcsGroupRow(
                str(g["name"]),
                str(g["id"]),
                str(g["status"]),
                str(types[0]) if types else "",
                int(scaling.get("minInstanceCount", 0)),
                int(scaling.get("maxInstanceCount", 0)),
                instances,
            )
        )
    queues = tuple(
        PcsQueueRow(
            str(q["name"]),
            str(q["status"]),
            tuple(
                names.get(str(c.get("computeNodeGroupId")), str(c.get("computeNodeGroupId")))
                for c in q.get("computeNodeGroupConfigurations") or []
            ),
        )
        for q in sorted(PcsQueue().queues(ctx), key=lambda q: str(q["name"]))
        if q["clusterId"] == ident
    )
    return PcsStatus(
        ident,
        str(cluster["status"]),
        str(cluster["scheduler"]["version"]),
        str(cluster["size"]),
        endpoint,
        tuple(rows),
        queues,
    )
