"""The Capacity Block triggers' create after a lost answer and their deletes, against answers
in EventBridge's and EventBridge Scheduler's shapes (the Stubber holds each to botocore's
model): the T-60 schedule group, once adopted, gets the block's schedule; the T-40 rule is put
again by name (PutRule creates or updates), without tags when it exists already, and a rule
of the name that is not this cluster's is refused; a target PutTargets did not put is said;
deletes remove the rule's targets first and count what is gone as deleted."""

from __future__ import annotations

import datetime
import json

import pytest

from provisioner.resources.base import Owned, Request
from provisioner.resources.block_ends import BlockSchedule, BlockWarning, WarningOut, pattern
from provisioner.resources.errors import Foreign, ResourceError
from provisioner.resources.schedules import ExpiryOut
from tests.resources.contract import covers
from tests.resources.recorded import ACCOUNT, RecordedAws, lose_answer, tags
from tests.resources.test_read_diff import CLUSTER, _block_answers, _block_ctx, _block_params

END = datetime.datetime(2030, 1, 2, 11, 30, tzinfo=datetime.UTC)
RULE = f"fmctl-{CLUSTER}-0123456789abcdef0"
RULE_ARN = f"arn:aws:events:us-east-1:{ACCOUNT}:rule/{RULE}"
GROUP = f"fmctl-{CLUSTER}-blocks"
GROUP_ARN = f"arn:aws:scheduler:us-east-1:{ACCOUNT}:schedule-group/{GROUP}"


@covers("block-schedule", "create-adopts")
def test_the_t60_group_whose_create_answer_was_lost_is_adopted_and_given_the_blocks_schedule() -> (
    None
):
    aws = RecordedAws()
    aws.fail("scheduler", "CreateScheduleGroup", "ConflictException", 409)
    aws.answer(
        "scheduler", "GetScheduleGroup", {"Arn": GROUP_ARN, "Name": GROUP, "State": "ACTIVE"}
    )
    aws.answer("scheduler", "ListTagsForResource", {"Tags": tags(CLUSTER, "blocks/schedule")})
    _block_answers(aws, END)
    aws.answer("scheduler", "CreateSchedule", {"ScheduleArn": f"{GROUP_ARN}/end-train"})
    ctx = _block_ctx(aws)
    assert BlockSchedule().create(Request(ctx, "blocks/schedule", _block_params(GROUP))) == (
        ExpiryOut(GROUP)
    )
    aws.done()
    theirs = RecordedAws()
    theirs.fail("scheduler", "CreateScheduleGroup", "ConflictException", 409)
    theirs.answer(
        "scheduler", "GetScheduleGroup", {"Arn": GROUP_ARN, "Name": GROUP, "State": "ACTIVE"}
    )
    theirs.answer("scheduler", "ListTagsForResource", {"Tags": tags("other", "blocks/schedule")})
    with pytest.raises(Foreign, match="is not fmctl cluster llm's"):
        BlockSchedule().create(Request(_block_ctx(theirs), "blocks/schedule", _block_params(GROUP)))
    theirs.done()


@covers("block-schedule", "delete")
def test_the_t60_group_is_deleted_and_one_already_gone_is_deleted() -> None:
    owned = Owned("block-schedule", "blocks/schedule", GROUP)
    aws = RecordedAws()
    aws.answer("scheduler", "DeleteScheduleGroup", {}, {"Name": GROUP})
    aws.fail("scheduler", "GetScheduleGroup", "ResourceNotFoundException", 404)
    BlockSchedule().delete(_block_ctx(aws), owned)
    aws.fail("scheduler", "DeleteScheduleGroup", "ResourceNotFoundException", 404)
    aws.fail("scheduler", "GetScheduleGroup", "ResourceNotFoundException", 404)
    BlockSchedule().delete(_block_ctx(aws), owned)
    aws.done()


def _targets_put(aws: RecordedAws, failed: int = 0) -> None:
    answer: dict[str, object] = {"FailedEntryCount": failed, "FailedEntries": []}
    if failed:
        answer["FailedEntries"] = [
            {
                "TargetId": "block-end",
                "ErrorCode": "ConcurrentModificationException",
                "ErrorMessage": "busy",
            }
        ]
    aws.answer("events", "PutTargets", answer)


@covers("block-warning", "create-adopts")
def test_the_t40_rule_is_put_again_by_name_after_a_lost_answer() -> None:
    params = _block_params(RULE)
    aws = RecordedAws()
    aws.fail("events", "DescribeRule", "ResourceNotFoundException")
    lose_answer(aws, "events", "PutRule", {"RuleArn": RULE_ARN})
    ctx = _block_ctx(aws)
    req = Request(ctx, "blocks/warning/train", params)
    with pytest.raises(Exception, match="Connection was closed"):
        BlockWarning().create(req)
    # The next try finds the rule, the cluster's: put again without tags (PutRule cannot
    # change a rule's tags), then its target.
    aws.answer("events", "DescribeRule", {"Name": RULE, "Arn": RULE_ARN, "State": "ENABLED"})
    aws.answer("events", "ListTagsForResource", {"Tags": tags(CLUSTER, "blocks/warning/train")})
    expected = {
        "Name": RULE,
        "EventPattern": pattern(params.blocks),
        "State": "ENABLED",
        "Description": f"fmctl {CLUSTER}: a Capacity Block ends in 40 minutes",
    }
    aws.answer("events", "PutRule", {"RuleArn": RULE_ARN}, expected)
    _block_answers(aws, END)
    _targets_put(aws)
    assert BlockWarning().create(req) == WarningOut(RULE, RULE_ARN)
    aws.done()
    # PutTargets answers 200 with what it did not put: said, not taken for done.
    busy = RecordedAws()
    busy.fail("events", "DescribeRule", "ResourceNotFoundException")
    busy.answer("events", "PutRule", {"RuleArn": RULE_ARN})
    _block_answers(busy, END)
    _targets_put(busy, failed=1)
    with pytest.raises(ResourceError, match="PutTargets failed: ConcurrentModificationException"):
        BlockWarning().create(Request(_block_ctx(busy), "blocks/warning/train", params))
    theirs = RecordedAws()
    theirs.answer("events", "DescribeRule", {"Name": RULE, "Arn": RULE_ARN, "State": "ENABLED"})
    theirs.answer("events", "ListTagsForResource", {"Tags": tags("other", "blocks/warning/train")})
    with pytest.raises(Foreign, match="is not fmctl cluster llm's"):
        BlockWarning().create(Request(_block_ctx(theirs), "blocks/warning/train", params))
    assert json.loads(pattern(params.blocks))["source"] == ["aws.ec2"]


@covers("block-warning", "delete")
def test_the_t40_rule_loses_its_targets_then_goes_and_gone_is_deleted() -> None:
    owned = Owned("block-warning", "blocks/warning/train", RULE)
    aws = RecordedAws()
    target = {"Id": "block-end", "Arn": "arn:aws:ssm:us-east-1::document/AWS-RunShellScript"}
    aws.answer("events", "ListTargetsByRule", {"Targets": [target]}, {"Rule": RULE})
    aws.answer(
        "events", "RemoveTargets", {"FailedEntryCount": 0}, {"Rule": RULE, "Ids": ["block-end"]}
    )
    aws.answer("events", "DeleteRule", {}, {"Name": RULE})
    BlockWarning().delete(_block_ctx(aws), owned)
    aws.fail("events", "ListTargetsByRule", "ResourceNotFoundException")
    BlockWarning().delete(_block_ctx(aws), owned)
    aws.done()
