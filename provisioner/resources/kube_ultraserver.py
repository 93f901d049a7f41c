"""Each UltraServer node's NVLink domain as a node label, for Kueue's topology: plain EKS
labels a node with its network layers but not with its UltraServer (HyperPod's
``topology.k8s.aws/ultraserver-id`` is HyperPod's), while EC2 names every instance of one
UltraServer by one capacityBlockId (DescribeInstanceTopology). `up` labels each
UltraServer node it finds without ``fmctl.dev/ultraserver`` with that id (its instance from
the node's ``spec.providerID``, ``aws:///ZONE/INSTANCE``, as the AWS cloud provider writes
it); a node whose capacityBlockId EC2 has not given yet is waited for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from provisioner.drivers.kube import KubeApi
from provisioner.render.queueing import ULTRASERVER_LABEL
from provisioner.resources.context import Context
from provisioner.resources.kube_health import POOL_LABEL, PoolCheck

#: DescribeInstanceTopology takes at most 100 instance ids per call (its InstanceIds
#: constraint in botocore's EC2 model).
IDS_PER_CALL = 100


def instance_of(node: dict[str, Any]) -> str | None:
    """The EC2 instance behind a node, from its provider id."""
    provider = str((node.get("spec") or {}).get("providerID", ""))
    last = provider.rsplit("/", 1)[-1]
    return last if provider.startswith("aws://") and last.startswith("i-") else None


def label_ultraservers(ctx: Context, api: KubeApi, pools: Sequence[PoolCheck]) -> list[str]:
    """Label the UltraServer pools' unlabeled nodes; what could not be labeled yet."""
    waiting: dict[str, str] = {}
    for pool in pools:
        if not pool.ultra_server:
            continue
        for node in api.list(
            "v1", "Node", selector=f"{POOL_LABEL}={pool.pool},!{ULTRASERVER_LABEL}"
        ):
            instance = instance_of(node)
            if instance is not None:
                waiting[instance] = node["metadata"]["name"]
    if not waiting:
        return []
    ec2 = ctx.aws.client("ec2")
    blocks: dict[str, str] = {}
    ids = sorted(waiting)
    for start in range(0, len(ids), IDS_PER_CALL):
        pages = ec2.get_paginator("describe_instance_topology").paginate(
            InstanceIds=ids[start : start + IDS_PER_CALL]
        )
        for page in pages:
            for item in page["Instances"]:
                if item.get("CapacityBlockId"):
                    blocks[item["InstanceId"]] = item["CapacityBlockId"]
    problems = []
    for instance, node_name in sorted(waiting.items(), key=lambda kv: kv[1]):
        if instance in blocks:
            api.label(node_name, {ULTRASERVER_LABEL: blocks[instance]})
        else:
            problems.append(
                f"node {node_name}: EC2 gives no UltraServer (capacityBlockId) for {instance} yet"
            )
    return problems
