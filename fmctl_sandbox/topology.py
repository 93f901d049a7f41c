"""EC2's network topology as the sandbox gives it: which families EC2 places, how many
layers, UltraServers (DescribeInstanceTopology for moto's instances, and the topology labels
EKS puts on the sandbox's Kubernetes nodes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Instance families DescribeInstanceTopology answers for (the rest: not in the answer).
TOPOLOGY_FAMILIES = (
    "p3dn",
    "p4d",
    "p4de",
    "p5",
    "p5e",
    "p5en",
    "p6-b200",
    "p6-b300",
    "p6e-gb200",
    "trn1",
    "trn1n",
    "trn2",
    "g6",
)


#: Families with a fourth network layer (the EC2 User Guide, "Prerequisites for Amazon EC2
#: topology": p6-b200 and p6-b300 return 4 network nodes, the others 3).
FOUR_LAYERS = ("p6-b200", "p6-b300")
#: UltraServer families and their instances per UltraServer (18 p6e-gb200.36xlarge: the
#: SageMaker HyperPod guide, "UltraServer architecture"). EC2 names an UltraServer's
#: instances by one capacityBlockId (DescribeInstanceTopology's documentation).
ULTRASERVERS = {"p6e-gb200": 18}


def node_id(account: str, text: str) -> str:
    """A network node id, hashed per account as EC2's are: never equal across accounts."""
    import hashlib

    return "nn-" + hashlib.sha256(f"{account}/{text}".encode()).hexdigest()[:17]


def network_nodes(account: str, az: str, instance_id: str, family: str) -> list[str]:
    """Top to bottom, as EC2 lists them: one spine per AZ, 4 blocks of 4 nodes under it,
    and on 4-layer families 4 more under each of those. Stable per instance, so answers
    repeat across calls; a node always sits under one parent."""
    import hashlib

    leaf = int(hashlib.sha256(instance_id.encode()).hexdigest(), 16) % 64
    nodes = [node_id(account, f"{az}/1"), node_id(account, f"{az}/2/{leaf // 16}")]
    nodes.append(node_id(account, f"{az}/3/{leaf // 4}"))
    if family in FOUR_LAYERS:
        nodes.append(node_id(account, f"{az}/4/{leaf}"))
    return nodes


def ultraservers(instances: list[Any], account: str) -> dict[str, tuple[str, str, str]]:
    """UltraServer instances by id: (capacityBlockId, the UltraServer's bottom network node,
    the instance whose place above that node the whole UltraServer shares).
    In launch order, each UltraServer filled before the next (the sandbox's choice: how EC2
    assigns instances to UltraServers is not documented)."""
    out: dict[str, tuple[str, str, str]] = {}
    for family, size in ULTRASERVERS.items():
        by_az: dict[str, list[Any]] = {}
        for inst in instances:
            if inst.instance_type.split(".")[0] == family:
                by_az.setdefault(str(inst.availability_zone), []).append(inst)
        for az, members in by_az.items():
            members.sort(key=lambda i: (str(i.launch_time), i.id))
            for n, inst in enumerate(members):
                group = f"{az}/ultraserver/{n // size}"
                block = "cb-" + node_id(account, group)[3:]
                first = members[n - n % size].id
                out[inst.id] = (block, node_id(account, f"{group}/3"), first)
    return out


#: EKS's labels for an instance's network nodes, top first (the EKS User Guide, "Place
#: distributed AI/ML workloads with network topology labels").
LAYER_LABEL = "topology.k8s.aws/network-node-layer-{}"


def layer_labels(account: str, zone: str, instance_id: str, instance_type: str) -> dict[str, str]:
    """The topology labels of a node of ``instance_type`` (none for families EC2 does not
    place)."""
    family = instance_type.split(".")[0]
    if family not in TOPOLOGY_FAMILIES:
        return {}
    nodes = network_nodes(account, zone, instance_id, family)
    return {LAYER_LABEL.format(i): node for i, node in enumerate(nodes, 1)}


#: Reservation states EC2 places (DescribeCapacityReservationTopology's NetworkNodes: empty
#: for an unsupported type or a state other than active or pending).
PLACED_STATES = ("active", "pending")
#: At most this many ids per call (its CapacityReservationIds constraint).
RESERVATION_IDS_PER_CALL = 10


def reservation_places(account: str, reservation: dict[str, Any]) -> dict[str, Any]:
    """DescribeCapacityReservationTopology's entry for one reservation (the sandbox's record
    of it, DescribeCapacityReservations' fields): its network nodes, seeded by its id so
    each call answers the same, and an UltraServer block's capacityBlockId."""
    rid = str(reservation["capacityReservationId"])
    itype = str(reservation.get("instanceType", ""))
    family = itype.split(".")[0]
    az = str(reservation.get("availabilityZone", ""))
    item: dict[str, Any] = {
        "capacityReservationId": rid,
        "state": reservation.get("state", "active"),
        "instanceType": itype,
        "availabilityZone": az,
        "availabilityZoneId": f"use1-az{ord(az[-1]) - 96}" if az else "",
    }
    if family in TOPOLOGY_FAMILIES and item["state"] in PLACED_STATES:
        item["networkNodeSet"] = network_nodes(account, az, rid, family)
        if family in ULTRASERVERS:
            item["capacityBlockId"] = "cb-" + node_id(account, f"{az}/block/{rid}")[3:]
    return item


@dataclass(frozen=True)
class NodePlace:
    """Where a node-group instance sits: its network nodes (top first), its UltraServer's
    capacityBlockId and its NVLink clique ("" outside UltraServers)."""

    network: tuple[str, ...]
    block: str = ""
    clique: str = ""


def node_group_places(
    account: str, zone: str, nodegroup: str, itype: str, slots: list[tuple[int, str]]
) -> dict[str, NodePlace]:
    """The places of a node group's instances (``slots``: (index, instance id), as
    ``eks.node_slots`` gives them). An UltraServer family's instances go 18 to an UltraServer
    by their index (the sandbox's choice, as for moto's instances): all of one share its
    network nodes, its capacityBlockId and its clique (the DRA driver's ``<cluster UUID>.
    <clique id>``, read from each GPU's fabric info on a real node)."""
    import uuid

    family = itype.split(".")[0]
    size = ULTRASERVERS.get(family)
    out: dict[str, NodePlace] = {}
    for index, instance in slots:
        if family not in TOPOLOGY_FAMILIES:
            out[instance] = NodePlace(())
        elif size:
            # eks.node_slots numbers a generation's nodes from 10 + 64 x generation.
            generation, slot = divmod(index - 10, 64)
            server = f"{zone}/{nodegroup}/{generation}/ultraserver/{slot // size}"
            fabric = uuid.uuid5(uuid.NAMESPACE_URL, f"{account}/{zone}/{nodegroup}")
            out[instance] = NodePlace(
                tuple(network_nodes(account, zone, server, family)),
                "cb-" + node_id(account, server)[3:],
                f"{fabric}.{generation * 4 + slot // size}",
            )
        else:
            out[instance] = NodePlace(tuple(network_nodes(account, zone, instance, family)))
    return out
