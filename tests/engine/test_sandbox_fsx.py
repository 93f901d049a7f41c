"""The sandbox's FSx for Lustre updates, asked directly through boto3 (so every answer is
parsed by botocore against FSx's own model): what FSx documents it takes and refuses.

Sources: FSx for Lustre User Guide, "Managing storage capacity" (only grows, in steps of
2400 GiB for persistent SSD, not at all for SCRATCH_1; the next increase 6 hours after the
last was requested; UPDATING while it runs) and "Managing throughput capacity" (PERSISTENT_2
takes 125, 250, 500 or 1000 MB/s/TiB); API reference, AdministrativeAction.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.engine.harness import Sandbox

REGION = "eu-west-1"


def _file_system(sandbox: Sandbox, kind: str = "PERSISTENT_2") -> tuple[Any, str]:
    aws = sandbox.aws(REGION)
    ec2, fsx = aws.client("ec2"), aws.client("fsx")
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.1.0/24")["Subnet"]["SubnetId"]
    lustre: dict[str, Any] = {"DeploymentType": kind}
    if kind.startswith("PERSISTENT"):
        lustre["PerUnitStorageThroughput"] = 250 if kind == "PERSISTENT_2" else 200
    fs = fsx.create_file_system(
        FileSystemType="LUSTRE",
        StorageCapacity=1200,
        SubnetIds=[subnet],
        LustreConfiguration=lustre,
        ClientRequestToken=uuid.uuid4().hex,
    )["FileSystem"]
    _settle(fsx, fs["FileSystemId"])
    return fsx, fs["FileSystemId"]


def _describe(fsx: Any, fs_id: str) -> dict[str, Any]:
    (fs,) = fsx.describe_file_systems(FileSystemIds=[fs_id])["FileSystems"]
    return dict(fs)


def _settle(fsx: Any, fs_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        fs = _describe(fsx, fs_id)
        if fs["Lifecycle"] == "AVAILABLE":
            return fs
        time.sleep(0.1)
    raise AssertionError(f"{fs_id} never became AVAILABLE")


def _refused(call: Any, **params: Any) -> str:
    with pytest.raises(ClientError) as caught:
        call(**params)
    error = caught.value.response["Error"]
    assert error["Code"] == "BadRequest", error
    return str(error["Message"])


def test_storage_grows_once_then_waits_six_hours(sandbox: Sandbox) -> None:
    fsx, fs_id = _file_system(sandbox)
    grown = fsx.update_file_system(FileSystemId=fs_id, StorageCapacity=2400)["FileSystem"]
    assert grown["Lifecycle"] == "UPDATING"
    (action,) = grown["AdministrativeActions"]
    assert action["AdministrativeActionType"] == "FILE_SYSTEM_UPDATE"
    assert action["TargetFileSystemValues"] == {"StorageCapacity": 2400}
    # One update at a time: a second while it runs is refused.
    busy = _refused(
        fsx.update_file_system,
        FileSystemId=fs_id,
        LustreConfiguration={"PerUnitStorageThroughput": 500},
    )
    assert "in progress" in busy
    fs = _settle(fsx, fs_id)
    assert fs["StorageCapacity"] == 2400
    assert fs["AdministrativeActions"][0]["Status"] == "COMPLETED"
    # Landed, but requested moments ago: the next increase must wait its 6 hours.
    assert "6 hours" in _refused(fsx.update_file_system, FileSystemId=fs_id, StorageCapacity=4800)
    # Not a multiple of 2400, or smaller: refused whatever the time.
    assert "2400" in _refused(fsx.update_file_system, FileSystemId=fs_id, StorageCapacity=3600)


def test_throughput_changes_within_its_deployment_types_values(sandbox: Sandbox) -> None:
    fsx, fs_id = _file_system(sandbox)
    assert "not valid" in _refused(
        fsx.update_file_system,
        FileSystemId=fs_id,
        LustreConfiguration={"PerUnitStorageThroughput": 200},
    )
    changed = fsx.update_file_system(
        FileSystemId=fs_id, LustreConfiguration={"PerUnitStorageThroughput": 500}
    )["FileSystem"]
    # The target is a FileSystem: the throughput sits in its LustreConfiguration (a value
    # in the wrong place would be dropped by botocore's parser and read as nothing).
    (action,) = changed["AdministrativeActions"]
    assert action["TargetFileSystemValues"] == {
        "LustreConfiguration": {"PerUnitStorageThroughput": 500}
    }
    assert _describe(fsx, fs_id)["Lifecycle"] == "UPDATING"
    fs = _settle(fsx, fs_id)
    assert fs["LustreConfiguration"]["PerUnitStorageThroughput"] == 500
    # A throughput change is no storage increase: storage may still grow.
    grown = fsx.update_file_system(FileSystemId=fs_id, StorageCapacity=2400)["FileSystem"]
    assert grown["Lifecycle"] == "UPDATING"


def test_scratch_1_never_grows(sandbox: Sandbox) -> None:
    fsx, fs_id = _file_system(sandbox, "SCRATCH_1")
    assert "SCRATCH_1" in _refused(fsx.update_file_system, FileSystemId=fs_id, StorageCapacity=2400)
