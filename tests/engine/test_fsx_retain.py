"""`storage.fsxLustre.deletionPolicy: retain`: `down` keeps the file system with its data,
its S3 associations and its security group, released from the cluster (no fmctl tag but
where it came from), names it with the command to delete it, and deletes everything else;
the group's rules that named the cluster's EFA group now name the VPC's block."""

from __future__ import annotations

from pathlib import Path

import yaml

from provisioner.resources.tags import OWNER_TAG, RETAINED_TAG
from tests.conftest import ROOT
from tests.engine.harness import Sandbox, owned, raw_leftovers, spec_file

NAME = "e2e-retain"
REGION = "us-west-2"


def test_down_keeps_a_retained_file_system(sandbox: Sandbox, tmp_path: Path) -> None:
    ec2 = sandbox.aws(REGION).client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.81.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.81.0.0/20", AvailabilityZone="us-west-2a")
    second = ec2.create_subnet(VpcId=vpc, CidrBlock="10.81.16.0/20", AvailabilityZone="us-west-2b")
    fsx = yaml.safe_load((ROOT / "examples" / "p5en-eks-fsx-s3.yaml").read_text())["storage"]
    fsx["fsxLustre"]["deletionPolicy"] = "retain"
    spec = spec_file(
        tmp_path,
        NAME,
        network={
            "availabilityZone": "us-west-2a",
            "vpcId": vpc,
            "subnetId": subnet["Subnet"]["SubnetId"],
            "secondarySubnetId": second["Subnet"]["SubnetId"],
            "apiCidrs": [],
        },
        storage=fsx,
    )
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    ids = {logical: aws_id for _, logical, aws_id in owned(sandbox, NAME, REGION)}
    fs_id, group, efa = ids["fsx"], ids["sg/fsx"], ids["sg/efa"]
    links = [aws_id for logical, aws_id in ids.items() if logical.startswith("dra/")]
    assert links

    down = sandbox.fmctl("down", NAME, "--region", REGION, "--sandbox", "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    said = down.stdout + down.stderr
    assert f"the FSx file system {fs_id}" in said and "is kept with its data" in said
    assert f"aws fsx delete-file-system --file-system-id {fs_id} --region {REGION}" in said
    assert raw_leftovers(sandbox, NAME, REGION) == []
    assert owned(sandbox, NAME, REGION) == []

    fsx_api = sandbox.aws(REGION).client("fsx")
    (kept,) = fsx_api.describe_file_systems(FileSystemIds=[fs_id])["FileSystems"]
    assert kept["Lifecycle"] == "AVAILABLE"
    tags = {t["Key"]: t["Value"] for t in kept["Tags"]}
    assert tags[RETAINED_TAG] == NAME and OWNER_TAG not in tags
    assert not [k for k in tags if k.startswith("fmctl.dev/") and k != RETAINED_TAG]
    kept_links = fsx_api.describe_data_repository_associations(AssociationIds=links)
    assert len(kept_links["Associations"]) == len(links)
    (sg,) = ec2.describe_security_groups(GroupIds=[group])["SecurityGroups"]
    peers = {
        pair["GroupId"]
        for key in ("IpPermissions", "IpPermissionsEgress")
        for perm in sg[key]
        for pair in perm.get("UserIdGroupPairs", [])
    }
    assert efa not in peers and peers <= {group}
    assert any(
        r.get("CidrIp") == "10.81.0.0/16" for p in sg["IpPermissions"] for r in p["IpRanges"]
    )
    assert not ec2.describe_security_groups(Filters=[{"Name": "group-id", "Values": [efa]}])[
        "SecurityGroups"
    ]
    # What the user does later: the file system, then its group, then their VPC.
    import time

    for link in links:
        fsx_api.delete_data_repository_association(AssociationId=link)
    for _ in range(600):
        left = fsx_api.describe_data_repository_associations(
            Filters=[{"Name": "file-system-id", "Values": [fs_id]}]
        )["Associations"]
        if not left:
            break
        time.sleep(0.1)
    fsx_api.delete_file_system(FileSystemId=fs_id)
