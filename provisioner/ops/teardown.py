"""What `down` says before it asks: what it deletes, and plainly what data goes with it.

FSx for Lustre's data lives on the file system: deleting it deletes every file on it that
was not exported (the FSx for Lustre User Guide, "Deleting a file system": data not yet
exported to the linked repository is lost). What the data repository associations link in
S3 is not deleted: S3's objects stay in the user's bucket. The artifact bucket is fmctl's
own (node scripts, check results): it goes with the cluster. So do the EKS control-plane
logs, unless `down --keep-logs` keeps their group. A file system made with
``deletionPolicy: retain`` stays, with its associations and security group, released from
the cluster.
"""

from __future__ import annotations

from provisioner.ops.target import Target
from provisioner.resources.base import Owned
from provisioner.resources.context import Context
from provisioner.resources.fsx import DELETION_POLICY_TAG


def retained(ctx: Context, found: list[Owned]) -> list[Owned]:
    """What `down` keeps for a file system made with deletionPolicy: retain: the file
    system, its S3 associations and its security group (the file system's interfaces hold
    on to it)."""
    from provisioner.resources.fsx import FileSystem

    if not any(o.kind == "fsx" for o in found):
        return []
    keep = {o.id for o in FileSystem().retained(ctx)}
    if not keep:
        return []
    return [
        o
        for o in found
        if (o.kind == "fsx" and o.id in keep)
        or o.kind == "dra"
        or (o.kind == "sg" and o.resource == "sg/fsx")
    ]


def data_notes(target: Target, found: list[Owned], keep_logs: bool = False) -> list[str]:
    """Lines on the data `down` deletes and the data it leaves (read-only calls)."""
    lines = [
        f"the control-plane logs in {o.id} are deleted (--keep-logs keeps them)"
        for o in found
        if o.kind == "log-group" and not keep_logs
    ]
    fsx = [o for o in found if o.kind == "fsx"]
    if not fsx:
        return lines
    client = target.aws(read_only=True).client("fsx")
    described = client.describe_file_systems(FileSystemIds=[o.id for o in fsx])["FileSystems"]
    for item in described:
        size = int(item.get("StorageCapacity", 0))
        tags = {t["Key"]: t["Value"] for t in item.get("Tags", [])}
        if tags.get(DELETION_POLICY_TAG) == "retain":
            lines.append(
                f"the FSx file system {item['FileSystemId']} ({size:,} GiB) is kept with its "
                "data (deletionPolicy: retain), with its S3 links and security group; it is "
                "billed until you delete it"
            )
            continue
        lines.append(
            f"the FSx file system {item['FileSystemId']} and the data on it ({size:,} GiB of "
            "capacity) are deleted: what was not exported to S3 is lost"
        )
        links = client.describe_data_repository_associations(
            Filters=[{"Name": "file-system-id", "Values": [item["FileSystemId"]]}]
        )["Associations"]
        for link in links:
            lines.append(
                f"  stays: {link['DataRepositoryPath']} (linked at "
                f"{link.get('FileSystemPath', '/')}; S3 objects are not deleted)"
            )
    return lines
