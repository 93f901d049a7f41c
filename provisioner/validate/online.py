"""Online checks, run by `plan` and `up` before anything is created: the AZ offers each
instance type; each reservation or capacity block exists, is active (or says when it starts),
matches type and AZ and is large enough; the P-instance vCPU quota leaves room.

Problems carry spec paths, so they print located in the file like the offline ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from provisioner.catalog import Catalog
from provisioner.drivers.aws import Aws, error_code
from provisioner.spec.model import ClusterSpec
from provisioner.spec.problems import Problem

#: Service Quotas: "Running On-Demand P instances" (vCPUs) and "All P Spot Instance Requests".
P_ON_DEMAND_QUOTA = ("ec2", "L-417A185B")
P_SPOT_QUOTA = ("ec2", "L-7212CCBC")


def _offerings(aws: Aws, spec: ClusterSpec) -> Iterator[Problem]:
    ec2 = aws.client("ec2")
    az = spec.network.availability_zone
    types = sorted({p.instance_type for p in spec.compute.gpu_pools})
    offered = {
        o["InstanceType"]
        for o in ec2.describe_instance_type_offerings(
            LocationType="availability-zone",
            Filters=[
                {"Name": "location", "Values": [az]},
                {"Name": "instance-type", "Values": types},
            ],
        )["InstanceTypeOfferings"]
    }
    for i, pool in enumerate(spec.compute.gpu_pools):
        if pool.instance_type not in offered and pool.capacity.type not in (
            "reservation",
            "capacity-block",
        ):
            yield Problem(
                "az-offering",
                f"{az} does not offer {pool.instance_type}",
                ("compute", "gpuPools", i, "instanceType"),
                hint="choose another availability zone (aws ec2 "
                "describe-instance-type-offerings --location-type availability-zone)",
            )


def _reservations(aws: Aws, spec: ClusterSpec) -> Iterator[Problem]:
    ec2 = aws.client("ec2")
    for i, pool in enumerate(spec.compute.gpu_pools):
        rid = pool.capacity.reservation_id
        if rid is None:
            continue
        path = ("compute", "gpuPools", i, "capacity", "reservationId")
        try:
            (res,) = ec2.describe_capacity_reservations(CapacityReservationIds=[rid])[
                "CapacityReservations"
            ]
        except Exception as exc:
            if error_code(exc) and "NotFound" in (error_code(exc) or ""):
                yield Problem(
                    "reservation-missing",
                    f"{rid} does not exist in {spec.metadata.region}",
                    path,
                    hint="check the id and the region; Capacity Blocks are bought in "
                    "the EC2 console under Capacity Reservations",
                )
                continue
            raise
        yield from _reservation_fit(
            res,
            pool.instance_type,
            pool.count,
            spec.network.availability_zone,
            path,
            pool.capacity.type == "capacity-block",
        )


def _reservation_fit(
    res: dict[str, Any], itype: str, count: int, az: str, path: tuple[Any, ...], block: bool
) -> Iterator[Problem]:
    rid = res["CapacityReservationId"]
    if res.get("InstanceType") != itype:
        yield Problem(
            "reservation-mismatch",
            f"{rid} is for {res.get('InstanceType')}, not {itype}",
            path,
            hint="use the reservation's type, or another reservation",
        )
    if res.get("AvailabilityZone") != az:
        yield Problem(
            "reservation-mismatch",
            f"{rid} is in {res.get('AvailabilityZone')}, not {az}",
            path,
            hint=f"set network.availabilityZone to {res.get('AvailabilityZone')}",
        )
    state = res.get("State")
    if state == "scheduled" or (block and state == "payment-pending"):
        yield Problem(
            "reservation-not-active",
            f"{rid} is {state}; it starts at {res.get('StartDate', 'its start time')}",
            path,
            level="warning",
            hint="`fmctl up` can create everything else now; nodes join when it starts",
        )
    elif state not in ("active", None):
        yield Problem(
            "reservation-not-active",
            f"{rid} is {state}",
            path,
            hint="only an active (or scheduled) reservation can host instances",
        )
    total = int(res.get("TotalInstanceCount", 0))
    if total < count:
        yield Problem(
            "reservation-too-small",
            f"{rid} holds {total} instances; the pool asks for {count}",
            path,
            hint=f"set count to at most {total}",
        )


def _quota(aws: Aws, spec: ClusterSpec, catalog: Catalog) -> Iterator[Problem]:
    needed = {"on-demand": 0, "spot": 0}
    for pool in spec.compute.gpu_pools:
        itype = catalog.get(pool.instance_type)
        if itype is None or not itype.name.startswith("p"):
            continue
        if pool.capacity.type == "on-demand":
            needed["on-demand"] += itype.cpu.vcpus * pool.count
        elif pool.capacity.type == "spot":
            needed["spot"] += itype.cpu.vcpus * pool.count
    quotas = aws.client("service-quotas")
    for kind, (service, code) in (("on-demand", P_ON_DEMAND_QUOTA), ("spot", P_SPOT_QUOTA)):
        if not needed[kind]:
            continue
        try:
            value = quotas.get_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]["Value"]
        except Exception as exc:
            if error_code(exc) in ("NoSuchResourceException", "AccessDeniedException"):
                continue  # not visible to these credentials: AWS will say at launch
            raise
        if needed[kind] > value:
            yield Problem(
                "quota",
                f"the pools need {needed[kind]} {kind} P-instance vCPUs; the "
                f"quota in {spec.metadata.region} is {value:g}",
                ("compute", "gpuPools"),
                hint=f"request an increase of quota {code} in Service Quotas, or "
                "use a reservation or capacity block (they do not count against it)",
            )


def online_problems(aws: Aws, spec: ClusterSpec, catalog: Catalog) -> list[Problem]:
    """Every online problem of a resolved spec."""
    return [*_offerings(aws, spec), *_reservations(aws, spec), *_quota(aws, spec, catalog)]
