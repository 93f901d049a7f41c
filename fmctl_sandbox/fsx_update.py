"""FSx for Lustre's day-2 operations for the sandbox: UpdateFileSystem, UpdateDataRepository-
Association, TagResource and UntagResource, with what FSx refuses.

From the FSx for Lustre User Guide ("Managing storage capacity", "Managing throughput
capacity") and the API reference (UpdateFileSystem): storage only grows, in multiples of
2400 GiB for SCRATCH_2 and persistent SSD file systems, never for SCRATCH_1; one storage
update at a time, and the next storage increase no sooner than 6 hours after the last one
was requested (the wording of that refusal is ours: AWS documents the rule, not its
message); throughput per TiB changes on persistent SSD file systems only, to the values of
their deployment type; while an update runs the file system is UPDATING. Describe lists
the recent AdministrativeActions, newest first, finished ones included.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from fmctl_sandbox import protocol as p

Answer = tuple[int, dict[str, str], bytes]
#: The sandbox's duration of an update (FSx documents "a few minutes" of UPDATING for a
#: storage increase, up to an hour for a throughput change): seconds, before scaling.
UPDATE_SECONDS = 600.0
#: The time between storage increases FSx enforces: real seconds, not scaled (fmctl reads
#: the last request's time and judges by the same clock).
GROW_INTERVAL_S = 6 * 3600.0
#: How many past administrative actions Describe keeps listing.
HISTORY = 10
THROUGHPUTS = {"PERSISTENT_1": (50, 100, 200), "PERSISTENT_2": (125, 250, 500, 1000)}


class FsxState(Protocol):
    """What these handlers reach of the shims' state."""

    scale: float
    #: (region, id) -> a file system / an association.
    file_systems: dict[tuple[str, str], Any]
    associations: dict[tuple[str, str], Any]
    #: (region, id) -> (when the update lands, the changes it makes).
    fsx_updates: dict[tuple[str, str], tuple[float, dict[str, Any]]]


def advance(s: FsxState, now: float) -> None:
    """Land the updates that are due: the new values, AVAILABLE again."""
    for key, (at, changes) in list(s.fsx_updates.items()):
        if now < at:
            continue
        table = s.file_systems if key in s.file_systems else s.associations
        item = table.get(key)
        del s.fsx_updates[key]
        if item is None:
            continue
        lustre = changes.pop("LustreConfiguration", None)
        item.data.update(changes)
        if lustre:
            item.data.setdefault("LustreConfiguration", {}).update(lustre)
        item.data["Lifecycle"] = "AVAILABLE"
        for action in item.data.get("AdministrativeActions", []):
            action["Status"] = "COMPLETED"


def _last_increase(data: dict[str, Any]) -> float | None:
    """When the file system's last storage increase was requested, if it did not fail."""
    times = [
        float(a["RequestTime"])
        for a in data.get("AdministrativeActions") or []
        if "StorageCapacity" in (a.get("TargetFileSystemValues") or {})
        and a.get("Status") != "FAILED"
    ]
    return max(times, default=None)


def _error(code: str, message: str) -> Answer:
    return p.json_error(400, code, message)


def update_file_system(s: FsxState, call: p.Call) -> Answer:
    """UpdateFileSystem: storage capacity, throughput per TiB, auto-import, compression."""
    q = call.params
    fs = s.file_systems.get((call.region, q.get("FileSystemId", "")))
    if fs is None:
        return _error(
            "FileSystemNotFound", f"File system '{q.get('FileSystemId')}' does not exist."
        )
    data = fs.data
    if data["Lifecycle"] != "AVAILABLE" or (call.region, data["FileSystemId"]) in s.fsx_updates:
        return _error(
            "BadRequest",
            "Unable to perform the update. There is an update already in progress or the "
            "file system is not AVAILABLE.",
        )
    lustre = data.get("LustreConfiguration", {})
    kind = lustre.get("DeploymentType", "")
    changes: dict[str, Any] = {}
    actions: list[tuple[str, dict[str, Any]]] = []
    if "StorageCapacity" in q:
        size = int(q["StorageCapacity"])
        if kind == "SCRATCH_1":
            return _error("BadRequest", "You can't increase the storage capacity of SCRATCH_1.")
        if size <= int(data["StorageCapacity"]) or size % 2400:
            return _error(
                "BadRequest",
                "The storage capacity must be greater than the current one and a multiple of "
                "2400 GiB.",
            )
        last = _last_increase(data)
        if last is not None and time.time() < last + GROW_INTERVAL_S:
            return _error(
                "BadRequest",
                "Unable to perform the storage capacity update. The storage capacity of this "
                "file system was increased less than 6 hours ago.",
            )
        changes["StorageCapacity"] = size
        actions.append(("FILE_SYSTEM_UPDATE", {"StorageCapacity": size}))
    new_lustre: dict[str, Any] = {}
    asked = q.get("LustreConfiguration") or {}
    if "PerUnitStorageThroughput" in asked:
        value = int(asked["PerUnitStorageThroughput"])
        if value not in THROUGHPUTS.get(kind, ()):
            return _error(
                "BadRequest",
                f"PerUnitStorageThroughput {value} is not valid for {kind or 'this'} file systems.",
            )
        new_lustre["PerUnitStorageThroughput"] = value
        # TargetFileSystemValues is a FileSystem: the throughput sits in its Lustre part.
        target = {"LustreConfiguration": {"PerUnitStorageThroughput": value}}
        actions.append(("FILE_SYSTEM_UPDATE", target))
    if "DataCompressionType" in asked:
        new_lustre["DataCompressionType"] = asked["DataCompressionType"]
    if "AutoImportPolicy" in asked:
        repo = dict(lustre.get("DataRepositoryConfiguration") or {})
        repo["AutoImportPolicy"] = asked["AutoImportPolicy"]
        new_lustre["DataRepositoryConfiguration"] = repo
    if new_lustre:
        changes["LustreConfiguration"] = new_lustre
    if not changes:
        return _error("BadRequest", "The request changes nothing.")
    data["Lifecycle"] = "UPDATING"
    data["AdministrativeActions"] = [
        {
            "AdministrativeActionType": kind_,
            "RequestTime": time.time(),
            "Status": "IN_PROGRESS",
            "TargetFileSystemValues": target,
        }
        for kind_, target in actions
    ] + list(data.get("AdministrativeActions") or [])[:HISTORY]
    s.fsx_updates[(call.region, data["FileSystemId"])] = (
        time.monotonic() + UPDATE_SECONDS * s.scale,
        changes,
    )
    return p.json_response({"FileSystem": data})


