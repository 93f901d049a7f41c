"""What the sandbox needs before it can stand in for an account: the reservations a spec
names (matching it), the S3 bucket its file system links, and ParallelCluster's official
images. Each is said aloud, so nobody mistakes it for the real thing."""

from __future__ import annotations

from typing import Any

from provisioner.ops.target import Target, pcluster_command, sandbox_validates_only
from provisioner.spec.model import ClusterSpec


def seed_sandbox(spec: ClusterSpec, target: Target) -> list[str]:
    """Seed the sandbox for ``spec``; what was seeded, one line each."""
    from provisioner.sandbox import daemon

    info = daemon.running(target.home)
    assert info is not None, "the sandbox was started moments ago"
    said = _reservations(spec, target, info)
    said += _data_bucket(spec, target)
    _parallelcluster_images(spec, target, info)
    return said


def _reservations(spec: ClusterSpec, target: Target, info: dict[str, Any]) -> list[str]:
    from provisioner.sandbox import daemon

    ec2 = target.aws().client("ec2")
    said = []
    for pool in spec.compute.gpu_pools:
        rid = pool.capacity.reservation_id
        if rid is None:
            continue
        try:
            ec2.describe_capacity_reservations(CapacityReservationIds=[rid])
            continue
        except Exception:  # not there yet: seed it
            pass
        daemon.control(
            info,
            "/_fmctl/seed/reservation",
            {
                "capacityReservationId": rid,
                "instanceType": pool.instance_type,
                "availabilityZone": spec.network.availability_zone,
                "totalInstanceCount": pool.count,
                "availableInstanceCount": pool.count,
                "state": "active",
                "reservationType": "capacity-block"
                if pool.capacity.type == "capacity-block"
                else "default",
            },
        )
        said.append(
            f"seeded {rid} ({pool.count} x {pool.instance_type} in "
            f"{spec.network.availability_zone})"
        )
    return said


def _data_bucket(spec: ClusterSpec, target: Target) -> list[str]:
    """The S3 bucket a file system links stands for the user's data: in the sandbox it is
    created (untagged, so no `down` ever deletes it) when missing."""
    from provisioner.drivers.aws import error_code

    fsx = spec.storage.fsx_lustre
    if fsx is None or fsx.s3 is None or fsx.file_system_id is not None:
        return []
    s3 = target.aws().client("s3")
    said = []
    for uri in (fsx.s3.import_path, fsx.s3.export_path):
        bucket = str(uri or "").removeprefix("s3://").split("/", 1)[0]
        if not bucket:
            continue
        try:
            s3.head_bucket(Bucket=bucket)
            continue
        except Exception:  # not there yet: make it
            pass
        where = spec.metadata.region
        extra = (
            {}
            if where == "us-east-1"
            else {"CreateBucketConfiguration": {"LocationConstraint": where}}
        )
        try:
            s3.create_bucket(Bucket=bucket, **extra)
        except Exception as exc:  # another sandbox run made it meanwhile
            if error_code(exc) != "BucketAlreadyOwnedByYou":
                raise
            continue
        said.append(f"created data bucket {bucket} (it stands for yours; never deleted)")
    return said


def _parallelcluster_images(spec: ClusterSpec, target: Target, info: dict[str, Any]) -> None:
    """ParallelCluster's validators look its official AMI up among Amazon's images, by its
    version; the emulator has none, so the sandbox registers one per architecture."""
    from provisioner.drivers.pcluster import IMAGE_OS_PART, ParallelCluster
    from provisioner.sandbox import daemon

    command = pcluster_command(target)
    if spec.scheduler != "slurm" or command is None or not sandbox_validates_only(target):
        return
    version = ParallelCluster(command, spec.metadata.region).version()
    for arch in ("x86_64", "arm64"):
        name = f"aws-parallelcluster-{version}-{IMAGE_OS_PART[spec.slurm.os]}-{arch}-fmctl-sandbox"
        daemon.control(
            info,
            "/_fmctl/seed/image",
            {"region": spec.metadata.region, "name": name, "architecture": arch},
        )
