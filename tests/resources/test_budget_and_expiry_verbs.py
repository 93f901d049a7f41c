"""The budget's and the TTL schedule group's create after a lost answer, and their deletes,
against answers in the services' shapes (AWS publishes no Budgets or Scheduler examples; the
Stubber holds each to botocore's model): the retried create meets the name taken, finds it
this cluster's by its tags and carries on (the schedule group gets its schedules, the ones
already there updated); a name someone else holds is refused; a delete counts one already
gone as deleted, and the schedule group is waited out of DELETING."""

from __future__ import annotations

import pytest

from provisioner.graph.ref import Ref
from provisioner.resources.base import Owned, Request
from provisioner.resources.budgets import Budget, BudgetOut, BudgetParams
from provisioner.resources.errors import Foreign
from provisioner.resources.iam import RoleOut
from provisioner.resources.schedules import (
    RETRY,
    Expiry,
    ExpiryOut,
    ExpiryParams,
    StopCall,
    input_of,
)
from provisioner.resources.tags import DesiredTags
from tests.resources.contract import covers
from tests.resources.recorded import ACCOUNT, RecordedAws, lose_answer, tags
from tests.resources.test_lifecycle_verbs import CLUSTER, _ctx

BUDGET = f"fmctl-{CLUSTER}-us-east-1"


def _budget_params() -> BudgetParams:
    return BudgetParams(
        BUDGET,
        1000.0,
        "monthly",
        ("ops@example.com",),
        None,
        DesiredTags((("team", "ml"),), CLUSTER, "budget", region="us-east-1"),
    )


def _budget_tags(region: str = "us-east-1") -> dict[str, list[dict[str, str]]]:
    return {
        "ResourceTags": [
            *tags(CLUSTER, "budget", team="ml"),
            {"Key": "fmctl.dev/region", "Value": region},
        ]
    }


@covers("budget", "create-adopts")
def test_a_budget_whose_create_answer_was_lost_is_found_by_its_tags_and_kept() -> None:
    aws = RecordedAws()
    lose_answer(aws, "budgets", "CreateBudget", {})
    req = Request(_ctx(aws), "budget", _budget_params())
    with pytest.raises(Exception, match="Connection was closed"):
        Budget().create(req)
    aws.fail("budgets", "CreateBudget", "DuplicateRecordException")
    arn = f"arn:aws:budgets::{ACCOUNT}:budget/{BUDGET}"
    aws.answer("budgets", "ListTagsForResource", _budget_tags(), {"ResourceARN": arn})
    assert Budget().create(req) == BudgetOut(BUDGET)
    aws.done()
    # The same name, the cluster's in another region (budgets are the account's): not ours.
    elsewhere = RecordedAws()
    elsewhere.fail("budgets", "CreateBudget", "DuplicateRecordException")
    elsewhere.answer("budgets", "ListTagsForResource", _budget_tags("eu-west-1"))
    with pytest.raises(Foreign, match="is not fmctl cluster llm's"):
        Budget().create(Request(_ctx(elsewhere), "budget", _budget_params()))
    elsewhere.done()


@covers("budget", "delete")
def test_a_budget_is_deleted_and_one_already_gone_is_deleted() -> None:
    owned = Owned("budget", "budget", BUDGET)
    aws = RecordedAws()
    aws.answer("budgets", "DeleteBudget", {}, {"AccountId": ACCOUNT, "BudgetName": BUDGET})
    Budget().delete(_ctx(aws), owned)
    aws.fail("budgets", "DeleteBudget", "NotFoundException")
    Budget().delete(_ctx(aws), owned)
    aws.done()


GROUP = f"fmctl-{CLUSTER}"
GROUP_ARN = f"arn:aws:scheduler:us-east-1:{ACCOUNT}:schedule-group/{GROUP}"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/fmctl-{CLUSTER}-us-east-1-ttl-scheduler"


