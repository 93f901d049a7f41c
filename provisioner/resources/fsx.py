"""FSx for Lustre: the file system, an existing one the spec names, and S3 data-repository
associations.

What may change in place is AWS's (FSx for Lustre User Guide, "Managing storage capacity"
and "Managing throughput capacity"; UpdateFileSystem, UpdateDataRepositoryAssociation):
storage only grows (not at all for SCRATCH_1), throughput per TiB of a persistent SSD file
system goes up or down, the auto-import policy and compression change; the deployment type,
subnet and a file system's own import and export paths are fixed, so changing them means a
new file system — and the data on the old one is lost. A further storage increase must wait
until 6 hours after the last one was requested ("Managing storage capacity": time between
increases); the last request is read from the file system's AdministrativeActions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from provisioner.drivers.aws_errors import NotFound
from provisioner.graph.ref import Ref
from provisioner.resources.base import (
    DataSource,
    FieldChange,
    How,
    Kind,
    Observed,
    Owned,
    Policy,
    Request,
    policies,
)
from provisioner.resources.compute import SgOut
from provisioner.resources.context import Context
from provisioner.resources.ec2 import retry_dependency
from provisioner.resources.errors import ResourceError
from provisioner.resources.network import SubnetOut
from provisioner.resources.pcluster_check import CheckOut
from provisioner.resources.tags import (
    CREATED_TAG,
    FMCTL_PREFIX,
    RESOURCE_TAG,
    RETAINED_TAG,
    DesiredTags,
    Tags,
    apply_tag_change,
)
from provisioner.spec.model import FsxDeploymentType

if TYPE_CHECKING:
    from types_boto3_fsx.literals import EventTypeType
    from types_boto3_fsx.type_defs import (
        CreateFileSystemLustreConfigurationTypeDef,
        UpdateFileSystemLustreConfigurationTypeDef,
    )

EVENTS: tuple[EventTypeType, ...] = ("NEW", "CHANGED", "DELETED")


#: On a file system fmctl made with storage.fsxLustre.deletionPolicy: retain.
DELETION_POLICY_TAG = "fmctl.dev/deletion-policy"


def release_fsx(ctx: Context, arn: str, tags: Tags) -> None:
    """FSx's untag/tag: none of fmctl's tags left but where it came from."""
    fsx = ctx.aws.client("fsx")
    ours = sorted(k for k, _ in tags.items if k.startswith(FMCTL_PREFIX))
    if ours:
        fsx.untag_resource(ResourceARN=arn, TagKeys=ours)
    fsx.tag_resource(ResourceARN=arn, Tags=[{"Key": RETAINED_TAG, "Value": ctx.cluster}])


def fsx_tags(item: Mapping[str, Any]) -> Tags:
    """The tags of a file system or association as FSx describes them."""
    return Tags.from_list(item.get("Tags"))


#: An FSx answer's item (a file system or a data repository association).
Item = TypeVar("Item", bound=Mapping[str, Any])


def await_available(
    ctx: Context, what: str, fetch: Callable[[], Item], expected: float, rid: str
) -> Item:
    """Wait for an FSx lifecycle to reach AVAILABLE; FAILED or MISCONFIGURED is an error."""

    def probe() -> Item | None:
        item = fetch()
        if item["Lifecycle"] in ("FAILED", "MISCONFIGURED"):
            reason = item.get("FailureDetails", {}).get("Message", "")
            raise ResourceError(f"{what} is {item['Lifecycle']}: {reason}".rstrip(": "))
        return item if item["Lifecycle"] == "AVAILABLE" else None

    return ctx.wait_until(f"{what} to be AVAILABLE", probe, expected, 3600, rid)


def delete_and_wait(
    ctx: Context,
    owned: Owned,
    what: str,
    delete: Callable[[], Any],
    fetch: Callable[[], list[Any]],
    expected: float,
) -> None:
    """Delete, then wait until describing it says it is gone (an error or an empty list)."""
    retry_dependency(delete, owned.id, ctx)

    def gone() -> bool | None:
        try:
            return None if fetch() else True
        except NotFound:
            return True

    ctx.wait_until(f"{what} to be deleted", gone, expected, 3600, owned.resource)


def fsx_retag(ctx: Context, arn: str, changes: Sequence[FieldChange]) -> None:
    """Apply a tags change to a file system or association (by ARN)."""
    fsx = ctx.aws.client("fsx")
    for change in changes:
        if change.path != "tags":
            continue
        apply_tag_change(
            change.after,
            lambda tags: fsx.tag_resource(ResourceARN=arn, Tags=tags),
            lambda keys: fsx.untag_resource(ResourceARN=arn, TagKeys=keys),
        )


@dataclass(frozen=True)
class FsxOut:
    """A Lustre file system: what nodes mount."""

    id: str
    dns: str
    mount_name: str


@dataclass(frozen=True)
class FsxParams:
    """A new FSx for Lustre file system in the private subnet."""

    subnet: Ref[SubnetOut]
    security_group: Ref[SgOut]
    capacity_gib: int
    deployment_type: FsxDeploymentType
    tags: DesiredTags
    throughput_per_tib: int | None = None
    #: Linked at creation (types other than PERSISTENT_2; PERSISTENT_2 uses associations).
    import_path: str | None = None
    export_path: str | None = None
    #: Made only once this is done: on Slurm, ParallelCluster's validators (the file system
    #: is the first resource that is slow and billed; a refused config stops `up` before it).
    gate: Ref[CheckOut] | None = None


@dataclass(frozen=True)
class FsxLive:
    """What fmctl manages of a file system."""

    subnet: Any
    deployment_type: str
    capacity_gib: int
    throughput_per_tib: int | None
    import_path: str | None
    export_path: str | None
    auto_import: str | None
    compression: str
    tags: Tags
    #: When the last storage increase was requested (epoch seconds), if FSx still lists it.
    grown_at: float | None = field(default=None, compare=False)


#: FSx for Lustre takes a storage increase no sooner than this after the last one's request.
GROW_INTERVAL_S = 6 * 3600.0
#: The AdministrativeAction states of an update FSx has not finished applying.
UNFINISHED = ("PENDING", "IN_PROGRESS")


def _epoch(value: Any) -> float:
    # botocore parses RequestTime into a datetime; a recorded answer may hold a number.
    return value.timestamp() if isinstance(value, datetime) else float(value)


def _storage_actions(item: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The file system's storage increases FSx lists, newest first, failed ones left out."""
    actions = [
        a
        for a in item.get("AdministrativeActions") or []
        if a.get("AdministrativeActionType") == "FILE_SYSTEM_UPDATE"
        and "StorageCapacity" in (a.get("TargetFileSystemValues") or {})
        and a.get("Status") != "FAILED"
    ]
    return sorted(actions, key=lambda a: _epoch(a.get("RequestTime", 0)), reverse=True)


