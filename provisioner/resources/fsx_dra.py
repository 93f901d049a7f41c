"""FSx for Lustre data-repository associations: an S3 prefix linked to a path of a file
system, with automatic import and export (PERSISTENT_2's way to reach S3).

What may change in place is AWS's (UpdateDataRepositoryAssociation): the import and export
event policies; the file system, its path and the S3 path are fixed, so changing them means a
new association.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from provisioner.graph.ref import Ref
from provisioner.resources.base import (
    FieldChange,
    How,
    Kind,
    Observed,
    Owned,
    Policy,
    Request,
    policies,
)
from provisioner.resources.context import Context
from provisioner.resources.fsx import (
    EVENTS,
    FsxOut,
    await_available,
    delete_and_wait,
    fsx_retag,
    fsx_tags,
    release_fsx,
)
from provisioner.resources.tags import CREATED_TAG, RESOURCE_TAG, DesiredTags, Tags

if TYPE_CHECKING:
    from types_boto3_fsx.type_defs import S3DataRepositoryConfigurationTypeDef


@dataclass(frozen=True)
class DraOut:
    """A data-repository association by id."""

    id: str


@dataclass(frozen=True)
class DraParams:
    """An S3 prefix at a file-system path, with automatic import and/or export."""

    fsx: Ref[FsxOut]
    file_system_path: str
    s3_path: str
    auto_import: bool
    auto_export: bool
    tags: DesiredTags


@dataclass(frozen=True)
class DraLive:
    """What fmctl manages of an association."""

    fsx: Any
    file_system_path: str
    s3_path: str
    import_events: tuple[str, ...]
    export_events: tuple[str, ...]
    tags: Tags


class RepositoryLink(Kind[DraParams, DraOut, DraLive]):
    """An FSx data-repository association: an S3 prefix with automatic import and export."""

    name, params, outputs = "dra", DraParams, DraOut
    create_seconds, update_seconds, delete_seconds = 420.0, 60.0, 180.0
    policy = policies(
        fsx=Policy(How.REPLACE, "an association's file system is fixed"),
        file_system_path=Policy(How.REPLACE, "an association's FileSystemPath is fixed"),
        s3_path=Policy(How.REPLACE, "an association's DataRepositoryPath is fixed"),
        import_events=Policy(How.UPDATE, "UpdateDataRepositoryAssociation AutoImportPolicy"),
        export_events=Policy(How.UPDATE, "UpdateDataRepositoryAssociation AutoExportPolicy"),
    )

    def _items(self, ctx: Context) -> list[Mapping[str, Any]]:
        def load() -> list[Mapping[str, Any]]:
            fsx = ctx.aws.client("fsx")
            # No paginator in botocore for this one; FSx pages it all the same (NextToken,
            # DescribeDataRepositoryAssociations' reference): every page, or one on a later
            # page is taken for missing and made again.
            page = fsx.describe_data_repository_associations()
            items = list(page["Associations"])
            while page.get("NextToken"):
                page = fsx.describe_data_repository_associations(NextToken=page["NextToken"])
                items += page["Associations"]
            return [
                a
                for a in items
                if ctx.ours(fsx_tags(a).as_dict())
                and a.get("Lifecycle") not in ("DELETING", "FAILED")
            ]

        return ctx.cached("fsx:associations", load)

    def read(self, req: Request[DraParams]) -> Observed[DraOut, DraLive] | None:
        for item in self._items(req.ctx):
            if fsx_tags(item).get(RESOURCE_TAG) == req.rid:
                s3 = item.get("S3", {})
                live = DraLive(
                    item["FileSystemId"],
                    item.get("FileSystemPath", ""),
                    item.get("DataRepositoryPath", ""),
                    tuple(s3.get("AutoImportPolicy", {}).get("Events", [])),
                    tuple(s3.get("AutoExportPolicy", {}).get("Events", [])),
                    fsx_tags(item),
                )
                pending = None if item["Lifecycle"] == "AVAILABLE" else str(item["Lifecycle"])
                aid = item["AssociationId"]
                return Observed(DraOut(aid), live, aid, pending)
        return None

    def desired(self, req: Request[DraParams], observed: Observed[DraOut, DraLive]) -> DraLive:
        return DraLive(
            req.ctx.resolve(req.params.fsx),
            req.params.file_system_path,
            req.params.s3_path,
            EVENTS if req.params.auto_import else (),
            EVENTS if req.params.auto_export else (),
            req.params.tags.resolve(observed.live.tags.get(CREATED_TAG)),
        )

    def _s3(self, params: DraParams) -> S3DataRepositoryConfigurationTypeDef:
        s3: S3DataRepositoryConfigurationTypeDef = {}
        if params.auto_import:
            s3["AutoImportPolicy"] = {"Events": list(EVENTS)}
        if params.auto_export:
            s3["AutoExportPolicy"] = {"Events": list(EVENTS)}
        return s3

    def create(self, req: Request[DraParams]) -> DraOut:
        item = req.ctx.aws.client("fsx").create_data_repository_association(
            FileSystemId=req.ctx.get(req.params.fsx).id,
            FileSystemPath=req.params.file_system_path,
            DataRepositoryPath=req.params.s3_path,
            BatchImportMetaDataOnCreate=req.params.auto_import,
            S3=self._s3(req.params),
            ClientRequestToken=req.ctx.token(req.rid),
            Tags=req.ctx.tag_list(req.params.tags),
        )["Association"]
        return self._available(req.ctx, req.rid, item["AssociationId"], self.create_seconds)

    def _available(self, ctx: Context, rid: str, aid: str, expected: float) -> DraOut:
        fsx = ctx.aws.client("fsx")
        await_available(
            ctx,
            f"S3 association {aid}",
            lambda: fsx.describe_data_repository_associations(AssociationIds=[aid])["Associations"][
                0
            ],
            expected,
            rid,
        )
        return DraOut(aid)

    def wait(self, req: Request[DraParams], observed: Observed[DraOut, DraLive]) -> DraOut:
        return self._available(req.ctx, req.rid, observed.id, self.create_seconds)

    def update(
        self,
        req: Request[DraParams],
        observed: Observed[DraOut, DraLive],
        changes: Sequence[FieldChange],
    ) -> DraOut:
        fsx = req.ctx.aws.client("fsx")
        if any(c.path.endswith("_events") for c in changes):
            fsx.update_data_repository_association(
                AssociationId=observed.id, S3=self._s3(req.params)
            )
        item = fsx.describe_data_repository_associations(AssociationIds=[observed.id])[
            "Associations"
        ][0]
        fsx_retag(req.ctx, item["ResourceARN"], changes)
        if any(c.path.endswith("_events") for c in changes):
            return self._available(req.ctx, req.rid, observed.id, self.update_seconds)
        return observed.outputs

    def find_owned(self, ctx: Context) -> list[Owned]:
        return [
            self.owned_item(fsx_tags(a).get(RESOURCE_TAG) or "?", a["AssociationId"])
            for a in self._items(ctx)
        ]

    def release(self, ctx: Context, owned: Owned) -> str:
        (item,) = ctx.aws.client("fsx").describe_data_repository_associations(
            AssociationIds=[owned.id]
        )["Associations"]
        release_fsx(ctx, item["ResourceARN"], fsx_tags(item))
        return (
            f"kept S3 association {owned.id} ({item.get('DataRepositoryPath')} at "
            f"{item.get('FileSystemPath')}) with its file system"
        )

    def delete(self, ctx: Context, owned: Owned) -> None:
        fsx = ctx.aws.client("fsx")
        delete_and_wait(
            ctx,
            owned,
            f"S3 association {owned.id}",
            lambda: fsx.delete_data_repository_association(
                AssociationId=owned.id, DeleteDataInFileSystem=False
            ),
            lambda: fsx.describe_data_repository_associations(AssociationIds=[owned.id])[
                "Associations"
            ],
            self.delete_seconds,
        )
