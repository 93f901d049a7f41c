"""The FSx for Lustre file system's create after a lost answer and its delete, against recorded
FSx answers: CreateFileSystem carries a client request token that is the same on every try,
so the retried create is answered with the file system FSx is already making, which fmctl
waits for; a FAILED one says why; a delete waits until FSx no longer knows the file system,
and one already gone is deleted."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.resources.base import Owned, Request
from provisioner.resources.compute import SgOut
from provisioner.resources.context import Context
from provisioner.resources.errors import ResourceError
from provisioner.resources.fsx import FileSystem, FsxOut
from provisioner.resources.network import SubnetOut
from tests.resources.contract import covers
from tests.resources.recorded import RecordedAws, example, tags
from tests.resources.test_lifecycle_verbs import CLUSTER, _ctx, _spec
from tests.resources.test_read_diff import _fsx_params

FS = "fs-0498eed5fe91001ec"


def _lustre(lifecycle: str) -> dict[str, Any]:
    """AWS's published file system, as the Lustre one fmctl asks for."""
    item = example("fsx", "DescribeFileSystems")["FileSystems"][0]
    item.pop("WindowsConfiguration")
    item.update(
        FileSystemType="LUSTRE",
        Lifecycle=lifecycle,
        StorageCapacity=1200,
        SubnetIds=["subnet-9d4a7b6c"],
        Tags=tags(CLUSTER, "fsx", team="ml"),
        LustreConfiguration={"DeploymentType": "PERSISTENT_2", "MountName": "abcd1234"},
    )
    return item


def _wired(aws: RecordedAws) -> Context:
    ctx = _ctx(aws)
    ctx.record("subnet/private", SubnetOut("subnet-9d4a7b6c", "us-east-1a"))
    ctx.record("sg/fsx", SgOut("sg-903004f8"))
    return ctx


@covers("fsx", "create-adopts")
def test_a_file_systems_create_carries_one_token_and_waits_for_the_one_fsx_makes() -> None:
    tokens = []
    for _run in range(2):  # the first try, and the try after its answer was lost
        aws = RecordedAws()
        ctx = _wired(aws)
        token = ctx.token("fsx")
        tokens.append(token)
        request = {
            "ClientRequestToken": token,
            "FileSystemType": "LUSTRE",
            "StorageCapacity": 1200,
            "StorageType": "SSD",
            "SubnetIds": ["subnet-9d4a7b6c"],
            "SecurityGroupIds": ["sg-903004f8"],
            "LustreConfiguration": {
                "DeploymentType": "PERSISTENT_2",
                "DataCompressionType": "LZ4",
                "PerUnitStorageThroughput": 250,
            },
            "FileSystemTypeVersion": "2.15",
            "Tags": _spec("fsx", "fsx")[0]["Tags"],
        }
        aws.answer("fsx", "CreateFileSystem", {"FileSystem": _lustre("CREATING")}, request)
        aws.answer("fsx", "DescribeFileSystems", {"FileSystems": [_lustre("CREATING")]})
        aws.answer("fsx", "DescribeFileSystems", {"FileSystems": [_lustre("AVAILABLE")]})
        out = FileSystem().create(Request(ctx, "fsx", _fsx_params(1200)))
        assert out == FsxOut(FS, "fs-0498eed5fe91001ec.fsx.com", "abcd1234")
        aws.done()
    assert tokens[0] == tokens[1] and tokens[0] != _ctx(RecordedAws()).token("fsx/other")
    failed = RecordedAws()
    broken = dict(_lustre("FAILED"), FailureDetails={"Message": "subnet has no free addresses"})
    failed.answer("fsx", "CreateFileSystem", {"FileSystem": _lustre("CREATING")})
    failed.answer("fsx", "DescribeFileSystems", {"FileSystems": [broken]})
    with pytest.raises(ResourceError, match="FAILED: subnet has no free addresses"):
        FileSystem().create(Request(_wired(failed), "fsx", _fsx_params(1200)))
    failed.done()


@covers("fsx", "delete")
def test_a_file_system_delete_waits_until_fsx_no_longer_knows_it() -> None:
    owned = Owned("fsx", "fsx", FS)
    aws = RecordedAws()
    ctx = _ctx(aws)
    expected = {"FileSystemId": FS, "ClientRequestToken": ctx.token(f"delete/{FS}")}
    aws.answer("fsx", "DeleteFileSystem", {"FileSystemId": FS, "Lifecycle": "DELETING"}, expected)
    aws.answer("fsx", "DescribeFileSystems", {"FileSystems": [_lustre("DELETING")]})
    aws.fail("fsx", "DescribeFileSystems", "FileSystemNotFound")
    FileSystem().delete(ctx, owned)
    aws.done()
    gone = RecordedAws()
    gone.fail("fsx", "DeleteFileSystem", "FileSystemNotFound")
    gone.answer("fsx", "DescribeFileSystems", {"FileSystems": []})
    FileSystem().delete(_ctx(gone), owned)
    gone.done()