def _not_before(change: FieldChange, allowed_at: float) -> FieldChange:
    """A storage increase refused until ``allowed_at``, or as it was once that has passed."""
    if time.time() >= allowed_at:
        return change
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(allowed_at))
    return FieldChange(
        change.path,
        change.before,
        change.after,
        How.IMMUTABLE,
        "FSx for Lustre takes another storage increase only 6 hours after the last one "
        f"was requested: not before {when}",
        hint=f"keep capacityGiB at {change.before} for now and run `fmctl up` again after "
        f"{when} to grow it",
    )


class FileSystem(Kind[FsxParams, FsxOut, FsxLive]):
    """FSx for Lustre, created in the private subnet with the FSx security group."""

    name, params, outputs = "fsx", FsxParams, FsxOut
    create_seconds, update_seconds, delete_seconds = 600.0, 600.0, 300.0
    policy = policies(
        subnet=Policy(How.REPLACE, "a file system's subnet is fixed at creation"),
        deployment_type=Policy(
            How.REPLACE, "the deployment type is fixed at creation (CreateFileSystem)"
        ),
        capacity_gib=Policy(How.UPDATE, "UpdateFileSystem StorageCapacity (it only grows)"),
        throughput_per_tib=Policy(
            How.UPDATE, "UpdateFileSystem PerUnitStorageThroughput (persistent SSD types)"
        ),
        import_path=Policy(How.REPLACE, "ImportPath is fixed at creation"),
        export_path=Policy(How.REPLACE, "ExportPath is fixed at creation"),
        auto_import=Policy(How.UPDATE, "UpdateFileSystem AutoImportPolicy"),
        compression=Policy(How.UPDATE, "UpdateFileSystem DataCompressionType"),
    )

    def _items(self, ctx: Context) -> list[Mapping[str, Any]]:
        def load() -> list[Mapping[str, Any]]:
            fsx = ctx.aws.client("fsx")
            items: list[Mapping[str, Any]] = []
            for page in fsx.get_paginator("describe_file_systems").paginate():
                items += [
                    f
                    for f in page["FileSystems"]
                    if ctx.ours(fsx_tags(f).as_dict())
                    and f.get("Lifecycle") not in ("DELETING", "FAILED")
                ]
            return items

        return ctx.cached("fsx:file-systems", load)

    @staticmethod
    def out_of(item: Mapping[str, Any]) -> FsxOut:
        """The outputs of a described file system."""
        return FsxOut(
            item["FileSystemId"],
            item.get("DNSName", ""),
            item.get("LustreConfiguration", {}).get("MountName", ""),
        )

    def read(self, req: Request[FsxParams]) -> Observed[FsxOut, FsxLive] | None:
        for item in self._items(req.ctx):
            if fsx_tags(item).get(RESOURCE_TAG) == req.rid:
                return self._observed(item)
        return None

    def _observed(self, item: Mapping[str, Any]) -> Observed[FsxOut, FsxLive]:
        lustre = item.get("LustreConfiguration", {})
        repo = lustre.get("DataRepositoryConfiguration", {})
        grows = _storage_actions(item)
        capacity = int(item.get("StorageCapacity", 0))
        if grows and grows[0].get("Status") in UNFINISHED:
            # An increase on its way (an earlier run's): the size asked for is the size.
            capacity = int(grows[0]["TargetFileSystemValues"]["StorageCapacity"])
        live = FsxLive(
            (item.get("SubnetIds") or [None])[0],
            str(lustre.get("DeploymentType", "")),
            capacity,
            lustre.get("PerUnitStorageThroughput"),
            repo.get("ImportPath"),
            repo.get("ExportPath"),
            repo.get("AutoImportPolicy"),
            str(lustre.get("DataCompressionType", "NONE")),
            fsx_tags(item),
            _epoch(grows[0]["RequestTime"]) if grows and "RequestTime" in grows[0] else None,
        )
        pending = None if item.get("Lifecycle") == "AVAILABLE" else str(item.get("Lifecycle"))
        return Observed(self.out_of(item), live, item["FileSystemId"], pending)

    def desired(self, req: Request[FsxParams], observed: Observed[FsxOut, FsxLive]) -> FsxLive:
        linked = req.params.import_path is not None and req.params.deployment_type != "PERSISTENT_2"
        # Without an ExportPath, FSx picks s3://IMPORT-BUCKET/FSxLustre<creation time>: what
        # it picked is what was asked for.
        export = req.params.export_path or observed.live.export_path
        return FsxLive(
            req.ctx.resolve(req.params.subnet),
            req.params.deployment_type,
            req.params.capacity_gib,
            req.params.throughput_per_tib,
            req.params.import_path if linked else None,
            export if linked else None,
            "NEW_CHANGED_DELETED" if linked else None,
            "LZ4",
            req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
        )

    def diff(
        self, req: Request[FsxParams], observed: Observed[FsxOut, FsxLive]
    ) -> list[FieldChange]:
        out = []
        for change in super().diff(req, observed):
            if change.path == "capacity_gib" and (
                change.after < change.before or req.params.deployment_type == "SCRATCH_1"
            ):
                why = (
                    "SCRATCH_1 file systems cannot grow"
                    if req.params.deployment_type == "SCRATCH_1"
                    else "FSx for Lustre storage only grows; it cannot shrink"
                )
                change = FieldChange(change.path, change.before, change.after, How.IMMUTABLE, why)
            elif change.path == "capacity_gib" and observed.live.grown_at is not None:
                change = _not_before(change, observed.live.grown_at + GROW_INTERVAL_S)
            elif change.path == "throughput_per_tib" and not req.params.deployment_type.startswith(
                "PERSISTENT"
            ):
                change = FieldChange(
                    change.path,
                    change.before,
                    change.after,
                    How.IMMUTABLE,
                    "only persistent SSD file systems change their throughput",
                )
            out.append(change)
        return out

    def create(self, req: Request[FsxParams]) -> FsxOut:
        lustre: CreateFileSystemLustreConfigurationTypeDef = {
            "DeploymentType": req.params.deployment_type,
            "DataCompressionType": "LZ4",
        }
        if req.params.throughput_per_tib:
            lustre["PerUnitStorageThroughput"] = req.params.throughput_per_tib
        if req.params.import_path and req.params.deployment_type != "PERSISTENT_2":
            lustre["ImportPath"] = req.params.import_path
            if req.params.export_path:
                lustre["ExportPath"] = req.params.export_path
            lustre["AutoImportPolicy"] = "NEW_CHANGED_DELETED"
        item = req.ctx.aws.client("fsx").create_file_system(
            ClientRequestToken=req.ctx.token(req.rid),
            FileSystemType="LUSTRE",
            StorageCapacity=req.params.capacity_gib,
            StorageType="SSD",
            SubnetIds=[req.ctx.get(req.params.subnet).id],
            SecurityGroupIds=[req.ctx.get(req.params.security_group).id],
            LustreConfiguration=lustre,
            FileSystemTypeVersion="2.15",
            Tags=req.ctx.tag_list(req.params.tags),
        )["FileSystem"]
        return self._available(req.ctx, req.rid, item["FileSystemId"], self.create_seconds)

    def _available(self, ctx: Context, rid: str, fs_id: str, expected: float) -> FsxOut:
        fsx = ctx.aws.client("fsx")
        item = await_available(
            ctx,
            f"FSx for Lustre {fs_id}",
            lambda: fsx.describe_file_systems(FileSystemIds=[fs_id])["FileSystems"][0],
            expected,
            rid,
        )
        return self.out_of(item)

    def wait(self, req: Request[FsxParams], observed: Observed[FsxOut, FsxLive]) -> FsxOut:
        return self._available(req.ctx, req.rid, observed.id, self.create_seconds)

    def update(
        self,
        req: Request[FsxParams],
        observed: Observed[FsxOut, FsxLive],
        changes: Sequence[FieldChange],
    ) -> FsxOut:
        paths = {c.path for c in changes}
        request: dict[str, Any] = {}
        lustre: UpdateFileSystemLustreConfigurationTypeDef = {}
        if "capacity_gib" in paths:
            request["StorageCapacity"] = req.params.capacity_gib
        if "throughput_per_tib" in paths and req.params.throughput_per_tib is not None:
            lustre["PerUnitStorageThroughput"] = req.params.throughput_per_tib
        if "auto_import" in paths:
            lustre["AutoImportPolicy"] = "NEW_CHANGED_DELETED"
        if "compression" in paths:
            lustre["DataCompressionType"] = "LZ4"
        if lustre:
            request["LustreConfiguration"] = lustre
        if request:
            req.ctx.aws.client("fsx").update_file_system(
                FileSystemId=observed.id,
                ClientRequestToken=req.ctx.token(f"{req.rid}/update/{sorted(request.items())!r}")[
                    :63
                ],
                **request,
            )
        arn = self._arn(req.ctx, observed.id)
        fsx_retag(req.ctx, arn, changes)
        if request:
            return self._available(req.ctx, req.rid, observed.id, self.update_seconds)
        return observed.outputs

    def _arn(self, ctx: Context, fs_id: str) -> str:
        fsx = ctx.aws.client("fsx")
        return str(
            fsx.describe_file_systems(FileSystemIds=[fs_id])["FileSystems"][0]["ResourceARN"]
        )

    def find_owned(self, ctx: Context) -> list[Owned]:
        return [
            self.owned_item(fsx_tags(i).get(RESOURCE_TAG) or "?", i["FileSystemId"])
            for i in self._items(ctx)
        ]

    def retained(self, ctx: Context) -> list[Owned]:
        """The cluster's file systems made with deletionPolicy: retain."""
        return [
            self.owned_item(fsx_tags(i).get(RESOURCE_TAG) or "?", i["FileSystemId"])
            for i in self._items(ctx)
            if fsx_tags(i).get(DELETION_POLICY_TAG) == "retain"
        ]

    def release(self, ctx: Context, owned: Owned) -> str:
        (item,) = ctx.aws.client("fsx").describe_file_systems(FileSystemIds=[owned.id])[
            "FileSystems"
        ]
        release_fsx(ctx, item["ResourceARN"], fsx_tags(item))
        size = int(item.get("StorageCapacity", 0))
        return (
            f"kept file system {owned.id} ({size:,} GiB, deletionPolicy: retain) with its data; "
            "it is billed until deleted: its S3 associations first (`aws fsx "
            "delete-data-repository-association --association-id ID`), then `aws fsx "
            f"delete-file-system --file-system-id {owned.id} --region {ctx.region}`"
        )

    def delete(self, ctx: Context, owned: Owned) -> None:
        fsx = ctx.aws.client("fsx")
        delete_and_wait(
            ctx,
            owned,
            f"FSx {owned.id}",
            lambda: fsx.delete_file_system(
                FileSystemId=owned.id, ClientRequestToken=ctx.token(f"delete/{owned.id}")
            ),
            lambda: fsx.describe_file_systems(FileSystemIds=[owned.id])["FileSystems"],
            self.delete_seconds,
        )


