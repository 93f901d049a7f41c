"""The FSx data-repository association's verbs against answers in FSx's shapes (the Stubber
holds them to botocore's model): read finds the cluster's own among every page FSx gives (its
token followed), diff tells new import or export events (in place) from a new S3 path (a new
association), the create's client token is the same on every try so a lost answer returns the
association FSx is making, and a delete keeps the data in the file system and waits until FSx
no longer knows the association."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.graph.ref import Ref
from provisioner.resources.base import How, Owned, Request
from provisioner.resources.context import Context
from provisioner.resources.errors import ResourceError
from provisioner.resources.fsx import EVENTS, FsxOut
from provisioner.resources.fsx_dra import DraOut, DraParams, RepositoryLink
from tests.resources.contract import covers
from tests.resources.recorded import ACCOUNT, RecordedAws, tags
from tests.resources.test_lifecycle_verbs import CLUSTER, _ctx, _spec, _tags

FS, AID = "fs-0498eed5fe91001ec", "dra-0295ef8c2a0b1b5a5"


def _wired(aws: RecordedAws) -> Context:
    ctx = _ctx(aws)
    ctx.record("fsx", FsxOut(FS, f"{FS}.fsx.us-east-1.amazonaws.com", "abcdefgh"))
    return ctx


def _params(s3_path: str = "s3://llm-data/train", export: bool = True) -> DraParams:
    return DraParams(Ref("fsx", FsxOut), "/data", s3_path, True, export, _tags("fsx/link"))


def _association(
    lifecycle: str = "AVAILABLE", owner: str = CLUSTER, aid: str = AID
) -> dict[str, Any]:
    return {
        "AssociationId": aid,
        "ResourceARN": f"arn:aws:fsx:us-east-1:{ACCOUNT}:association/{FS}/{aid}",
        "FileSystemId": FS,
        "Lifecycle": lifecycle,
        "FileSystemPath": "/data",
        "DataRepositoryPath": "s3://llm-data/train",
        "S3": {
            "AutoImportPolicy": {"Events": list(EVENTS)},
            "AutoExportPolicy": {"Events": list(EVENTS)},
        },
        "Tags": tags(owner, "fsx/link", team="ml"),
    }


@covers("dra", "read", "diff")
def test_the_association_is_read_across_fsx_pages_and_a_new_s3_path_is_a_new_one() -> None:
    aws = RecordedAws()
    # The account's other associations fill the first page; the cluster's is on the second.
    others = [_association(owner="other", aid=f"dra-0{n:016x}") for n in range(3)]
    aws.answer(
        "fsx", "DescribeDataRepositoryAssociations", {"Associations": others, "NextToken": "p2"}, {}
    )
    aws.answer(
        "fsx",
        "DescribeDataRepositoryAssociations",
        {"Associations": [_association()]},
        {"NextToken": "p2"},
    )
    ctx = _wired(aws)
    req = Request(ctx, "fsx/link", _params())
    observed = RepositoryLink().read(req)
    aws.done()
    assert observed is not None and observed.outputs == DraOut(AID) and observed.pending is None
    assert RepositoryLink().diff(req, observed) == []
    import_only = RepositoryLink().diff(Request(ctx, "fsx/link", _params(export=False)), observed)
    assert {c.path: c.how for c in import_only} == {"export_events": How.UPDATE}
    moved = RepositoryLink().diff(Request(ctx, "fsx/link", _params("s3://llm-data/eval")), observed)
    assert {c.path: c.how for c in moved} == {"s3_path": How.REPLACE}


@covers("dra", "create-adopts")
def test_the_associations_create_carries_one_token_and_waits_for_the_one_fsx_makes() -> None:
    tokens = []
    for _run in range(2):
        aws = RecordedAws()
        ctx = _wired(aws)
        tokens.append(ctx.token("fsx/link"))
        request = {
            "FileSystemId": FS,
            "FileSystemPath": "/data",
            "DataRepositoryPath": "s3://llm-data/train",
            "BatchImportMetaDataOnCreate": True,
            "S3": {
                "AutoImportPolicy": {"Events": list(EVENTS)},
                "AutoExportPolicy": {"Events": list(EVENTS)},
            },
            "ClientRequestToken": tokens[-1],
            "Tags": _spec("dra", "fsx/link")[0]["Tags"],
        }
        aws.answer(
            "fsx",
            "CreateDataRepositoryAssociation",
            {"Association": _association("CREATING")},
            request,
        )
        aws.answer(
            "fsx",
            "DescribeDataRepositoryAssociations",
            {"Associations": [_association("CREATING")]},
        )
        aws.answer("fsx", "DescribeDataRepositoryAssociations", {"Associations": [_association()]})
        assert RepositoryLink().create(Request(ctx, "fsx/link", _params())) == DraOut(AID)
        aws.done()
    assert tokens[0] == tokens[1]
    failed = RecordedAws()
    broken = dict(_association("FAILED"), FailureDetails={"Message": "the bucket denies FSx"})
    failed.answer(
        "fsx", "CreateDataRepositoryAssociation", {"Association": _association("CREATING")}
    )
    failed.answer("fsx", "DescribeDataRepositoryAssociations", {"Associations": [broken]})
    with pytest.raises(ResourceError, match="FAILED: the bucket denies FSx"):
        RepositoryLink().create(Request(_wired(failed), "fsx/link", _params()))


@covers("dra", "delete")
def test_the_association_goes_without_the_data_in_the_file_system() -> None:
    owned = Owned("dra", "fsx/link", AID)
    aws = RecordedAws()
    expected = {"AssociationId": AID, "DeleteDataInFileSystem": False}
    aws.answer(
        "fsx",
        "DeleteDataRepositoryAssociation",
        {"AssociationId": AID, "Lifecycle": "DELETING"},
        expected,
    )
    aws.answer(
        "fsx", "DescribeDataRepositoryAssociations", {"Associations": [_association("DELETING")]}
    )
    aws.fail("fsx", "DescribeDataRepositoryAssociations", "DataRepositoryAssociationNotFound")
    RepositoryLink().delete(_ctx(aws), owned)
    aws.fail("fsx", "DeleteDataRepositoryAssociation", "DataRepositoryAssociationNotFound")
    aws.answer("fsx", "DescribeDataRepositoryAssociations", {"Associations": []})
    RepositoryLink().delete(_ctx(aws), owned)
    aws.done()
