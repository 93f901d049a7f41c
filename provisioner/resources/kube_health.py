"""Is the in-cluster stack running, and does every GPU node show its devices? What `up`
waits for and checks, read from the cluster's API (lists by label, never one call per
object)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from provisioner.drivers.kube import KubeApi
from provisioner.render.queueing import ULTRASERVER_LABEL
from provisioner.resources.tags import OWNER_TAG

GPU, EFA = "nvidia.com/gpu", "vpc.amazonaws.com/efa"
POOL_LABEL = "fmctl.dev/pool"
#: Kinds whose readiness `up` waits for.
WATCHED = (("apps/v1", "DaemonSet"), ("apps/v1", "Deployment"), ("v1", "PersistentVolumeClaim"))


@dataclass(frozen=True)
class PoolCheck:
    """What every node of a pool must advertise."""

    pool: str
    count: int
    gpus: int
    efa: int
    #: UltraServer nodes: each must carry its UltraServer's label (Kueue places by it).
    ultra_server: bool = False
    #: The Cluster Autoscaler sizes the pool: any number of nodes up to ``count`` is right.
    autoscaled: bool = False

    @property
    def expected(self) -> int:
        """The node count `up` checks (``AUTOSCALED``: whatever the autoscaler has now)."""
        return AUTOSCALED if self.autoscaled else self.count


#: The node count of an autoscaled pool, live and desired alike: not `up`'s to hold.
AUTOSCALED = -1


def not_ready(api: KubeApi, objects: list[dict[str, Any]], cluster: str) -> list[str]:
    """What of the applied stack does not run yet, as readable lines (one list call per
    kind, across namespaces, by fmctl's label)."""
    wanted = {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objects
    }
    live: dict[tuple[str, str, str], dict[str, Any]] = {}
    for api_version, kind in WATCHED:
        for obj in api.list(api_version, kind, selector=f"{OWNER_TAG}={cluster}"):
            meta = obj["metadata"]
            live[(kind, meta.get("namespace", ""), meta["name"])] = obj
    waiting = []
    for key in sorted(k for k in wanted if k[0] in {kind for _, kind in WATCHED}):
        kind, namespace, name = key
        where = f"{kind} {namespace}/{name}"
        if key not in live:
            waiting.append(f"{where}: missing")
            continue
        current = live[key]
        status = current.get("status") or {}
        if kind == "DaemonSet":
            want, ready = status.get("desiredNumberScheduled", 0), status.get("numberReady", 0)
            if ready < want:
                waiting.append(f"{where}: {ready}/{want} ready")
        elif kind == "Deployment":
            want = current.get("spec", {}).get("replicas", 1)
            ready = status.get("readyReplicas", 0)
            if ready < want:
                waiting.append(f"{where}: {ready}/{want} ready")
        elif status.get("phase") != "Bound":
            waiting.append(f"{where}: {status.get('phase', 'Pending')}")
    return waiting


def _ready(node: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in node.get("status", {}).get("conditions", [])
    )


def node_problems(api: KubeApi, pools: Sequence[PoolCheck]) -> list[str]:
    """Every GPU node Ready and advertising its type's GPUs and EFA devices, per pool."""
    problems = []
    for pool in pools:
        nodes = [
            n
            for n in api.list("v1", "Node", selector=f"{POOL_LABEL}={pool.pool}")
            if not n.get("spec", {}).get("unschedulable")
        ]
        if len(nodes) != pool.count and not pool.autoscaled:
            problems.append(f"pool {pool.pool}: {len(nodes)} of {pool.count} nodes joined")
        for n in nodes:
            name = n["metadata"]["name"]
            alloc = n.get("status", {}).get("allocatable", {})
            gpus, efa = int(alloc.get(GPU, 0)), int(alloc.get(EFA, 0))
            if not _ready(n):
                problems.append(f"node {name} ({pool.pool}) is not Ready")
            if gpus != pool.gpus:
                problems.append(
                    f"node {name} ({pool.pool}) advertises {gpus} {GPU}, expected {pool.gpus}"
                )
            if pool.ultra_server and ULTRASERVER_LABEL not in (n["metadata"].get("labels") or {}):
                problems.append(f"node {name} ({pool.pool}) has no {ULTRASERVER_LABEL} label yet")
            if efa != pool.efa:
                problems.append(
                    f"node {name} ({pool.pool}) advertises {efa} {EFA}, expected {pool.efa}: "
                    "NCCL would fall back to TCP; check the EFA device plugin there, or drain "
                    f"and replace the node (`kubectl drain {name}`)"
                )
    return problems


def pool_nodes(api: KubeApi, pools: Sequence[PoolCheck]) -> frozenset[tuple[str, int, int, int]]:
    """(pool, nodes, GPUs, EFA devices) of the Ready, schedulable nodes of each pool, by what
    they advertise (a pool whose nodes all look alike has one entry; an empty pool has one
    with no nodes)."""
    out: dict[tuple[str, int, int], int] = {}
    for pool in pools:
        for n in api.list("v1", "Node", selector=f"{POOL_LABEL}={pool.pool}"):
            if not _ready(n) or n.get("spec", {}).get("unschedulable"):
                continue
            if pool.ultra_server and ULTRASERVER_LABEL not in (n["metadata"].get("labels") or {}):
                continue  # not placed by Kueue until `up` labels it
            alloc = n.get("status", {}).get("allocatable", {})
            key = (pool.pool, int(alloc.get(GPU, 0)), int(alloc.get(EFA, 0)))
            out[key] = out.get(key, 0) + 1
        if not any(key[0] == pool.pool for key in out):
            out[(pool.pool, pool.gpus, pool.efa)] = 0
    autoscaled = {p.pool for p in pools if p.autoscaled}
    return frozenset(
        (pool, AUTOSCALED if pool in autoscaled else count, gpus, efa)
        for (pool, gpus, efa), count in out.items()
    )
