"""The KMS key's and the placement group's verbs against AWS's recorded answers (``recorded``):
read finds only the cluster's own (a key pending deletion is gone; another cluster's group is
not ours), diff says how each field changes, a create whose answer was lost ends with the one
resource AWS made, and a delete counts one already gone (or already scheduled) as done."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from provisioner.resources.base import How, Observed, Owned, Request
from provisioner.resources.compute import (
    PlacementGroup,
    PlacementGroupLive,
    PlacementGroupOut,
    PlacementGroupParams,
)
from provisioner.resources.errors import Foreign
from provisioner.resources.kms import KmsKey, KmsLive, KmsOut, KmsParams, key_policy
from provisioner.resources.tags import CREATED_TAG, OWNER_TAG, Tags
from tests.resources.contract import covers
from tests.resources.recorded import ACCOUNT, RecordedAws, example, lose_answer, tags
from tests.resources.test_lifecycle_verbs import CLUSTER, Stamp, _adopted, _ctx, _spec, _tags

BUDGETS = "budgets.amazonaws.com"


def _key_params(service: str | None = BUDGETS) -> KmsParams:
    return KmsParams("fmctl llm: budget topic", _tags("kms/budget"), service)


def _tagged_key(arn: str, cluster: str = CLUSTER, resource: str = "kms/budget") -> dict[str, Any]:
    """A key as the tagging API lists it (GetResources: kms:key, filtered by the owner tag)."""
    found = [{"Key": t["Key"], "Value": t["Value"]} for t in tags(cluster, resource, team="ml")]
    return {"ResourceARN": arn, "Tags": found}


def _queue_key_read(aws: RecordedAws, meta: dict[str, object], rotation: bool, policy: str) -> None:
    arn = str(meta["Arn"])
    aws.answer(
        "resourcegroupstaggingapi",
        "GetResources",
        {"ResourceTagMappingList": [_tagged_key(arn)]},
        {
            "TagFilters": [{"Key": OWNER_TAG, "Values": [CLUSTER]}],
            "ResourceTypeFilters": ["kms:key"],
        },
    )
    aws.answer("kms", "DescribeKey", {"KeyMetadata": meta}, {"KeyId": arn})
    key_id = str(meta["KeyId"])
    aws.answer("kms", "GetKeyRotationStatus", {"KeyRotationEnabled": rotation}, {"KeyId": key_id})
    aws.answer(
        "kms", "GetKeyPolicy", {"Policy": policy}, {"KeyId": key_id, "PolicyName": "default"}
    )


@covers("kms-key", "read", "diff")
def test_a_key_is_read_by_its_tags_with_its_rotation_and_the_services_its_policy_lets_in() -> None:
    meta = example("kms", "DescribeKey")["KeyMetadata"]
    aws = RecordedAws()
    # AWS's own example policy: the account's root only (no service may use the key).
    _queue_key_read(aws, meta, False, example("kms", "GetKeyPolicy")["Policy"])
    req = Request(_ctx(aws), "kms/budget", _key_params())
    observed = KmsKey().read(req)
    aws.done()
    assert observed is not None
    assert observed.outputs == KmsOut(meta["KeyId"], meta["Arn"])
    assert observed.id == meta["KeyId"]
    assert (observed.live.rotation, observed.live.services) == (False, frozenset())
    changes = {c.path: (c.before, c.after, c.how) for c in KmsKey().diff(req, observed)}
    assert changes == {
        "rotation": (False, True, How.UPDATE),
        "services": (frozenset(), frozenset({BUDGETS}), How.UPDATE),
    }
    # The key as fmctl made it: nothing to change.
    made = Observed(observed.outputs, KmsLive(True, frozenset({BUDGETS}), observed.live.tags), "k")
    assert KmsKey().diff(req, made) == []


@covers("kms-key", "read")
def test_a_key_pending_deletion_or_another_clusters_is_not_read_as_this_ones() -> None:
    meta = example("kms", "DescribeKey")["KeyMetadata"]
    aws = RecordedAws()
    other = dict(meta, Arn=meta["Arn"].replace("1234abcd", "5678efab"))
    aws.answer(
        "resourcegroupstaggingapi",
        "GetResources",
        {"ResourceTagMappingList": [_tagged_key(meta["Arn"]), _tagged_key(other["Arn"], "other")]},
    )
    # The one tagged as ours was scheduled for deletion by an earlier `down`; the other's
    # owner tag names another cluster (a filter an API ignores must not make it ours).
    aws.answer("kms", "DescribeKey", {"KeyMetadata": dict(meta, KeyState="PendingDeletion")})
    assert KmsKey().read(Request(_ctx(aws), "kms/budget", _key_params())) is None
    aws.done()


@covers("kms-key", "create-adopts")
def test_a_key_whose_create_answer_was_lost_is_found_by_its_tags_not_made_twice() -> None:
    """CreateKey takes no client token: after a lost answer fmctl looks by tag before trying
    again, finds the key AWS made, and turns its rotation on."""
    made = example("kms", "CreateKey")
    meta = made["KeyMetadata"]
    aws, events = RecordedAws(), []
    request = {
        "Description": "fmctl llm: budget topic",
        "KeyUsage": "ENCRYPT_DECRYPT",
        "KeySpec": "SYMMETRIC_DEFAULT",
        "Policy": key_policy(ACCOUNT, BUDGETS),
        "Tags": [
            {"TagKey": k, "TagValue": Stamp() if k == CREATED_TAG else v}
            for k, v in sorted(_tags("kms/budget").at_creation().items())
        ],
    }
    lose_answer(aws, "kms", "CreateKey", made, request)
    _queue_key_read(aws, meta, False, key_policy(ACCOUNT, BUDGETS))
    aws.answer("kms", "EnableKeyRotation", {}, {"KeyId": meta["KeyId"]})
    out = KmsKey().create(Request(_ctx(aws, events), "kms/budget", _key_params()))
    aws.done()  # one CreateKey
    assert out == KmsOut(meta["KeyId"], meta["Arn"]) and _adopted(events, "kms/budget")


@covers("kms-key", "delete")
def test_a_key_is_scheduled_for_deletion_and_one_gone_or_already_scheduled_is_deleted() -> None:
    key_id = example("kms", "CreateKey")["KeyMetadata"]["KeyId"]
    owned = Owned("kms-key", "kms/budget", key_id)
    aws = RecordedAws()
    # KMS never deletes at once: 7 days is its shortest waiting period.
    expected = {"KeyId": key_id, "PendingWindowInDays": 7}
    aws.answer("kms", "ScheduleKeyDeletion", example("kms", "ScheduleKeyDeletion"), expected)
    KmsKey().delete(_ctx(aws), owned)
    aws.fail("kms", "ScheduleKeyDeletion", "KMSInvalidStateException")  # already scheduled
    KmsKey().delete(_ctx(aws), owned)
    aws.fail("kms", "ScheduleKeyDeletion", "NotFoundException")
    KmsKey().delete(_ctx(aws), owned)
    aws.fail("kms", "ScheduleKeyDeletion", "AccessDeniedException")
    with pytest.raises(ClientError):
        KmsKey().delete(_ctx(aws), owned)
    aws.done()


def _group_params(strategy: str = "cluster") -> PlacementGroupParams:
    return PlacementGroupParams("llm-train", _tags("placement-group/train"), strategy)  # type: ignore[arg-type]


def _group(cluster: str = CLUSTER, name: str = "llm-train") -> dict[str, object]:
    """A placement group as DescribePlacementGroups shows it."""
    return {
        "GroupName": name,
        "GroupId": "pg-0123456789abcdef0",
        "State": "available",
        "Strategy": "cluster",
        "Tags": tags(cluster, "placement-group/train", team="ml"),
    }


@covers("placement-group", "read", "diff")
def test_a_placement_group_is_read_by_its_tags_and_a_new_strategy_replaces_it() -> None:
    aws = RecordedAws()
    aws.answer(
        "ec2", "DescribePlacementGroups", {"PlacementGroups": [_group(), _group("other", "x")]}
    )
    req = Request(_ctx(aws), "placement-group/train", _group_params())
    observed = PlacementGroup().read(req)
    aws.done()
    assert observed is not None
    assert observed.outputs == PlacementGroupOut("llm-train") and observed.id == "llm-train"
    assert (observed.live.group_name, observed.live.strategy) == ("llm-train", "cluster")
    assert PlacementGroup().diff(req, observed) == []
    moved = Request(_ctx(aws), "placement-group/train", _group_params("spread"))
    (change,) = PlacementGroup().diff(moved, observed)
    assert (change.path, change.before, change.after, change.how) == (
        "strategy",
        "cluster",
        "spread",
        How.REPLACE,
    )
    # A tag the spec dropped goes in place.
    stale = Tags.from_list(
        [*tags(CLUSTER, "placement-group/train"), {"Key": "fmctl.dev/x", "Value": "1"}]
    )
    live = PlacementGroupLive("llm-train", "cluster", stale)
    (retag,) = PlacementGroup().diff(req, Observed(observed.outputs, live, "llm-train"))
    assert (retag.path, retag.how, retag.after.get("fmctl.dev/x", "kept")) == (
        "tags",
        How.UPDATE,
        None,
    )


@covers("placement-group", "create-adopts")
def test_a_placement_group_made_by_a_lost_create_is_adopted_by_its_tags() -> None:
    """CreatePlacementGroup takes no client token; the try after a lost answer meets the
    group's name taken (InvalidPlacementGroup.Duplicate) and adopts it when its tags say it
    is this cluster's; a group of the name that is not is refused."""
    aws, events = RecordedAws(), []
    request = {
        "GroupName": "llm-train",
        "Strategy": "cluster",
        "TagSpecifications": _spec("placement-group", "placement-group/train"),
    }
    lose_answer(
        aws,
        "ec2",
        "CreatePlacementGroup",
        example("ec2", "CreatePlacementGroup"),
        request,
    )
    ctx = _ctx(aws, events)
    req = Request(ctx, "placement-group/train", _group_params())
    with pytest.raises(Exception, match="Connection was closed"):
        PlacementGroup().create(req)
    # The next try (botocore's retry of a dropped connection, or the next `up`).
    aws.fail("ec2", "CreatePlacementGroup", "InvalidPlacementGroup.Duplicate", expected=request)
    aws.answer("ec2", "DescribePlacementGroups", {"PlacementGroups": [_group()]})
    assert PlacementGroup().create(req) == PlacementGroupOut("llm-train")
    aws.done()
    theirs = RecordedAws()
    theirs.fail("ec2", "CreatePlacementGroup", "InvalidPlacementGroup.Duplicate")
    theirs.answer("ec2", "DescribePlacementGroups", {"PlacementGroups": [_group("other")]})
    with pytest.raises(Foreign, match="not owned by fmctl cluster llm"):
        PlacementGroup().create(Request(_ctx(theirs), "placement-group/train", _group_params()))
    theirs.done()


@covers("placement-group", "delete")
def test_a_placement_group_waits_for_its_instances_to_go_and_gone_is_deleted() -> None:
    owned = Owned("placement-group", "placement-group/train", "llm-train")
    aws = RecordedAws()
    # Instances still in the group (terminating with their node group): EC2 says so with
    # InvalidPlacementGroup.InUse; fmctl waits, then deletes.
    aws.fail("ec2", "DeletePlacementGroup", "InvalidPlacementGroup.InUse")
    aws.answer("ec2", "DeletePlacementGroup", {}, {"GroupName": "llm-train"})
    PlacementGroup().delete(_ctx(aws), owned)
    aws.fail("ec2", "DeletePlacementGroup", "InvalidPlacementGroup.Unknown")
    PlacementGroup().delete(_ctx(aws), owned)
    aws.done()
