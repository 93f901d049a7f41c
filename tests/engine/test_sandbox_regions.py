"""The sandbox keeps regions apart, as AWS does: what one region holds is unknown in another,
for every shim (placement groups, reservations, FSx and its associations, EKS and its
Kubernetes APIs), and `down` in one region leaves the same name in another whole.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from botocore.exceptions import ClientError

from tests.engine.harness import Sandbox, owned, raw_leftovers, spec_file, subnets

EAST, WEST = "us-east-2", "us-west-2"


def _subnets(sandbox: Sandbox, region: str) -> list[str]:
    return subnets(sandbox, region, 77)


def _code(call: Any) -> str:
    with pytest.raises(ClientError) as caught:
        call()
    return str(caught.value.response["Error"]["Code"])


def test_placement_groups_and_reservations_are_per_region(sandbox: Sandbox) -> None:
    name = f"pg-{uuid.uuid4().hex[:6]}"
    east, west = sandbox.aws(EAST).client("ec2"), sandbox.aws(WEST).client("ec2")
    east.create_placement_group(GroupName=name, Strategy="cluster")
    west.create_placement_group(GroupName=name, Strategy="cluster")  # no Duplicate
    west.delete_placement_group(GroupName=name)
    assert [
        g["GroupName"] for g in east.describe_placement_groups(GroupNames=[name])["PlacementGroups"]
    ] == [name]
    assert _code(lambda: west.describe_placement_groups(GroupNames=[name])) == (
        "InvalidPlacementGroup.Unknown"
    )

    rid = f"cr-0{uuid.uuid4().hex[:16]}"
    sandbox.seed(
        {
            "capacityReservationId": rid,
            "instanceType": "p5.48xlarge",
            "availabilityZone": f"{EAST}a",
            "totalInstanceCount": 2,
            "availableInstanceCount": 2,
            "state": "active",
        }
    )
    found = east.describe_capacity_reservations(CapacityReservationIds=[rid])
    assert found["CapacityReservations"][0]["AvailabilityZone"] == f"{EAST}a"
    assert _code(lambda: west.describe_capacity_reservations(CapacityReservationIds=[rid])) == (
        "InvalidCapacityReservationId.NotFound"
    )


def test_file_systems_and_associations_are_per_region(sandbox: Sandbox) -> None:
    fsx_east, fsx_west = sandbox.aws(EAST).client("fsx"), sandbox.aws(WEST).client("fsx")
    token = uuid.uuid4().hex

    def lustre(client: Any, region: str) -> dict[str, Any]:
        made: dict[str, Any] = client.create_file_system(
            FileSystemType="LUSTRE",
            StorageCapacity=1200,
            SubnetIds=_subnets(sandbox, region)[:1],
            LustreConfiguration={"DeploymentType": "SCRATCH_2"},
            ClientRequestToken=token,
        )["FileSystem"]
        return made

    made = lustre(fsx_east, EAST)
    fs_id = made["FileSystemId"]
    assert fs_id not in {f["FileSystemId"] for f in fsx_west.describe_file_systems()["FileSystems"]}
    assert _code(lambda: fsx_west.describe_file_systems(FileSystemIds=[fs_id])) == (
        "FileSystemNotFound"
    )
    # The west region cannot delete, update or tag the east region's file system.
    assert _code(lambda: fsx_west.delete_file_system(FileSystemId=fs_id)) == "FileSystemNotFound"
    assert _code(lambda: fsx_west.update_file_system(FileSystemId=fs_id, StorageCapacity=2400)) == (
        "FileSystemNotFound"
    )
    assert (
        _code(
            lambda: fsx_west.tag_resource(
                ResourceARN=made["ResourceARN"], Tags=[{"Key": "k", "Value": "v"}]
            )
        )
        == "ResourceNotFound"
    )
    # A client token is per region too: the same token in the west makes a new one there.
    again = lustre(fsx_west, WEST)
    assert again["FileSystemId"] != fs_id and f":{WEST}:" in again["ResourceARN"]
    assert fsx_east.describe_file_systems(FileSystemIds=[fs_id])["FileSystems"][0]
    for client, ident in ((fsx_east, fs_id), (fsx_west, again["FileSystemId"])):
        deadline = time.monotonic() + 30
        while (
            client.describe_file_systems(FileSystemIds=[ident])["FileSystems"][0]["Lifecycle"]
            != "AVAILABLE"
        ):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        client.delete_file_system(FileSystemId=ident)


def test_eks_clusters_of_one_name_have_apis_of_their_own(sandbox: Sandbox) -> None:
    from provisioner.drivers.eks_auth import token

    name = f"twin-{uuid.uuid4().hex[:6]}"
    role = f"arn:aws:iam::123456789012:role/{name}"
    endpoints = {}
    for region in (EAST, WEST):
        eks = sandbox.aws(region).client("eks")
        eks.create_cluster(
            name=name, roleArn=role, resourcesVpcConfig={"subnetIds": _subnets(sandbox, region)}
        )
        endpoints[region] = eks.describe_cluster(name=name)["cluster"]["endpoint"]
    assert endpoints[EAST] != endpoints[WEST]
    import ssl
    import urllib.request

    context = ssl.create_default_context(cafile=sandbox.info["ca"])

    def put_map(region: str, value: str) -> None:
        body = yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "where", "namespace": "default"},
                "data": {"region": value},
            }
        ).encode()
        request = urllib.request.Request(
            f"{endpoints[region]}/api/v1/namespaces/default/configmaps/where?fieldManager=t",
            data=body,
            method="PATCH",
            headers={
                "Authorization": f"Bearer {token(sandbox.aws(region), name)}",
                "Content-Type": "application/apply-patch+yaml",
            },
        )
        urllib.request.urlopen(request, context=context).read()

    def get_map(region: str) -> str:
        import json

        request = urllib.request.Request(
            f"{endpoints[region]}/api/v1/namespaces/default/configmaps/where",
            headers={"Authorization": f"Bearer {token(sandbox.aws(region), name)}"},
        )
        with urllib.request.urlopen(request, context=context) as reply:
            return str(json.loads(reply.read())["data"]["region"])

    deadline = time.monotonic() + 30
    while (
        sandbox.aws(WEST).client("eks").describe_cluster(name=name)["cluster"]["status"] != "ACTIVE"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    put_map(EAST, EAST)
    put_map(WEST, WEST)
    assert (get_map(EAST), get_map(WEST)) == (EAST, WEST)
    for region in (EAST, WEST):
        sandbox.aws(region).client("eks").delete_cluster(name=name)


def test_down_in_one_region_leaves_the_same_name_in_another_whole(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """Two users (two homes, one account) each make a cluster called ``twin``, one in
    us-west-2 and one in us-east-2; `down` of the us-east-2 one leaves the other whole."""
    name = "twin"
    west = spec_file(tmp_path, name)
    data = yaml.safe_load(west.read_text())
    data["metadata"]["region"] = EAST
    data["metadata"]["ttl"] = "24h"
    data["network"]["availabilityZone"] = f"{EAST}a"
    data["storage"]["fsxLustre"]["s3"] = {
        "importPath": "s3://acme-ml-data-east/corpora",
        "exportPath": "s3://acme-ml-data-east/checkpoints",
    }
    east = tmp_path / "east" / f"{name}.yaml"
    east.parent.mkdir()
    east.write_text(yaml.safe_dump(data, sort_keys=False))
    other = tmp_path / "other-home"
    other.mkdir()
    (other / "sandbox").symlink_to(sandbox.home / "sandbox")

    made = sandbox.fmctl("up", "-f", str(west), "--sandbox", "--yes", timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    made = sandbox.fmctl(
        "up", "-f", str(east), "--sandbox", "--yes", timeout=300, FMCTL_HOME=str(other)
    )
    assert made.returncode == 0, made.stdout + made.stderr
    before = owned(sandbox, name, WEST)
    assert before and owned(sandbox, name, EAST)
    status = sandbox.fmctl("status", name, "--region", WEST, "--sandbox", "-o", "json")
    assert status.returncode == 0, status.stderr
    assert f":{EAST}:" not in status.stdout

    # `list`, from tags alone (each user's home has only its own state): both, each in its
    # region; one region's list shows only its own.
    listed = sandbox.fmctl("list", "--all-regions", "--sandbox", "-o", "json", timeout=300)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    twins = [r for r in json.loads(listed.stdout) if r["name"] == name]
    assert [(r["region"], r["scheduler"], r["provider"], r["state"]) for r in twins] == sorted(
        [(EAST, "kubernetes", "eks", "ACTIVE"), (WEST, "kubernetes", "eks", "ACTIVE")]
    )
    assert all(r["ageSeconds"] >= 0 and not r["expired"] for r in twins), twins
    # The east one has a ttl, the west one (the example) none.
    assert [r["expiresAt"] is not None for r in twins] == [True, False]
    west_only = sandbox.fmctl("list", "--region", WEST, "--sandbox")
    rows = [line.split() for line in west_only.stdout.splitlines()[1:]]
    assert [(r[1], r[2]) for r in rows if r[0] == name] == [(WEST, "kubernetes")]

    down = sandbox.fmctl(
        "down", name, "--region", EAST, "--sandbox", "--yes", timeout=300, FMCTL_HOME=str(other)
    )
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, EAST) == []
    assert owned(sandbox, name, WEST) == before
    # Gone from the east, though its twin's bucket is in the one global bucket listing.
    east_list = sandbox.fmctl("list", "--region", EAST, "--sandbox", "-o", "json")
    assert name not in {r["name"] for r in json.loads(east_list.stdout)}
    fsx = [aws_id for kind, _, aws_id in before if kind == "fsx"]
    assert fsx
    (fs,) = sandbox.aws(WEST).client("fsx").describe_file_systems(FileSystemIds=fsx)["FileSystems"]
    assert fs["Lifecycle"] == "AVAILABLE"
    down = sandbox.fmctl("down", name, "--region", WEST, "--sandbox", "--yes", timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, WEST) == []
