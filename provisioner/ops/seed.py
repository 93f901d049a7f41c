"""What the sandbox needs before it can stand in for an account: the reservations a spec
names (matching it, in its region), the S3 bucket its file system links (in its region), and
ParallelCluster's official images. Each is said aloud, so nobody mistakes it for the real
thing. What an earlier spec seeded never makes the next one fail: a reservation that no
longer matches is seeded again as this spec needs it, and a seeded data bucket in another
region moves (with what it holds) to this spec's."""

from __future__ import annotations

from typing import Any

from provisioner.drivers.aws_errors import AlreadyExists
from provisioner.ops.target import Target, pcluster_command, sandbox_validates_only
from provisioner.spec.model import ClusterSpec

#: Tag on the data buckets and reservations the sandbox made for a spec (so it knows which
#: are its own to move or seed again).
SEEDED_TAG = "fmctl.dev/sandbox-seeded"


def seed_sandbox(spec: ClusterSpec, target: Target) -> list[str]:
    """Seed the sandbox for ``spec``; what was seeded, one line each."""
    from provisioner.ops.sandbox_link import sandbox

    info = sandbox().running(target.home)
    assert info is not None, "the sandbox was started moments ago"
    seed = Seeder(info, target)
    said = _reservations(spec, target, seed)
    said += _data_bucket(spec, target)
    _parallelcluster_images(spec, target, seed)
    said += _pcs_images(spec, seed)
    return said


