"""The data sources' reads against recorded answers: the FSx file system the spec names (only
an FSx for Lustre one, and not one being deleted) and AWS's PCS sample AMI (the newest of its
name, from AWS's publishing account)."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.resources.base import Request
from provisioner.resources.errors import ResourceError
from provisioner.resources.fsx import ExistingFileSystem, ExistingFsxParams, FsxOut
from provisioner.resources.pcs import (
    SAMPLE_AMI_OWNER,
    PcsAmiOut,
    PcsAmiParams,
    PcsSampleAmi,
    sample_ami_name,
)
from tests.resources.contract import covers
from tests.resources.recorded import RecordedAws, example
from tests.resources.test_lifecycle_verbs import _ctx

FS = "fs-0498eed5fe91001ec"


def _lustre(lifecycle: str = "AVAILABLE") -> dict[str, Any]:
    """AWS's published DescribeFileSystems example, as the Lustre file system it would be."""
    item = example("fsx", "DescribeFileSystems")["FileSystems"][0]
    item.pop("WindowsConfiguration")
    item.update(
        FileSystemType="LUSTRE",
        Lifecycle=lifecycle,
        DNSName=f"{FS}.fsx.us-east-1.amazonaws.com",
        LustreConfiguration={"DeploymentType": "PERSISTENT_2", "MountName": "abcdefgh"},
    )
    return item


@covers("existing-fsx", "read")
def test_the_named_file_system_is_read_by_id_and_only_an_fsx_for_lustre_one_is_used() -> None:
    req = lambda aws: Request(_ctx(aws), "fsx", ExistingFsxParams(FS))  # noqa: E731
    aws = RecordedAws()
    aws.answer("fsx", "DescribeFileSystems", {"FileSystems": [_lustre()]}, {"FileSystemIds": [FS]})
    seen = ExistingFileSystem().read(req(aws))
    assert seen is not None and seen.id == FS
    assert seen.outputs == FsxOut(FS, f"{FS}.fsx.us-east-1.amazonaws.com", "abcdefgh")
    # Gone, or on its way out: not there (the plan then says the spec names what is not).
    aws.fail("fsx", "DescribeFileSystems", "FileSystemNotFound")
    assert ExistingFileSystem().read(req(aws)) is None
    aws.answer("fsx", "DescribeFileSystems", {"FileSystems": [_lustre("DELETING")]})
    assert ExistingFileSystem().read(req(aws)) is None
    # AWS's example as published is FSx for Windows File Server (its answer names the type;
    # the example leaves the field out): nodes cannot mount it.
    windows = example("fsx", "DescribeFileSystems")
    windows["FileSystems"][0]["FileSystemType"] = "WINDOWS"
    aws.answer("fsx", "DescribeFileSystems", windows)
    with pytest.raises(ResourceError, match="an FSx WINDOWS file system, not FSx for Lustre"):
        ExistingFileSystem().read(req(aws))
    aws.done()


@covers("pcs-sample-ami", "read")
def test_the_newest_pcs_sample_ami_of_the_name_is_read_from_aws_publishing_account() -> None:
    params = PcsAmiParams("24.11", "x86_64")
    name = sample_ami_name("24.11", "x86_64")
    images = [
        {
            "ImageId": "ami-0a1b2c3d4e5f60001",
            "Name": f"{name}-2026-09",
            "CreationDate": "2026-09-01T00:00:00.000Z",
        },
        {
            "ImageId": "ami-0a1b2c3d4e5f60002",
            "Name": f"{name}-2026-11",
            "CreationDate": "2026-11-03T00:00:00.000Z",
        },
    ]
    aws = RecordedAws()
    expected = {
        "Owners": [SAMPLE_AMI_OWNER],
        "Filters": [
            {"Name": "name", "Values": [f"{name}*"]},
            {"Name": "architecture", "Values": ["x86_64"]},
            {"Name": "state", "Values": ["available"]},
        ],
    }
    aws.answer("ec2", "DescribeImages", {"Images": images}, expected)
    seen = PcsSampleAmi().read(Request(_ctx(aws), "pcs/ami", params))
    assert seen is not None and seen.outputs == PcsAmiOut("ami-0a1b2c3d4e5f60002")
    aws.answer("ec2", "DescribeImages", {"Images": []})
    assert PcsSampleAmi().read(Request(_ctx(aws), "pcs/ami", params)) is None
    aws.done()
    assert "not offered in this region" in str(
        PcsSampleAmi().missing(Request(_ctx(aws), "pcs/ami", params))
    )
