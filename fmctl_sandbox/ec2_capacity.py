"""EC2's capacity APIs the sandbox answers itself (moto lacks them): the seeded capacity
reservations and Capacity Blocks (DescribeCapacityReservations), where they sit
(DescribeCapacityReservationTopology) and where moto's running instances sit
(DescribeInstanceTopology), with the layers and ids of ``topology``; and the two table
helpers the other shims share."""

from __future__ import annotations

from typing import Any, Protocol

from fmctl_sandbox import protocol as p
from fmctl_sandbox.protocol import Call
from fmctl_sandbox.topology import (
    RESERVATION_IDS_PER_CALL,
    TOPOLOGY_FAMILIES,
    NodePlace,
    network_nodes,
    reservation_places,
    ultraservers,
)

Answer = tuple[int, dict[str, str], bytes]


class World(Protocol):
    """What these handlers read of an account's shim state (``shims.World`` has it)."""

    account: str
    reservations: dict[tuple[str, str], dict[str, Any]]

    @property
    def eks(self) -> NodeGroups: ...


class NodeGroups(Protocol):
    """The EKS shim's node-group instances (``eks.Eks.instance_places``)."""

    def instance_places(self, region: str) -> list[tuple[str, str, str, NodePlace]]: ...


def in_region(table: dict[tuple[str, str], Any], region: str) -> dict[str, Any]:
    """One region's part of a table, by name or id."""
    return {key: item for (where, key), item in table.items() if where == region}


def ec2_backend(account: str, region: str) -> Any:
    """moto's EC2 backend of ``account`` in ``region``."""
    from moto.ec2.models import ec2_backends

    return ec2_backends[account][region]


def _reservations_asked(s: World, call: Call) -> list[dict[str, Any]] | Answer:
    """The region's reservations the call names (all of them when it names none), or EC2's
    error for an id it does not know."""
    ids = p.indexed(call.params, "CapacityReservationId")
    here = in_region(s.reservations, call.region)
    unknown = [i for i in ids if i not in here]
    if unknown:
        return p.ec2_error(
            400,
            "InvalidCapacityReservationId.NotFound",
            f"The capacity reservation ID '{unknown[0]}' does not exist",
        )
    return [r for key, r in here.items() if not ids or key in ids]


def describe_reservations(s: World, call: Call) -> Answer:
    """DescribeCapacityReservations over the seeded reservations."""
    items = _reservations_asked(s, call)
    if isinstance(items, tuple):
        return items
    return p.ec2_response("DescribeCapacityReservations", {"capacityReservationSet": items})


def describe_reservation_topology(s: World, call: Call) -> Answer:
    """DescribeCapacityReservationTopology (moto lacks it) over the seeded reservations."""
    ids = p.indexed(call.params, "CapacityReservationId")
    if len(ids) > RESERVATION_IDS_PER_CALL:
        return p.ec2_error(
            400,
            "InvalidParameterValue",
            f"at most {RESERVATION_IDS_PER_CALL} CapacityReservationIds per request",
        )
    asked = _reservations_asked(s, call)
    if isinstance(asked, tuple):
        return asked
    items = [reservation_places(s.account, r) for r in asked]
    return p.ec2_response("DescribeCapacityReservationTopology", {"capacityReservationSet": items})


def describe_instance_topology(s: World, call: Call) -> Answer:
    """DescribeInstanceTopology (moto lacks it) over moto's running instances."""
    ids = set(p.indexed(call.params, "InstanceId"))
    filters = p.query_filters(call.params)
    running = [
        inst
        for reservation in ec2_backend(s.account, call.region).all_reservations()
        for inst in reservation.instances
        if inst.state == "running" and inst.instance_type.split(".")[0] in TOPOLOGY_FAMILIES
    ]
    ultra = ultraservers(running, s.account)
    items = []
    for inst in running:
        family = inst.instance_type.split(".")[0]
        az = str(inst.availability_zone)
        if ids and inst.id not in ids:
            continue
        if "instance-type" in filters and inst.instance_type not in filters["instance-type"]:
            continue
        if "availability-zone" in filters and az not in filters["availability-zone"]:
            continue
        block, bottom, seed = ultra.get(inst.id, ("", "", inst.id))
        nodes = network_nodes(s.account, az, seed, family)
        if block:
            nodes[-1] = bottom
        item = {
            "instanceId": inst.id,
            "instanceType": inst.instance_type,
            "networkNodeSet": nodes,
            "availabilityZone": az,
            "zoneId": f"use1-az{ord(az[-1]) - 96}",
        }
        if block:
            item["capacityBlockId"] = block
        items.append(item)
    # The EKS node groups' instances (the sandbox makes them as nodes, not moto instances).
    for instance, itype, az, place in s.eks.instance_places(call.region):
        if not place.network or (ids and instance not in ids):
            continue
        if "instance-type" in filters and itype not in filters["instance-type"]:
            continue
        if "availability-zone" in filters and az not in filters["availability-zone"]:
            continue
        item = {
            "instanceId": instance,
            "instanceType": itype,
            "networkNodeSet": list(place.network),
            "availabilityZone": az,
            "zoneId": f"use1-az{ord(az[-1]) - 96}",
        }
        if place.block:
            item["capacityBlockId"] = place.block
        items.append(item)
    return p.ec2_response("DescribeInstanceTopology", {"instanceSet": items})
