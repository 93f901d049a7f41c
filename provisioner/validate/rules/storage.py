"""Rules for storage: FSx for Lustre sizes, throughput, S3 links; local NVMe."""

from __future__ import annotations

import re
from collections.abc import Iterator

from provisioner.spec import defaults
from provisioner.spec.model import ClusterSpec, FsxLustre
from provisioner.spec.problems import Problem, SpecPath
from provisioner.validate.rules.registry import RuleContext, rule

FS_ID_RE = re.compile(r"^fs-[0-9a-f]{17}$")  # as FSx (and ParallelCluster) require
S3_URI_RE = re.compile(r"^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/.*)?$")
THROUGHPUT = {"PERSISTENT_1": (50, 100, 200), "PERSISTENT_2": (125, 250, 500, 1000)}
FSX = ("storage", "fsxLustre")
#: Paths a mount would hide or break on the nodes.
RESERVED_MOUNTS = (
    "/",
    "/home",
    "/opt",
    "/opt/slurm",
    "/opt/parallelcluster",
    "/etc",
    "/usr",
    "/var",
    "/tmp",
    "/proc",
    "/sys",
    "/dev",
    "/boot",
    "/root",
)


def capacity_ok(deployment: str, gib: int) -> bool:
    """FSx for Lustre capacity steps per deployment type."""
    if deployment == "SCRATCH_1":
        return gib in (1200, 2400) or (gib > 0 and gib % 3600 == 0)
    return gib == 1200 or (gib > 0 and gib % 2400 == 0)


def _steps(deployment: str) -> str:
    if deployment == "SCRATCH_1":
        return "1200, 2400, or a multiple of 3600"
    return "1200 or a multiple of 2400"


