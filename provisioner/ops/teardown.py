"""What `down` says before it asks: what it deletes, and plainly what data goes with it.

FSx for Lustre's data lives on the file system: deleting it deletes every file on it that
was not exported (the FSx for Lustre User Guide, "Deleting a file system": data not yet
exported to the linked repository is lost). What the data repository associations link in
S3 is not deleted: S3's objects stay in the user's bucket. The artifact bucket is fmctl's
own (node scripts, check results): it goes with the cluster. So do the EKS control-plane
logs, unless `down --keep-logs` keeps their group.
"""

from __future__ import annotations

from provisioner.ops.target import Target
from provisioner.resources.base import Owned


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
