"""Where reserved capacity sits before anything launches: EC2's
DescribeCapacityReservationTopology (botocore's ``ec2`` model: one entry per reservation,
its ``NetworkNodes`` top layer first, a ``CapacityBlockId`` for UltraServer blocks, and
its ``State``). `fmctl plan` and `fmctl topology` say, per pool on a reservation or a
Capacity Block, under which network nodes it sits and which pools share a node (the
lower the shared layer, the shorter the path between them).

Read-only, like everything `plan` calls. Network-node ids are hashed per account ("Amazon
EC2 instance topology" in the EC2 User Guide): they are compared within one account only,
which is all a spec's pools ever are. The API answers for the types instance topology
supports, and only for reservations ``active`` or ``pending`` (its NetworkNodes
documentation): a Capacity Block before its start is shown unplaced, never as an error.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from provisioner.drivers.aws import Aws, error_code
from provisioner.spec.model import ClusterSpec

if TYPE_CHECKING:
    from types_boto3_ec2.type_defs import (
        CapacityReservationTopologyTypeDef,
        DescribeCapacityReservationTopologyRequestTypeDef,
    )

#: DescribeCapacityReservationTopology takes at most 10 reservation ids per call (its
#: CapacityReservationIds constraint), and botocore has no paginator for it: NextToken.
IDS_PER_CALL = 10


@dataclass(frozen=True)
class ReservedPlace:
    """One pool's reservation and where EC2 has put it (``network_nodes`` empty: not placed,
    or not answered)."""

    pool: str
    reservation_id: str
    instance_type: str
    state: str
    network_nodes: tuple[str, ...]
    capacity_block_id: str | None = None

    def as_data(self) -> dict[str, Any]:
        """The JSON form (plan -o json, topology -o json)."""
        return {
            "pool": self.pool,
            "reservationId": self.reservation_id,
            "instanceType": self.instance_type,
            "state": self.state,
            "networkNodes": list(self.network_nodes),
            "capacityBlockId": self.capacity_block_id,
        }


@dataclass(frozen=True)
class Shared:
    """Two pools' reservations and the deepest network layer (1 = top) they share (0: none)."""

    first: str
    second: str
    layer: int
    node: str = ""


def reserved_pools(spec: ClusterSpec) -> list[tuple[str, str, str]]:
    """(pool, reservation id, instance type) of every pool on a reservation or block."""
    return [
        (p.name, p.capacity.reservation_id, p.instance_type)
        for p in spec.compute.gpu_pools
        if p.capacity.reservation_id
    ]


def read_places(aws: Aws, pools: list[tuple[str, str, str]]) -> list[ReservedPlace]:
    """Each pool's reservation with its network nodes, in the spec's pool order."""
    ec2 = aws.client("ec2")
    ids = sorted({rid for _, rid, _ in pools})
    found: dict[str, CapacityReservationTopologyTypeDef] = {}
    for start in range(0, len(ids), IDS_PER_CALL):
        chunk = ids[start : start + IDS_PER_CALL]
        token: str | None = None
        while True:
            request: DescribeCapacityReservationTopologyRequestTypeDef = {
                "CapacityReservationIds": chunk
            }
            if token:
                request["NextToken"] = token
            page = ec2.describe_capacity_reservation_topology(**request)
            for item in page.get("CapacityReservations", []):
                found[item["CapacityReservationId"]] = item
            token = page.get("NextToken")
            if not token:
                break
    out = []
    for pool, rid, itype in pools:
        item = found.get(rid, {})
        out.append(
            ReservedPlace(
                pool,
                rid,
                item.get("InstanceType", itype),
                item.get("State", "not placed"),
                tuple(item.get("NetworkNodes", [])),
                item.get("CapacityBlockId") or None,
            )
        )
    return out


def plan_places(aws: Aws, spec: ClusterSpec) -> tuple[list[ReservedPlace], str | None]:
    """``read_places`` for the spec's reserved pools, and why it could not read them (an
    account or a region without the API, a missing permission) instead of failing plan."""
    pools = reserved_pools(spec)
    if not pools:
        return [], None
    try:
        return read_places(aws, pools), None
    except Exception as exc:  # plan shows what it could not read; it never stops on it
        code = error_code(exc)
        if code is None:
            raise
        return [], f"DescribeCapacityReservationTopology: {code}"


def shared(places: Iterable[ReservedPlace]) -> list[Shared]:
    """Every pair of placed reservations and the deepest layer they share."""
    placed = [p for p in places if p.network_nodes]
    out = []
    for i, a in enumerate(placed):
        for b in placed[i + 1 :]:
            layer, node = 0, ""
            for depth, (x, y) in enumerate(zip(a.network_nodes, b.network_nodes, strict=False)):
                if x != y:
                    break
                layer, node = depth + 1, x
            out.append(Shared(a.pool, b.pool, layer, node))
    return out


def describe(places: list[ReservedPlace]) -> list[str]:
    """What plan and topology print: one line per pool, one per pair of pools."""
    lines = []
    for p in places:
        if not p.network_nodes:
            lines.append(f"{p.pool}: {p.reservation_id} ({p.state}): EC2 gives no placement")
            continue
        where = " > ".join(p.network_nodes)
        block = f"; UltraServer {p.capacity_block_id}" if p.capacity_block_id else ""
        lines.append(
            f"{p.pool}: {p.reservation_id} ({p.state}) under {len(p.network_nodes)} network "
            f"nodes {where}{block}"
        )
    for s in shared(places):
        if s.layer:
            lines.append(f"{s.first} and {s.second} share layer {s.layer} ({s.node})")
        else:
            lines.append(f"{s.first} and {s.second} share no network node (separate spines)")
    return lines
