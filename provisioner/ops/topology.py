"""`fmctl topology`: where a Slurm cluster's running compute nodes sit in the network.

Read from EC2 (DescribeInstanceTopology: the network nodes above each instance, top of the
hierarchy first) and published next to the cluster's Slurm scripts as topology.json. The head
node's fmctl-topology timer maps the instances' addresses to Slurm node names and installs
topology.conf (slurm/lib/topology.py), so Slurm keeps a job's nodes under as few spines as it
can. fmctl cannot write topology.conf itself: which instance is which Slurm node is known on
the head node only.

Two things it never does: publish an empty topology over one the head node is using (with
no running compute instance, or none EC2 places, a good topology.conf would be rewritten
as flat; the file published before stays), and speak of a head node on an EKS cluster,
where EKS itself labels each node with its place (``topology.k8s.aws/network-node-layer-N``,
the EKS User Guide, "Place distributed AI/ML workloads with network topology labels").
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from provisioner.drivers.aws import Aws
from provisioner.ops.reservation_topology import ReservedPlace
from provisioner.ops.topology_model import Placed, PoolTree, carry_over, pool_trees, to_json
from provisioner.resources.parallelcluster import PCLUSTER_TAG

if TYPE_CHECKING:
    from types_boto3_ec2.type_defs import InstanceTypeDef

#: The tags naming an instance's pool: ParallelCluster's queue (pcluster/constants.py
#: PCLUSTER_QUEUE_NAME_TAG) and fmctl's own on PCS node groups' instances.
POOL_TAGS = ("parallelcluster:queue-name", "fmctl.dev/pool")

#: DescribeInstanceTopology takes at most 100 instance ids per call.
IDS_PER_CALL = 100


def compute_instances(aws: Aws, cluster: str) -> dict[str, InstanceTypeDef]:
    """Running compute instances of the ParallelCluster cluster, by id."""
    ec2 = aws.client("ec2")
    found: dict[str, InstanceTypeDef] = {}
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": f"tag:{PCLUSTER_TAG}", "Values": [cluster]},
            {"Name": "tag:parallelcluster:node-type", "Values": ["Compute"]},
            {"Name": "instance-state-name", "Values": ["running"]},
        ]
    )
    for page in pages:
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                if tags.get(PCLUSTER_TAG) == cluster:  # never trust a filter alone
                    found[instance["InstanceId"]] = instance
    return found


def pcs_compute_instances(aws: Aws, cluster: str) -> dict[str, InstanceTypeDef]:
    """Running compute instances of the cluster's PCS node groups (PCS's cluster tag and
    fmctl's; the login group left out), by id."""
    from provisioner.catalog.pcs import CLUSTER_TAG
    from provisioner.resources.tags import OWNER_TAG

    ec2 = aws.client("ec2")
    found: dict[str, InstanceTypeDef] = {}
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": f"tag:{OWNER_TAG}", "Values": [cluster]},
            {"Name": "tag-key", "Values": [CLUSTER_TAG]},
            {"Name": "instance-state-name", "Values": ["running"]},
        ]
    )
    for page in pages:
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                if tags.get(OWNER_TAG) == cluster and tags.get("fmctl.dev/pool") != "login":
                    found[instance["InstanceId"]] = instance
    return found


def read_topology(aws: Aws, instances: Mapping[str, Mapping[str, Any]]) -> list[Placed]:
    """Each of the running compute ``instances`` (``compute_instances``) with its network
    nodes (instances EC2 does not place, types without topology support, are left out)."""
    ec2 = aws.client("ec2")
    ids = sorted(instances)
    placed = []
    for start in range(0, len(ids), IDS_PER_CALL):
        chunk = ids[start : start + IDS_PER_CALL]
        pages = ec2.get_paginator("describe_instance_topology").paginate(InstanceIds=chunk)
        for page in pages:
            for item in page["Instances"]:
                instance = instances[item["InstanceId"]]
                if not item.get("NetworkNodes"):
                    continue  # a hole: not running any more, or not yet propagated
                tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                placed.append(
                    Placed(
                        item["InstanceId"],
                        instance.get("PrivateIpAddress", ""),
                        item.get("InstanceType", instance.get("InstanceType", "")),
                        tuple(item["NetworkNodes"]),
                        next((tags[k] for k in POOL_TAGS if tags.get(k)), ""),
                        item.get("CapacityBlockId") or None,
                    )
                )
    return placed


def document(cluster: str, placed: list[Placed]) -> dict[str, Any]:
    """topology.json: what the head node reads (``instances``), and each pool's tree."""
    from provisioner.catalog import load_catalog

    return {
        "cluster": cluster,
        "readAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "instances": [
            to_json(p) for p in sorted(placed, key=lambda p: (*p.network_nodes, p.instance_id))
        ],
        "pools": [t.as_json() for t in pool_trees(placed, load_catalog())],
    }