class Seeder:
    """Calls to the sandbox's own seeding operations, signed with its credentials."""

    def __init__(self, info: dict[str, Any], target: Target) -> None:
        from provisioner.ops.sandbox_link import sandbox

        self.info, self.target, self.box = info, target, sandbox()

    def __call__(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.box.ask(self.target.home, action, body, self.target.region)


def _reservations(spec: ClusterSpec, target: Target, seed: Seeder) -> list[str]:
    ec2 = target.aws().client("ec2")
    said = []
    for pool in spec.compute.gpu_pools:
        rid = pool.capacity.reservation_id
        if rid is None:
            continue
        wanted = {
            "capacityReservationId": rid,
            "instanceType": pool.instance_type,
            "availabilityZone": spec.network.availability_zone,
            "totalInstanceCount": pool.count,
            "availableInstanceCount": pool.count,
            "state": "active",
            "reservationType": "capacity-block"
            if pool.capacity.type == "capacity-block"
            else "default",
            "tagSet": [{"key": SEEDED_TAG, "value": "true"}],
        }
        try:
            found = ec2.describe_capacity_reservations(CapacityReservationIds=[rid])
            have = found["CapacityReservations"][0]
        except Exception:  # noqa: BLE001 - not in this region yet: seed it
            have = None
        seeded = {"Key": SEEDED_TAG, "Value": "true"} in (have or {}).get("Tags", [])
        if have is not None and not seeded:
            continue  # the account's own (a test's): the online check judges it
        if have is not None and (
            have.get("InstanceType"),
            have.get("AvailabilityZone"),
            have.get("TotalInstanceCount"),
        ) == (pool.instance_type, spec.network.availability_zone, pool.count):
            continue
        seed("SeedCapacityReservation", wanted)
        again = "seeded again" if have is not None else "seeded"
        said.append(
            f"{again} {rid} ({pool.count} x {pool.instance_type} in "
            f"{spec.network.availability_zone})"
        )
    return said


def _data_bucket(spec: ClusterSpec, target: Target) -> list[str]:
    """The S3 bucket a file system links stands for the user's data: in the sandbox it is
    created (untagged, so no `down` ever deletes it) when missing."""

    fsx = spec.storage.fsx_lustre
    if fsx is None or fsx.s3 is None or fsx.file_system_id is not None:
        return []
    s3 = target.aws().client("s3")
    said = []
    where = spec.metadata.region
    for uri in (fsx.s3.import_path, fsx.s3.export_path):
        bucket = str(uri or "").removeprefix("s3://").split("/", 1)[0]
        if not bucket:
            continue
        try:
            s3.head_bucket(Bucket=bucket)
            now_in = _bucket_region(s3, bucket)
        except Exception:  # noqa: BLE001 - not there yet: make it
            now_in = None
        if now_in == where:
            continue
        if now_in is not None:
            moved = _move_seeded(s3, bucket, now_in, where)
            if moved is not None:
                said.append(moved)
            continue
        try:
            _create_seeded(s3, bucket, where)
        except AlreadyExists:  # another sandbox run made it meanwhile
            continue
        said.append(f"created data bucket {bucket} (it stands for yours; never deleted)")
    return said


def _bucket_region(s3: Any, bucket: str) -> str:
    """A bucket's region (S3 answers None for us-east-1)."""
    answer = s3.get_bucket_location(Bucket=bucket)
    return str(answer.get("LocationConstraint") or "us-east-1")


def _create_seeded(s3: Any, bucket: str, region: str) -> None:
    extra = (
        {}
        if region == "us-east-1"
        else {"CreateBucketConfiguration": {"LocationConstraint": region}}
    )
    s3.create_bucket(Bucket=bucket, **extra)
    s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": SEEDED_TAG, "Value": "true"}]})


def _move_seeded(s3: Any, bucket: str, old: str, new: str) -> str | None:
    """Move a data bucket the sandbox seeded for a spec in another region to ``new``, with
    its objects (a bucket's region is fixed, so: copy out, delete, make it again, copy in).
    A bucket the sandbox did not make is left where it is: the spec's check then says so."""
    try:
        tags = s3.get_bucket_tagging(Bucket=bucket).get("TagSet", [])
    except Exception:  # noqa: BLE001 - no tags: not one the sandbox seeded
        tags = []
    if {"Key": SEEDED_TAG, "Value": "true"} not in tags:
        return None
    held = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            held.append((item["Key"], body))
            s3.delete_object(Bucket=bucket, Key=item["Key"])
    s3.delete_bucket(Bucket=bucket)
    _create_seeded(s3, bucket, new)
    for key, body in held:
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    return (
        f"moved data bucket {bucket} from {old} to {new} with its {len(held)} object(s) "
        "(the sandbox seeded it for a spec in another region)"
    )


def _parallelcluster_images(spec: ClusterSpec, target: Target, seed: Seeder) -> None:
    """ParallelCluster's validators look its official AMI up among Amazon's images, by its
    version; the emulator has none, so the sandbox registers one per architecture."""
    from provisioner.drivers.pcluster import IMAGE_OS_PART, ParallelCluster

    command = pcluster_command(target)
    if spec.scheduler != "slurm" or command is None or not sandbox_validates_only(target):
        return
    version = ParallelCluster(command, spec.metadata.region).version()
    for arch in ("x86_64", "arm64"):
        name = f"aws-parallelcluster-{version}-{IMAGE_OS_PART[spec.slurm.os]}-{arch}-fmctl-sandbox"
        seed("SeedImage", {"name": name, "architecture": arch})


def _pcs_images(spec: ClusterSpec, seed: Seeder) -> list[str]:
    """AWS's PCS sample AMIs, which fmctl finds by name among Amazon's images: one per
    architecture the node groups need (none when the spec names slurm.amiId)."""
    from provisioner.catalog import load_catalog
    from provisioner.catalog.pcs import sample_ami_name
    from provisioner.render.pcs import login_architecture

    if spec.scheduler != "slurm" or spec.slurm.provider != "pcs" or spec.slurm.ami_id:
        return []
    catalog = load_catalog()
    archs = {login_architecture(spec.compute.head_node.instance_type)}
    archs |= {catalog[p.instance_type].architecture for p in spec.compute.gpu_pools}
    said = []
    for arch in sorted(archs):
        name = f"{sample_ami_name(spec.slurm.pcs.slurm_version, arch)}-fmctl-sandbox"
        seed("SeedImage", {"name": name, "architecture": arch})
        said.append(f"registered {name} as AWS's PCS sample AMI ({arch})")
    return said
