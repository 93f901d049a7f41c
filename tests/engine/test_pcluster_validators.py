"""ParallelCluster's own validators (its package, in its own virtualenv) on the config `up`
renders with the emulator's real ids: once early, before the file system, and once on the
final config with the file system's id, its interfaces and their security groups."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.engine.harness import ROOT, Sandbox, owned, raw_leftovers, region_of, spec_file

PCLUSTER = ROOT / ".venv-pcluster" / "bin" / "pcluster"

pytestmark = pytest.mark.skipif(
    not PCLUSTER.exists() and not os.environ.get("CI"),
    reason="ParallelCluster's virtualenv is missing: `make tools` makes it (CI requires it)",
)


@pytest.fixture
def home_with_pcluster(sandbox: Sandbox, tmp_path: Path) -> Path:
    """An FMCTL_HOME on the shared emulator whose ParallelCluster is the real one, recorded
    as `fmctl setup parallelcluster` records it."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "sandbox").symlink_to(sandbox.home / "sandbox")
    (home / "parallelcluster.json").write_text(json.dumps({"command": [str(PCLUSTER)]}))
    return home


def _lines_with(text: str, *words: str) -> list[int]:
    return [i for i, line in enumerate(text.splitlines()) if all(w in line for w in words)]


def test_real_validators_accept_the_config_up_renders(
    sandbox: Sandbox, home_with_pcluster: Path, tmp_path: Path
) -> None:
    name = "pc-real"
    spec = spec_file(tmp_path, name, example="p5-slurm-capacity-block.yaml")
    region = region_of(spec)
    # With remote write to AMP: the head node's AdditionalIamPolicies then names the policy
    # fmctl makes, which ParallelCluster's validators look up (in both checks).
    data = yaml.safe_load(spec.read_text())
    data["observability"]["ampWorkspaceArn"] = (
        f"arn:aws:aps:{region}:123456789012:workspace/ws-22222222-aaaa-bbbb-cccc-000000000001"
    )
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    env = {"FMCTL_HOME": str(home_with_pcluster), "PATH": "/usr/bin:/bin"}
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300, **env)
    assert up.returncode == 0, up.stdout + up.stderr
    assert "ParallelCluster's validators accepted" in up.stdout
    # The early check ran before the file system was asked for.
    (checked,) = _lines_with(up.stdout, "parallelcluster/check", "ready")
    (fsx_create,) = _lines_with(up.stdout, "] fsx ", "creating")
    assert checked < fsx_create

    folder = home_with_pcluster / "clusters" / name
    early = yaml.safe_load((folder / "cluster-config.checked.yaml").read_text())
    final = yaml.safe_load((folder / "cluster-config.yaml").read_text())
    items = {logical: aws_id for _, logical, aws_id in owned(sandbox, name, region)}
    assert "StorageCapacity" in early["SharedStorage"][0]["FsxLustreSettings"]
    assert final["SharedStorage"][0]["FsxLustreSettings"] == {"FileSystemId": items["fsx"]}
    assert final["HeadNode"]["Networking"]["AdditionalSecurityGroups"] == [items["sg/efa"]]
    policies = [p["Policy"] for p in final["HeadNode"]["Iam"]["AdditionalIamPolicies"]]
    assert items["iam/amp-write"] in policies

    # Negative control: a change by hand that fmctl does not undo (the file system's own
    # interface put in another group) and ParallelCluster must catch: the nodes could no
    # longer reach Lustre's port 988.
    ec2 = sandbox.aws(region).client("ec2")
    fs = sandbox.aws(region).client("fsx").describe_file_systems(FileSystemIds=[items["fsx"]])
    (eni,) = fs["FileSystems"][0]["NetworkInterfaceIds"]
    vpc_default = ec2.create_security_group(
        GroupName=f"{name}-by-hand", Description="not fmctl's", VpcId=items["vpc"]
    )["GroupId"]
    ec2.modify_network_interface_attribute(NetworkInterfaceId=eni, Groups=[vpc_default])
    again = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300, **env)
    assert again.returncode == 1
    assert "ExistingFsxNetworkingValidator" in again.stderr and "988" in again.stderr
    assert "Traceback" not in again.stderr

    ec2.modify_network_interface_attribute(NetworkInterfaceId=eni, Groups=[items["sg/fsx"]])
    ec2.delete_security_group(GroupId=vpc_default)
    down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes", **env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []
    # The data bucket the sandbox made stands for the user's: never deleted.
    buckets = [b["Name"] for b in sandbox.aws(region).client("s3").list_buckets()["Buckets"]]
    assert "my-datasets" in buckets


def test_fmctl_says_first_what_parallelcluster_would_refuse(
    sandbox: Sandbox, home_with_pcluster: Path, tmp_path: Path
) -> None:
    """A capacity block for Windows (ParallelCluster's CapacityReservationValidator refuses
    it for alinux2023) is reported by fmctl, located, before anything is created."""
    name = "pc-real-refused"
    spec = spec_file(tmp_path, name, example="p5-slurm-capacity-block.yaml")
    data = yaml.safe_load(spec.read_text())
    data["compute"]["gpuPools"][0]["capacity"]["reservationId"] = "cr-0bbbbbbbbbbbbbbbb"
    spec.write_text(yaml.safe_dump(data))
    sandbox.seed(
        {
            "capacityReservationId": "cr-0bbbbbbbbbbbbbbbb",
            "instanceType": "p5.48xlarge",
            "availabilityZone": data["network"]["availabilityZone"],
            "totalInstanceCount": 16,
            "availableInstanceCount": 16,
            "state": "active",
            "reservationType": "capacity-block",
            "instancePlatform": "Windows",
        }
    )
    env = {"FMCTL_HOME": str(home_with_pcluster), "PATH": "/usr/bin:/bin"}
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300, **env)
    assert up.returncode == 1
    assert "is for Windows instances" in up.stderr and "reservationId" in up.stderr
    assert owned(sandbox, name, region_of(spec)) == []  # stopped before any create