@dataclass(frozen=True)
class ExistingFsxParams:
    """A file system the spec names."""

    file_system_id: str


class ExistingFileSystem(DataSource[ExistingFsxParams, FsxOut]):
    """A file system the spec names: looked up, never changed or deleted."""

    name, params, outputs = "existing-fsx", ExistingFsxParams, FsxOut

    def look_up(self, req: Request[ExistingFsxParams]) -> tuple[FsxOut, str] | None:
        try:
            items = req.ctx.aws.client("fsx").describe_file_systems(
                FileSystemIds=[req.params.file_system_id]
            )["FileSystems"]
        except NotFound:
            return None
        if not items or items[0].get("Lifecycle") == "DELETING":
            return None
        found = items[0]
        if found.get("FileSystemType") != "LUSTRE":
            # Nodes mount it with the Lustre client, by its MountName: another FSx type (its
            # FileSystemType says which) has neither.
            raise ResourceError(
                f"file system {req.params.file_system_id} (storage.fsxLustre.fileSystemId) is "
                f"an FSx {found.get('FileSystemType', '?')} file system, not FSx for Lustre",
                hint="name an FSx for Lustre file system, or leave fileSystemId out for a new one",
            )
        return FileSystem.out_of(found), req.params.file_system_id

    def missing(self, req: Request[ExistingFsxParams]) -> Exception:
        return ResourceError(
            f"file system {req.params.file_system_id} (storage.fsxLustre.fileSystemId) does not "
            "exist in this region",
            hint="check the id and the region, or leave fileSystemId out for a new one",
        )
