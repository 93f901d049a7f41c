"""Online checks, run by `plan` and `up` before anything is created: the AZ offers each
instance type; each reservation or capacity block exists, is active (or says when it starts),
matches type, platform and AZ and is large enough; the P-instance vCPU quota leaves room; the
file system's S3 data bucket exists in the cluster's region.

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
    platform = res.get("InstancePlatform")
    if platform not in (None, "Linux/UNIX"):
        yield Problem(
            "reservation-mismatch",
            f"{rid} is for {platform} instances; GPU nodes run Linux/UNIX",
            path,
            hint="use a reservation whose platform is Linux/UNIX",
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


def _data_bucket(aws: Aws, spec: ClusterSpec) -> Iterator[Problem]:
    """The S3 bucket of the file system's data repository exists, is reachable and is in the
    cluster's region (FSx links a bucket of its own region only)."""
    fsx = spec.storage.fsx_lustre
    if fsx is None or fsx.s3 is None or fsx.file_system_id is not None:
        return
    s3 = aws.client("s3")
    checked: set[str] = set()
    for field in ("import_path", "export_path"):
        uri = getattr(fsx.s3, field)
        bucket = str(uri or "").removeprefix("s3://").split("/", 1)[0]
        if not bucket or bucket in checked:
            continue
        checked.add(bucket)
        key = "importPath" if field == "import_path" else "exportPath"
        path = ("storage", "fsxLustre", "s3", key)
        try:
            where = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint") or "us-east-1"
        except Exception as exc:
            code = error_code(exc)
            if code in ("NoSuchBucket", "404"):
                yield Problem(
                    "data-bucket-missing",
                    f"bucket {bucket} does not exist",
                    path,
                    hint="create it, or correct the name (fmctl links it; it never creates "
                    "or deletes your data bucket)",
                )
                continue
            if code in ("AccessDenied", "403"):
                yield Problem(
                    "data-bucket-missing",
                    f"bucket {bucket} is not readable with these credentials",
                    path,
                    hint="FSx reads it with its service role; fmctl needs s3:GetBucketLocation",
                )
                continue
            raise
        if where != spec.metadata.region:
            yield Problem(
                "data-bucket-region",
                f"bucket {bucket} is in {where}; the cluster is in {spec.metadata.region}",
                path,
                hint="FSx for Lustre links buckets of its own region only: replicate the "
                "data to a bucket there",
            )


def online_problems(aws: Aws, spec: ClusterSpec, catalog: Catalog) -> list[Problem]:
    """Every online problem of a resolved spec."""
    return [
        *_offerings(aws, spec),
        *_reservations(aws, spec),
        *_quota(aws, spec, catalog),
        *_data_bucket(aws, spec),
    ]