def update_association(s: FsxState, call: p.Call) -> Answer:
    """UpdateDataRepositoryAssociation: the S3 import and export policies."""
    q = call.params
    assoc = s.associations.get((call.region, q.get("AssociationId", "")))
    if assoc is None:
        return _error("DataRepositoryAssociationNotFound", "No such association.")
    if assoc.data["Lifecycle"] != "AVAILABLE":
        return _error("BadRequest", "The association is not AVAILABLE.")
    changes = {"S3": q.get("S3", assoc.data.get("S3", {}))}
    assoc.data["Lifecycle"] = "UPDATING"
    s.fsx_updates[(call.region, assoc.data["AssociationId"])] = (
        time.monotonic() + 60.0 * s.scale,
        changes,
    )
    return p.json_response({"Association": {**assoc.data, **changes}})


def _by_arn(s: FsxState, region: str, arn: str) -> dict[str, Any] | None:
    for table in (s.file_systems, s.associations):
        for (where, _), item in table.items():
            if where == region and item.data.get("ResourceARN") == arn:
                data: dict[str, Any] = item.data
                return data
    return None


def tag(s: FsxState, call: p.Call) -> Answer:
    """TagResource on a file system or an association."""
    data = _by_arn(s, call.region, call.params.get("ResourceARN", ""))
    if data is None:
        return _error("ResourceNotFound", "The resource does not exist.")
    tags = {t["Key"]: t["Value"] for t in data.get("Tags", [])}
    tags.update({t["Key"]: t["Value"] for t in call.params.get("Tags", [])})
    data["Tags"] = [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
    return p.json_response({})


def untag(s: FsxState, call: p.Call) -> Answer:
    """UntagResource on a file system or an association."""
    data = _by_arn(s, call.region, call.params.get("ResourceARN", ""))
    if data is None:
        return _error("ResourceNotFound", "The resource does not exist.")
    gone = set(call.params.get("TagKeys", []))
    data["Tags"] = [t for t in data.get("Tags", []) if t["Key"] not in gone]
    return p.json_response({})


def repository_configuration(lustre: dict[str, Any]) -> dict[str, Any]:
    """A created file system's LustreConfiguration as FSx describes it: the S3 link of types
    other than PERSISTENT_2 under DataRepositoryConfiguration, an ExportPath of
    ``s3://BUCKET/FSxLustre<time>`` when only an ImportPath was given."""
    out = {
        k: v for k, v in lustre.items() if k not in ("ImportPath", "ExportPath", "AutoImportPolicy")
    }
    if "ImportPath" in lustre:
        bucket = str(lustre["ImportPath"]).removeprefix("s3://").split("/", 1)[0]
        out["DataRepositoryConfiguration"] = {
            "Lifecycle": "AVAILABLE",
            "ImportPath": lustre["ImportPath"],
            "ExportPath": lustre.get("ExportPath")
            or f"s3://{bucket}/FSxLustre{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}",
            "AutoImportPolicy": lustre.get("AutoImportPolicy", "NONE"),
            "ImportedFileChunkSize": 1024,
        }
    return out


#: Operation -> handler.
HANDLERS = {
    "UpdateFileSystem": update_file_system,
    "UpdateDataRepositoryAssociation": update_association,
    "TagResource": tag,
    "UntagResource": untag,
}
