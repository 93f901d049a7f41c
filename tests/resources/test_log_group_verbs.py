"""The control-plane log group's verbs against recorded CloudWatch Logs answers: read finds
the cluster's own group among ``/aws/eks/``'s, diff sees a new retention, a create that meets
the name taken adopts this cluster's group (its lost answer, or the untagged one EKS made for
this cluster) and refuses another's, and a delete counts a group already gone as done."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from provisioner.resources.base import How, Owned, Request
from provisioner.resources.errors import Foreign
from provisioner.resources.logs import LogGroup, LogGroupOut, LogGroupParams
from provisioner.resources.tags import CREATED_TAG
from tests.resources.contract import covers
from tests.resources.recorded import ACCOUNT, RecordedAws, lose_answer, tags
from tests.resources.test_lifecycle_verbs import CLUSTER, Stamp, _ctx, _tags

GROUP = f"/aws/eks/{CLUSTER}/cluster"
RID = "logs/control-plane"


def _described(name: str, retention: int | None = 30) -> dict[str, Any]:
    """A group as DescribeLogGroups shows it (``arn`` ends in ``:*``)."""
    arn = f"arn:aws:logs:us-east-1:{ACCOUNT}:log-group:{name}"
    group: dict[str, Any] = {
        "logGroupName": name,
        "creationTime": 1764496800000,
        "metricFilterCount": 0,
        "arn": f"{arn}:*",
        "logGroupArn": arn,
        "storedBytes": 0,
    }
    if retention is not None:
        group["retentionInDays"] = retention
    return group


def _tag_map(cluster: str) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in tags(cluster, RID, team="ml")}


def _params(retention: int = 30) -> LogGroupParams:
    return LogGroupParams(GROUP, retention, _tags(RID))


@covers("log-group", "read", "diff")
def test_the_clusters_log_group_is_read_among_eks_groups_and_a_new_retention_is_in_place() -> None:
    aws = RecordedAws()
    # A group a person made under the cluster's prefix: untagged, never fmctl's.
    other = _described(f"/aws/eks/{CLUSTER}/archive", None)
    aws.answer(
        "logs",
        "DescribeLogGroups",
        {"logGroups": [other, _described(GROUP)]},
        {"logGroupNamePrefix": f"/aws/eks/{CLUSTER}/"},
    )
    aws.answer("logs", "ListTagsForResource", {"tags": {"team": "ml"}})
    aws.answer(
        "logs",
        "ListTagsForResource",
        {"tags": _tag_map(CLUSTER)},
        {"resourceArn": _described(GROUP)["logGroupArn"]},
    )
    req = Request(_ctx(aws), RID, _params())
    observed = LogGroup().read(req)
    aws.done()
    assert observed is not None
    assert observed.outputs == LogGroupOut(GROUP) and observed.live.retention_days == 30
    assert LogGroup().diff(req, observed) == []
    (change,) = LogGroup().diff(Request(req.ctx, RID, _params(90)), observed)
    assert (change.path, change.before, change.after, change.how) == (
        "retention_days",
        30,
        90,
        How.UPDATE,
    )
    # The untagged group of the prefix is never read as the cluster's.
    assert (
        LogGroup().read(
            Request(req.ctx, RID, LogGroupParams(other["logGroupName"], 30, _tags(RID)))
        )
        is None
    )


def _name_taken(aws: RecordedAws, owner_tags: dict[str, str]) -> None:
    aws.fail("logs", "CreateLogGroup", "ResourceAlreadyExistsException")
    aws.answer("logs", "DescribeLogGroups", {"logGroups": [_described(GROUP)]})
    aws.answer("logs", "ListTagsForResource", {"tags": owner_tags})


@covers("log-group", "create-adopts")
def test_a_log_group_whose_create_answer_was_lost_is_adopted_tagged_and_kept_for_its_days() -> None:
    """CreateLogGroup takes no token: the try after a lost answer meets the name taken, finds
    the group tagged as this cluster's, tags it (again) and sets its retention."""
    aws = RecordedAws()
    tags_sent = {**_tags(RID).at_creation(), CREATED_TAG: Stamp()}  # stamped as it is sent
    lose_answer(aws, "logs", "CreateLogGroup", {}, {"logGroupName": GROUP, "tags": tags_sent})
    req = Request(_ctx(aws), RID, _params())
    with pytest.raises(Exception, match="Connection was closed"):
        LogGroup().create(req)
    _name_taken(aws, _tag_map(CLUSTER))
    arn = _described(GROUP)["logGroupArn"]
    aws.answer("logs", "DescribeLogGroups", {"logGroups": [_described(GROUP)]})
    aws.answer("logs", "TagResource", {}, {"resourceArn": arn, "tags": tags_sent})
    aws.answer("logs", "PutRetentionPolicy", {}, {"logGroupName": GROUP, "retentionInDays": 30})
    assert LogGroup().create(req) == LogGroupOut(GROUP)
    aws.done()


@covers("log-group", "create-adopts")
def test_the_group_eks_made_for_this_cluster_is_adopted_and_an_earlier_clusters_refused() -> None:
    # Untagged: EKS made it for the cluster fmctl made (the cluster carries the owner tag).
    aws = RecordedAws()
    _name_taken(aws, {})
    aws.answer(
        "eks",
        "DescribeCluster",
        {"cluster": {"name": CLUSTER, "tags": _tag_map(CLUSTER)}},
        {"name": CLUSTER},
    )
    aws.answer("logs", "DescribeLogGroups", {"logGroups": [_described(GROUP)]})
    aws.answer("logs", "TagResource", {})
    aws.answer("logs", "PutRetentionPolicy", {})
    assert LogGroup().create(Request(_ctx(aws), RID, _params())) == LogGroupOut(GROUP)
    aws.done()
    # Untagged and no cluster of the name: an earlier cluster's logs, not fmctl's to take.
    earlier = RecordedAws()
    _name_taken(earlier, {})
    earlier.fail("eks", "DescribeCluster", "ResourceNotFoundException", 404)
    with pytest.raises(Foreign, match="an earlier EKS cluster named llm"):
        LogGroup().create(Request(_ctx(earlier), RID, _params()))
    # Tagged as another fmctl cluster's.
    theirs = RecordedAws()
    _name_taken(theirs, _tag_map("other"))
    with pytest.raises(Foreign, match="fmctl cluster other"):
        LogGroup().create(Request(_ctx(theirs), RID, _params()))
    earlier.done()
    theirs.done()


@covers("log-group", "delete")
def test_a_log_group_is_deleted_and_one_already_gone_is_deleted() -> None:
    owned = Owned("log-group", RID, GROUP)
    aws = RecordedAws()
    aws.answer("logs", "DeleteLogGroup", {}, {"logGroupName": GROUP})
    LogGroup().delete(_ctx(aws), owned)
    aws.fail("logs", "DeleteLogGroup", "ResourceNotFoundException")
    LogGroup().delete(_ctx(aws), owned)
    aws.fail("logs", "DeleteLogGroup", "OperationAbortedException")
    with pytest.raises(ClientError):
        LogGroup().delete(_ctx(aws), owned)
    aws.done()
