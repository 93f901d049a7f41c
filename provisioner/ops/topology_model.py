"""One network-topology model, read from EC2 and projected for each scheduler.

EC2 describes each placed instance by its network nodes, top of the hierarchy first, one per
layer (3 layers for most topology types, 4 for p6-b200 and p6-b300: the catalog's
``networkLayers``), and an UltraServer's instances by one ``capacityBlockId``
(DescribeInstanceTopology). Network-node ids are hashed per account ("Instances from
different accounts running under the same server will return a different hashed list"), so
a model is only ever compared with one read from the same account.

Instances EC2 does not answer for (not yet ``running``, answers not yet propagated) leave
holes; ``carry_over`` fills them from the topology published before, so a read taken while
nodes boot never replaces a good topology with a partial one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from provisioner.catalog import Catalog


@dataclass(frozen=True)
class Placed:
    """One compute instance and the network nodes above it (top first)."""

    instance_id: str
    ip: str
    instance_type: str
    network_nodes: tuple[str, ...]
    #: The queue / node group the instance serves ("" when its tags do not say).
    pool: str = ""
    #: An UltraServer's instances share one (its NVLink domain); None elsewhere.
    capacity_block_id: str | None = None


@dataclass(frozen=True)
class PoolTree:
    """What one pool's placement looks like, for people and for `-o json`."""

    pool: str
    instance_type: str
    #: Network layers EC2 gives the type (the catalog's); None: a type it does not place.
    layers: int | None
    instances: int
    #: Distinct network nodes at each layer, top first.
    nodes_per_layer: tuple[int, ...]
    #: The most instances under one bottom-layer node (the tightest group a job can get).
    largest_group: int
    #: UltraServers (capacityBlockId) and their instance counts.
    ultraservers: tuple[tuple[str, int], ...]

    def as_json(self) -> dict[str, Any]:
        """The tree as `fmctl topology -o json` prints it."""
        return {
            "pool": self.pool,
            "instanceType": self.instance_type,
            "layers": self.layers,
            "instances": self.instances,
            "nodesPerLayer": list(self.nodes_per_layer),
            "largestGroup": self.largest_group,
            "ultraServers": [{"capacityBlockId": c, "instances": n} for c, n in self.ultraservers],
        }


def pool_trees(placed: Iterable[Placed], catalog: Catalog) -> tuple[PoolTree, ...]:
    """One tree per pool (by pool name, then instance type)."""
    groups: dict[tuple[str, str], list[Placed]] = {}
    for p in placed:
        groups.setdefault((p.pool, p.instance_type), []).append(p)
    trees = []
    for (pool, itype), members in sorted(groups.items()):
        known = catalog.get(itype)
        depth = known.network_layers.count if known and known.network_layers else None
        width = max((len(p.network_nodes) for p in members), default=0)
        per_layer = tuple(
            len({p.network_nodes[i] for p in members if len(p.network_nodes) > i})
            for i in range(width)
        )
        bottoms = Counter(p.network_nodes[-1] for p in members if p.network_nodes)
        ultra = Counter(p.capacity_block_id for p in members if p.capacity_block_id)
        trees.append(
            PoolTree(
                pool,
                itype,
                depth,
                len(members),
                per_layer,
                max(bottoms.values(), default=0),
                tuple(sorted(ultra.items())),
            )
        )
    return tuple(trees)


def carry_over(
    now: list[Placed], previous: Mapping[str, Any] | None, running: Iterable[str]
) -> tuple[list[Placed], int]:
    """``now`` with the holes filled from the ``previous`` document: running instances EC2
    did not place this time keep their earlier place, and an UltraServer instance whose
    capacityBlockId has not propagated yet keeps the one it had. Returns the placements and
    how many were carried over."""
    if not previous:
        return now, 0
    before = {
        str(i.get("instanceId")): i for i in previous.get("instances", []) if i.get("instanceId")
    }
    out, carried = [], 0
    for p in now:
        old = before.get(p.instance_id)
        if p.capacity_block_id is None and old and old.get("capacityBlockId"):
            p = replace(p, capacity_block_id=str(old["capacityBlockId"]))
            carried += 1
        out.append(p)
    have = {p.instance_id for p in out}
    for instance_id in sorted(set(running) - have):
        old = before.get(instance_id)
        if old and old.get("networkNodes"):
            out.append(from_json(old))
            carried += 1
    return out, carried


def to_json(p: Placed) -> dict[str, Any]:
    """One instance in topology.json (what the head node's topology.py reads)."""
    return {
        "instanceId": p.instance_id,
        "ip": p.ip,
        "instanceType": p.instance_type,
        "pool": p.pool,
        "networkNodes": list(p.network_nodes),
        "capacityBlockId": p.capacity_block_id,
    }


def from_json(item: Mapping[str, Any]) -> Placed:
    """The inverse of ``to_json`` (for a document published before)."""
    block = item.get("capacityBlockId")
    return Placed(
        str(item.get("instanceId", "")),
        str(item.get("ip", "")),
        str(item.get("instanceType", "")),
        tuple(str(n) for n in item.get("networkNodes", [])),
        str(item.get("pool", "")),
        str(block) if block else None,
    )
