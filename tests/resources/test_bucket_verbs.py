"""The artifact bucket's create after a lost answer and its delete, against recorded S3
answers: the retried CreateBucket meets BucketAlreadyOwnedByYou, the bucket's tags say it is
this cluster's, and it is tagged and secured as a new one would be (another cluster's is
refused); the delete empties every version and delete marker before the bucket goes."""

from __future__ import annotations

import pytest

from provisioner.resources.base import Owned, Request
from provisioner.resources.errors import Foreign
from provisioner.resources.storage import (
    PUBLIC_ACCESS_BLOCK,
    Bucket,
    BucketOut,
    BucketParams,
    bucket_name,
    default_encryption,
    tls_only_policy,
)
from tests.resources.contract import covers
from tests.resources.recorded import ACCOUNT, RecordedAws, lose_answer, tags
from tests.resources.test_lifecycle_verbs import CLUSTER, _ctx, _spec, _tags

REGION = "us-west-2"  # in us-east-1 S3 answers a second CreateBucket of one's own with 200
NAME = bucket_name(CLUSTER, ACCOUNT, REGION)


def _secured(aws: RecordedAws) -> None:
    """The calls that make a bucket versioned, encrypted, private and TLS-only."""
    aws.answer(
        "s3",
        "PutPublicAccessBlock",
        {},
        {"Bucket": NAME, "PublicAccessBlockConfiguration": PUBLIC_ACCESS_BLOCK},
    )
    aws.answer(
        "s3",
        "PutBucketEncryption",
        {},
        {"Bucket": NAME, "ServerSideEncryptionConfiguration": default_encryption("aws:kms")},
    )
    aws.answer(
        "s3",
        "PutBucketVersioning",
        {},
        {"Bucket": NAME, "VersioningConfiguration": {"Status": "Enabled"}},
    )
    aws.answer("s3", "PutBucketPolicy", {}, {"Bucket": NAME, "Policy": tls_only_policy(NAME)})


@covers("bucket", "create-adopts")
def test_a_bucket_whose_create_answer_was_lost_is_adopted_tagged_and_secured() -> None:
    aws = RecordedAws(REGION)
    request = {"Bucket": NAME, "CreateBucketConfiguration": {"LocationConstraint": REGION}}
    lose_answer(
        aws, "s3", "CreateBucket", {"Location": f"http://{NAME}.s3.amazonaws.com/"}, request
    )
    req = Request(_ctx(aws), "bucket", BucketParams(_tags("bucket")))
    with pytest.raises(Exception, match="Connection was closed"):
        Bucket().create(req)
    aws.fail("s3", "CreateBucket", "BucketAlreadyOwnedByYou", 409, request)
    aws.answer("s3", "GetBucketTagging", {"TagSet": tags(CLUSTER, "bucket", team="ml")})
    tag_set = {"TagSet": _spec("bucket", "bucket")[0]["Tags"]}
    aws.answer("s3", "PutBucketTagging", {}, {"Bucket": NAME, "Tagging": tag_set})
    _secured(aws)
    assert Bucket().create(req) == BucketOut(NAME)
    aws.done()
    theirs = RecordedAws(REGION)
    theirs.fail("s3", "CreateBucket", "BucketAlreadyOwnedByYou", 409)
    theirs.answer("s3", "GetBucketTagging", {"TagSet": tags("other", "bucket")})
    with pytest.raises(Foreign, match="is fmctl cluster other's"):
        Bucket().create(Request(_ctx(theirs), "bucket", BucketParams(_tags("bucket"))))
    theirs.done()


@covers("bucket", "delete")
def test_a_bucket_loses_every_version_and_delete_marker_then_goes() -> None:
    owned = Owned("bucket", "bucket", NAME)
    aws = RecordedAws(REGION)
    page = {
        "Versions": [
            {"Key": "llm/slurm/on-node-configured.sh", "VersionId": "v2"},
            {"Key": "llm/slurm/on-node-configured.sh", "VersionId": "v1"},
        ],
        "DeleteMarkers": [{"Key": "llm/slurm/old.sh", "VersionId": "m1"}],
    }
    aws.answer("s3", "ListObjectVersions", page, {"Bucket": NAME})
    victims = [
        {"Key": "llm/slurm/on-node-configured.sh", "VersionId": "v2"},
        {"Key": "llm/slurm/on-node-configured.sh", "VersionId": "v1"},
        {"Key": "llm/slurm/old.sh", "VersionId": "m1"},
    ]
    aws.answer("s3", "DeleteObjects", {}, {"Bucket": NAME, "Delete": {"Objects": victims}})
    aws.answer("s3", "DeleteBucket", {}, {"Bucket": NAME})
    Bucket().delete(_ctx(aws), owned)
    aws.fail("s3", "ListObjectVersions", "NoSuchBucket", 404)
    Bucket().delete(_ctx(aws), owned)
    aws.done()