def _nearest(deployment: str, gib: int) -> int:
    step = 3600 if deployment == "SCRATCH_1" else 2400
    candidates = [1200, 2400] + [step * k for k in range(1, gib // step + 2)]
    return min((c for c in candidates if c >= gib), default=candidates[-1])


@rule("fsx-capacity")
def fsx_capacity(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Capacity must be one of the deployment type's steps."""
    fsx = spec.storage.fsx_lustre
    if fsx is None or fsx.file_system_id or fsx.capacity_gib is None:
        return
    deployment = fsx.deployment_type or defaults.FSX_DEPLOYMENT_TYPE
    if not capacity_ok(deployment, fsx.capacity_gib):
        yield Problem(
            "fsx-capacity",
            f"{fsx.capacity_gib} GiB is not a valid {deployment} size",
            (*FSX, "capacityGiB"),
            hint=f"{deployment} takes {_steps(deployment)} GiB;"
            f" the next valid size is {_nearest(deployment, fsx.capacity_gib)}",
            related=((*FSX, "deploymentType"),),
        )


@rule("fsx-throughput")
def fsx_throughput(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Throughput per TiB: fixed choices for persistent types, none for scratch."""
    fsx = spec.storage.fsx_lustre
    if fsx is None or fsx.file_system_id or fsx.throughput_per_tib is None:
        return
    deployment = fsx.deployment_type or defaults.FSX_DEPLOYMENT_TYPE
    allowed = THROUGHPUT.get(deployment)
    path = (*FSX, "throughputPerTiB")
    if allowed is None:
        yield Problem(
            "fsx-throughput",
            f"{deployment} has no throughputPerTiB setting",
            path,
            hint="remove it: scratch file systems have fixed throughput",
            related=((*FSX, "deploymentType"),),
        )
    elif fsx.throughput_per_tib not in allowed:
        yield Problem(
            "fsx-throughput",
            f"{fsx.throughput_per_tib} MB/s/TiB is not offered for {deployment}",
            path,
            hint="choose one of " + ", ".join(str(a) for a in allowed),
            related=((*FSX, "deploymentType"),),
        )


def _bucket(uri: str) -> str | None:
    match = S3_URI_RE.match(uri)
    return match.group(1) if match else None


@rule("fsx-s3")
def fsx_s3(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """S3 links: s3:// URIs; export needs import, in the same bucket."""
    fsx = spec.storage.fsx_lustre
    if fsx is None or fsx.s3 is None:
        return
    s3 = fsx.s3
    base: SpecPath = (*FSX, "s3")
    for key, uri in (("importPath", s3.import_path), ("exportPath", s3.export_path)):
        if uri is not None and _bucket(uri) is None:
            yield Problem(
                "fsx-s3",
                f"{uri!r} is not an S3 URI",
                (*base, key),
                hint="write it as s3://bucket/prefix",
            )
    if s3.export_path and not s3.import_path:
        yield Problem(
            "fsx-s3",
            "exportPath needs importPath",
            (*base, "exportPath"),
            hint="FSx exports only to a repository it also imports from; add "
            "importPath in the same bucket",
            related=((*base, "importPath"),),
        )
    elif s3.export_path and s3.import_path:
        src, dst = _bucket(s3.import_path), _bucket(s3.export_path)
        if src and dst and src != dst:
            yield Problem(
                "fsx-s3",
                f"exportPath is in bucket {dst!r}, importPath in {src!r}",
                (*base, "exportPath"),
                hint=f"export into s3://{src}/...: FSx links one bucket per association",
                related=((*base, "importPath"),),
            )
    if not s3.import_path and not s3.export_path:
        yield Problem(
            "fsx-s3",
            "s3 is given without importPath or exportPath",
            base,
            hint="add importPath, or remove s3",
            related=((*base, "importPath"), (*base, "exportPath")),
        )


@rule("fsx-export-under-import")
def fsx_export_under_import(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """An export prefix inside the import prefix can only be one association over the whole
    import prefix, exporting new, changed and deleted files (FSx API reference,
    AutoExportPolicy: with DELETED, files deleted on the file system are deleted in the
    data repository); two associations cannot share a prefix (CreateDataRepositoryAssociation:
    each has "a unique S3 bucket or prefix"). So `rm` on the file system would delete the
    source data: refused, with where to put the export instead."""
    fsx = spec.storage.fsx_lustre
    if fsx is None or fsx.s3 is None or not fsx.s3.import_path or not fsx.s3.export_path:
        return
    base: SpecPath = (*FSX, "s3")
    source, export = fsx.s3.import_path, fsx.s3.export_path
    src, dst = source.rstrip("/"), export.rstrip("/")
    bucket = _bucket(source)
    if bucket is None or _bucket(export) != bucket or not dst.startswith(src + "/"):
        return
    beside = f"s3://{bucket}/{dst[len(src) + 1 :]}"
    yield Problem(
        "fsx-export-under-import",
        f"exportPath {export!r} is inside importPath {source!r}: exporting there links the "
        "whole import prefix both ways, so deleting a file on the file system deletes it "
        "from your dataset in S3",
        (*base, "exportPath"),
        hint=f"export beside the data, e.g. exportPath: {beside} (fmctl links it as a "
        "second, export-only association), or drop exportPath",
        related=((*base, "importPath"),),
    )


@rule("fsx-two-way")
def fsx_two_way(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """importPath and exportPath the same prefix: one association importing and exporting
    new, changed and deleted files (AutoImportPolicy and AutoExportPolicy with DELETED, FSx
    API reference): a file deleted on either side is deleted on the other. A two-way sync
    may be meant, so it warns, saying so."""
    fsx = spec.storage.fsx_lustre
    if fsx is None or fsx.s3 is None or not fsx.s3.import_path or not fsx.s3.export_path:
        return
    if fsx.s3.import_path.rstrip("/") != fsx.s3.export_path.rstrip("/"):
        return
    base: SpecPath = (*FSX, "s3")
    yield Problem(
        "fsx-two-way",
        f"importPath and exportPath are both {fsx.s3.import_path!r}: deletes flow both ways "
        "(a file removed on the file system is removed from S3, and one removed in S3 from "
        "the file system)",
        (*base, "exportPath"),
        hint="if that is not meant, export to a prefix of its own beside the data (e.g. "
        "s3://BUCKET/checkpoints), or drop exportPath",
        level="warning",
        related=((*base, "importPath"),),
    )


def _creation_keys(fsx: FsxLustre) -> list[str]:
    keys = [
        ("capacityGiB", fsx.capacity_gib),
        ("deploymentType", fsx.deployment_type),
        ("throughputPerTiB", fsx.throughput_per_tib),
        ("s3", fsx.s3),
    ]
    return [k for k, v in keys if v is not None]


@rule("fsx-existing")
def fsx_existing(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """An existing file system is mounted as it is: no creation settings beside its id."""
    fsx = spec.storage.fsx_lustre
    if fsx is None or fsx.file_system_id is None:
        return
    if not FS_ID_RE.match(fsx.file_system_id):
        yield Problem(
            "fsx-existing",
            f"{fsx.file_system_id!r} is not a file system id",
            (*FSX, "fileSystemId"),
            hint="ids look like fs-0123456789abcdef0",
        )
    for key in _creation_keys(fsx):
        yield Problem(
            "fsx-existing",
            f"{key} cannot be set with fileSystemId",
            (*FSX, key),
            hint="fileSystemId mounts an existing file system as it is; remove "
            f"{key}, or remove fileSystemId to create a new one",
            related=((*FSX, "fileSystemId"),),
        )


def _mount_problem(mount: str, path: SpecPath) -> Problem | None:
    if not mount.startswith("/") or "//" in mount or (mount.endswith("/") and mount != "/"):
        return Problem(
            "mount-path", f"{mount!r} is not an absolute path", path, hint="write it like /fsx"
        )
    if mount in RESERVED_MOUNTS:
        return Problem(
            "mount-path",
            f"mounting on {mount} would hide system files",
            path,
            hint="use a path of its own, like /fsx or /scratch",
        )
    return None


@rule("mount-path")
def mount_paths(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Mount paths are absolute, not system directories, and distinct."""
    fsx, nvme = spec.storage.fsx_lustre, spec.storage.local_nvme
    mounts: list[tuple[str, SpecPath]] = []
    if fsx is not None:
        mounts.append((fsx.mount_path, (*FSX, "mountPath")))
    if nvme is not None:
        mounts.append((nvme.mount_path, ("storage", "localNvme", "mountPath")))
    for mount, path in mounts:
        problem = _mount_problem(mount, path)
        if problem:
            yield problem
    if len(mounts) == 2 and mounts[0][0] == mounts[1][0]:
        yield Problem(
            "mount-path",
            "FSx and local NVMe share a mount path",
            mounts[1][1],
            hint="give each its own path, e.g. /fsx and /scratch",
            related=(mounts[0][1],),
        )


@rule("local-nvme")
def local_nvme(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """Local NVMe needs instance-store drives on every GPU pool's type."""
    if spec.storage.local_nvme is None:
        return
    for i, pool in enumerate(spec.compute.gpu_pools):
        itype = ctx.catalog.get(pool.instance_type)
        if itype is not None and itype.local_nvme is None:
            yield Problem(
                "local-nvme",
                f"pool {pool.name!r} ({pool.instance_type}) has no instance-store NVMe",
                ("compute", "gpuPools", i, "instanceType"),
                hint="remove storage.localNvme, or use a type with local drives",
                related=(("storage", "localNvme"),),
            )


@rule("fsx-retain")
def fsx_retain(spec: ClusterSpec, ctx: RuleContext) -> Iterator[Problem]:
    """A retained file system keeps its network interfaces in its subnet after `down`, so
    the VPC must be one that outlives the cluster (fmctl deletes the VPCs it made); and
    only a file system fmctl makes has a deletion policy (one the spec names is never
    deleted)."""
    fsx = spec.storage.fsx_lustre
    if fsx is None or fsx.deletion_policy != "retain":
        return
    where: SpecPath = (*FSX, "deletionPolicy")
    if fsx.file_system_id is not None:
        yield Problem(
            "fsx-retain",
            "deletionPolicy applies to a file system fmctl makes; fmctl never deletes one "
            "the spec names (fileSystemId)",
            where,
            level="warning",
            hint="drop deletionPolicy: the file system stays either way",
        )
    elif spec.network.vpc_id is None:
        yield Problem(
            "fsx-retain",
            "a retained file system keeps its interfaces in the cluster's subnet, and fmctl "
            "deletes the VPC it made for the cluster",
            where,
            hint="put the cluster in a VPC that outlives it (network.vpcId and subnetId), "
            "or keep the data in S3 (s3.exportPath) and use deletionPolicy: delete",
        )