def _expiry_params() -> ExpiryParams:
    gpu = input_of(
        {"clusterName": CLUSTER, "nodegroupName": "gpu", "scalingConfig": {"minSize": 0}}
    )
    return ExpiryParams(
        GROUP,
        Ref("iam/ttl-scheduler", RoleOut),
        (StopCall("gpu", "eks:updateNodegroupConfig", gpu),),
        DesiredTags((("team", "ml"),), CLUSTER, "expiry", ttl_seconds=3600),
    )


@covers("expiry-schedule", "create-adopts")
def test_a_schedule_group_whose_create_answer_was_lost_is_adopted_and_given_its_schedules() -> None:
    aws = RecordedAws()
    ctx = _ctx(aws)
    ctx.record("iam/ttl-scheduler", RoleOut("fmctl-llm-us-east-1-ttl-scheduler", ROLE))
    aws.fail("scheduler", "CreateScheduleGroup", "ConflictException", 409)
    aws.answer(
        "scheduler", "GetScheduleGroup", {"Arn": GROUP_ARN, "Name": GROUP, "State": "ACTIVE"}
    )
    expires = {"Key": "fmctl.dev/expires-at", "Value": "2026-11-30T11:00:00Z"}
    aws.answer(
        "scheduler", "ListTagsForResource", {"Tags": [*tags(CLUSTER, "expiry", team="ml"), expires]}
    )
    # The schedule the lost run may have made too: created again, it is updated instead.
    aws.fail("scheduler", "CreateSchedule", "ConflictException", 409)
    gpu = _expiry_params().calls[0].input
    body = {
        "Name": "gpu",
        "GroupName": GROUP,
        "ScheduleExpression": "at(2026-11-30T11:00:00)",  # its creation stamp and the ttl
        "ScheduleExpressionTimezone": "UTC",
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "State": "ENABLED",
        "Description": f"fmctl {CLUSTER}: {Expiry.purpose}",
        "Target": {
            "Arn": "arn:aws:scheduler:::aws-sdk:eks:updateNodegroupConfig",
            "RoleArn": ROLE,
            "Input": gpu,
            "RetryPolicy": RETRY,
        },
    }
    aws.answer("scheduler", "UpdateSchedule", {"ScheduleArn": f"{GROUP_ARN}/gpu"}, body)
    assert Expiry().create(Request(ctx, "expiry", _expiry_params())) == ExpiryOut(GROUP)
    aws.done()
    theirs = RecordedAws()
    theirs.fail("scheduler", "CreateScheduleGroup", "ConflictException", 409)
    theirs.answer(
        "scheduler", "GetScheduleGroup", {"Arn": GROUP_ARN, "Name": GROUP, "State": "ACTIVE"}
    )
    theirs.answer("scheduler", "ListTagsForResource", {"Tags": tags("other", "expiry")})
    with pytest.raises(Foreign, match="is not fmctl cluster llm's"):
        Expiry().create(Request(_ctx(theirs), "expiry", _expiry_params()))
    theirs.done()


@covers("expiry-schedule", "delete")
def test_a_schedule_group_delete_waits_it_out_of_deleting() -> None:
    owned = Owned("expiry-schedule", "expiry", GROUP)
    aws = RecordedAws()
    aws.answer("scheduler", "DeleteScheduleGroup", {}, {"Name": GROUP})
    aws.answer(
        "scheduler", "GetScheduleGroup", {"Arn": GROUP_ARN, "Name": GROUP, "State": "DELETING"}
    )
    aws.answer("scheduler", "ListTagsForResource", {"Tags": tags(CLUSTER, "expiry")})
    aws.fail("scheduler", "GetScheduleGroup", "ResourceNotFoundException", 404)
    Expiry().delete(_ctx(aws), owned)
    aws.fail("scheduler", "DeleteScheduleGroup", "ResourceNotFoundException", 404)
    aws.fail("scheduler", "GetScheduleGroup", "ResourceNotFoundException", 404)
    Expiry().delete(_ctx(aws), owned)
    aws.done()