def published_before(aws: Aws, bucket: str, cluster: str) -> dict[str, Any] | None:
    """The topology.json published last, if any."""
    from provisioner.drivers.aws_errors import NotFound

    try:
        body = aws.client("s3").get_object(Bucket=bucket, Key=f"{cluster}/slurm/topology.json")
    except NotFound:  # no such object, or no bucket
        return None
    found: dict[str, Any] = json.loads(body["Body"].read())
    return found


def publish(aws: Aws, bucket: str, cluster: str, doc: dict[str, Any]) -> str:
    """Upload topology.json beside the cluster's Slurm scripts; returns its URI."""
    key = f"{cluster}/slurm/topology.json"
    aws.client("s3").put_object(
        Bucket=bucket,
        Key=key,
        Body=json.dumps(doc, indent=1).encode(),
        ContentType="application/json",
    )
    return f"s3://{bucket}/{key}"


def summary(placed: list[Placed]) -> list[str]:
    """Lines for people: instances per spine, then each pool's tree."""
    from provisioner.catalog import load_catalog

    if not placed:
        return ["no running compute instance with a known topology"]
    spines = Counter(p.network_nodes[0] for p in placed if p.network_nodes)
    leaves = Counter(p.network_nodes[-1] for p in placed if p.network_nodes)
    lines = [f"{len(placed)} instances under {len(spines)} spine(s), {len(leaves)} leaf node(s)"]
    lines += [f"  spine {nn}: {n} instances" for nn, n in sorted(spines.items())]
    lines += [_tree_line(t) for t in pool_trees(placed, load_catalog())]
    return lines


def _tree_line(t: PoolTree) -> str:
    layers = " / ".join(str(n) for n in t.nodes_per_layer)
    line = (
        f"  pool {t.pool or '?'} ({t.instance_type}): {t.instances} instances, network nodes "
        f"per layer {layers}, at most {t.largest_group} under one bottom-layer node"
    )
    if t.ultraservers:
        sizes = ", ".join(f"{c}: {n}" for c, n in t.ultraservers)
        line += f"; {len(t.ultraservers)} UltraServer(s) ({sizes})"
    return line


@dataclass(frozen=True)
class Published:
    """What `fmctl topology` read and where it put it, and where the reservations of the
    spec `up` last applied sit (DescribeCapacityReservationTopology)."""

    document: dict[str, Any]
    lines: tuple[str, ...]
    where: str | None
    reservations: tuple[ReservedPlace, ...] = ()


#: EKS's node labels for the network layers (the EKS User Guide, "Place distributed AI/ML
#: workloads with network topology labels"; a fourth layer on types that have one).
EKS_LAYER_LABELS = tuple(f"topology.k8s.aws/network-node-layer-{n}" for n in (1, 2, 3, 4))


def publish_topology(target: Any, name: str, upload: bool = True) -> Published:
    """`fmctl topology`, also run by `up` once a topology-aware Slurm cluster exists: the
    running instances' places (published for Slurm where fmctl writes its topology), and
    where the applied spec's reservations sit."""
    from dataclasses import replace

    from provisioner.ops.reservation_topology import describe, plan_places
    from provisioner.ops.team import applied_spec

    published = _publish(target, name, upload)
    spec = applied_spec(target, name)
    if spec is None:
        return published
    places, unread = plan_places(target.aws(), spec)
    lines = [f"reservation {line}" for line in describe(places)]
    if unread:
        lines.append(f"where the reservations sit is unknown ({unread})")
    return replace(published, lines=(*published.lines, *lines), reservations=tuple(places))


def _publish(target: Any, name: str, upload: bool) -> Published:
    from provisioner.ops.listing import eks_state
    from provisioner.ops.target import make_context
    from provisioner.resources.storage import artifact_bucket

    aws = target.aws()
    instances = compute_instances(aws, name)
    if not instances and eks_state(aws, name) is not None:
        labels = ",".join(EKS_LAYER_LABELS)
        return Published(
            document(name, []),
            (
                f"{name} is an EKS cluster: EKS labels each node with its place in the network "
                f"(kubectl get nodes -L {labels}); nothing to publish",
            ),
            None,
        )
    if not instances:
        from provisioner.ops.listing import pcs_state

        if pcs_state(aws, name) is not None:
            placed = read_topology(aws, pcs_compute_instances(aws, name))
            return Published(
                document(name, placed),
                (
                    *summary(placed),
                    f"{name} is a PCS cluster: PCS writes its Slurm configuration itself "
                    "(no topology.conf of fmctl's), so nothing is published",
                ),
                None,
            )
    placed = read_topology(aws, instances)
    bucket = artifact_bucket(make_context(target, name))
    placed, carried = carry_over(placed, published_before(aws, bucket, name), instances)
    doc = document(name, placed)
    lines = summary(placed)
    if carried:
        lines.append(
            f"{carried} running instance(s) EC2 did not place (or name an UltraServer for) in "
            "this read keep the place published before"
        )
    where = None
    if upload and placed:
        where = publish(aws, bucket, name, doc)
    elif upload:
        # An empty topology would make the head node's topology.conf flat.
        lines.append("nothing published: the topology published before, if any, stays")
    return Published(doc, tuple(lines), where)
