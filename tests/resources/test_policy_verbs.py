"""The customer-managed IAM policy's verbs against recorded IAM answers: read by its ARN
under fmctl's path (another cluster's refused, none when missing), its document compared
as canonical JSON (IAM hands it back URL-encoded); a create that meets the name taken by
its own lost answer adopts it and makes the spec's document the default version, within
IAM's five; a delete takes it off the roles holding it and its old versions first."""

from __future__ import annotations

import datetime
import json
from typing import Any
from urllib.parse import quote

import pytest

from provisioner.resources.base import How, Owned, Request
from provisioner.resources.errors import Foreign
from provisioner.resources.iam import ManagedPolicy, PolicyOut, PolicyParams, canonical
from tests.resources.contract import covers
from tests.resources.recorded import ACCOUNT, RecordedAws, lose_answer, tags
from tests.resources.test_lifecycle_verbs import CLUSTER, _ctx, _spec, _tags

NAME = "fmctl-llm-us-east-1-fsx-export"
ARN = f"arn:aws:iam::{ACCOUNT}:policy/parallelcluster/{NAME}"
RID = "iam/fsx-export"


def _document(*actions: str) -> str:
    return canonical(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": list(actions), "Resource": "arn:aws:s3:::data/*"}
            ],
        }
    )


READ = _document("s3:GetObject")


def _params(document: str = READ) -> PolicyParams:
    return PolicyParams(NAME, document, "fmctl llm: FSx export", _tags(RID))


def _version(document: str, version: str = "v2", default: bool = True) -> dict[str, Any]:
    """A policy version as GetPolicyVersion gives it (the document URL-encoded, as IAM's
    Query API returns it)."""
    return {
        "Document": quote(json.dumps(json.loads(document), indent=2)),
        "VersionId": version,
        "IsDefaultVersion": default,
        "CreateDate": datetime.datetime(2026, 11, 30, 10, int(version[1:]), tzinfo=datetime.UTC),
    }


def _policy(default: str = "v2") -> dict[str, Any]:
    return {
        "PolicyName": NAME,
        "Arn": ARN,
        "DefaultVersionId": default,
        "Path": "/parallelcluster/",
    }


def _queue_read(aws: RecordedAws, document: str, cluster: str = CLUSTER) -> None:
    aws.answer("iam", "ListPolicyTags", {"Tags": tags(cluster, RID, team="ml")}, {"PolicyArn": ARN})
    aws.answer("iam", "GetPolicy", {"Policy": _policy()}, {"PolicyArn": ARN})
    aws.answer(
        "iam",
        "GetPolicyVersion",
        {"PolicyVersion": _version(document)},
        {"PolicyArn": ARN, "VersionId": "v2"},
    )


@covers("iam-policy", "read", "diff")
def test_a_policy_is_read_by_its_arn_and_a_new_document_is_a_new_version_in_place() -> None:
    aws = RecordedAws()
    _queue_read(aws, READ)
    req = Request(_ctx(aws), RID, _params())
    observed = ManagedPolicy().read(req)
    aws.done()
    assert observed is not None and observed.outputs == PolicyOut(ARN, ARN)
    assert observed.live.document == READ  # URL-decoded, canonical: no change
    assert ManagedPolicy().diff(req, observed) == []
    wider = Request(req.ctx, RID, _params(_document("s3:GetObject", "s3:PutObject")))
    (change,) = ManagedPolicy().diff(wider, observed)
    assert (change.path, change.how) == ("document", How.UPDATE)
    missing = RecordedAws()
    missing.fail("iam", "ListPolicyTags", "NoSuchEntity", 404)
    assert ManagedPolicy().read(Request(_ctx(missing), RID, _params())) is None
    theirs = RecordedAws()
    theirs.answer("iam", "ListPolicyTags", {"Tags": tags("other", RID)})
    with pytest.raises(Foreign, match="not owned by fmctl cluster llm"):
        ManagedPolicy().read(Request(_ctx(theirs), RID, _params()))
    missing.done()
    theirs.done()


@covers("iam-policy", "create-adopts")
def test_a_policy_whose_create_answer_was_lost_is_adopted_not_made_twice() -> None:
    """CreatePolicy takes no token: the try after a lost answer meets EntityAlreadyExists,
    finds the policy tagged as this cluster's, and keeps it as it is (same document)."""
    aws = RecordedAws()
    request = {
        "PolicyName": NAME,
        "Path": "/parallelcluster/",
        "PolicyDocument": READ,
        "Description": "fmctl llm: FSx export",
        "Tags": _spec("policy", RID)[0]["Tags"],  # the creation tags, stamped
    }
    lose_answer(aws, "iam", "CreatePolicy", {"Policy": _policy("v1")}, request)
    req = Request(_ctx(aws), RID, _params())
    with pytest.raises(Exception, match="Connection was closed"):
        ManagedPolicy().create(req)
    aws.fail("iam", "CreatePolicy", "EntityAlreadyExists", 409)
    _queue_read(aws, READ)
    assert ManagedPolicy().create(req) == PolicyOut(ARN, ARN)
    aws.done()  # no CreatePolicyVersion: the document is the one asked for


@covers("iam-policy", "create-adopts")
def test_an_adopted_policy_with_another_document_gets_a_new_default_within_five_versions() -> None:
    aws = RecordedAws()
    aws.fail("iam", "CreatePolicy", "EntityAlreadyExists", 409)
    _queue_read(aws, _document("s3:ListBucket"))
    versions = [_version(READ, f"v{n}", default=n == 5) for n in range(1, 6)]
    aws.answer("iam", "ListPolicyVersions", {"Versions": versions}, {"PolicyArn": ARN})
    # Five versions is IAM's limit: the oldest that is not the default goes first.
    aws.answer("iam", "DeletePolicyVersion", {}, {"PolicyArn": ARN, "VersionId": "v1"})
    aws.answer(
        "iam",
        "CreatePolicyVersion",
        {"PolicyVersion": _version(READ, "v6")},
        {"PolicyArn": ARN, "PolicyDocument": READ, "SetAsDefault": True},
    )
    assert ManagedPolicy().create(Request(_ctx(aws), RID, _params())) == PolicyOut(ARN, ARN)
    aws.done()


@covers("iam-policy", "delete")
def test_a_policy_comes_off_its_roles_and_loses_its_old_versions_before_it_goes() -> None:
    owned = Owned("iam-policy", RID, ARN)
    aws = RecordedAws()
    holder = {"RoleName": "llm-head-node", "RoleId": "AROA0123456789EXAMPLE"}
    aws.answer("iam", "ListEntitiesForPolicy", {"PolicyRoles": [holder]}, {"PolicyArn": ARN})
    aws.answer("iam", "DetachRolePolicy", {}, {"RoleName": "llm-head-node", "PolicyArn": ARN})
    versions = [_version(READ, "v1", default=False), _version(READ, "v2")]
    aws.answer("iam", "ListPolicyVersions", {"Versions": versions})
    aws.answer("iam", "DeletePolicyVersion", {}, {"PolicyArn": ARN, "VersionId": "v1"})
    aws.answer("iam", "DeletePolicy", {}, {"PolicyArn": ARN})
    ManagedPolicy().delete(_ctx(aws), owned)
    aws.fail("iam", "ListEntitiesForPolicy", "NoSuchEntity", 404)
    ManagedPolicy().delete(_ctx(aws), owned)
    aws.done()
