"""The budget's stop function's create after a lost answer and its delete, against recorded
Lambda, CloudWatch Logs and SNS answers: the retried CreateFunction meets the name taken and
adopts the function when its tags say it is this cluster's (a stranger's is refused), then
waits for it to be active, lets the topic invoke it (a permission granted before is kept) and
subscribes it; a delete unsubscribes it, deletes it and its log group, and counts what is
gone as deleted."""

from __future__ import annotations

import json

import pytest

from provisioner.graph.ref import Ref
from provisioner.resources.base import Owned, Request
from provisioner.resources.context import Context
from provisioner.resources.errors import Foreign, ResourceError
from provisioner.resources.functions import Function, FunctionOut, FunctionParams, log_group
from provisioner.resources.iam import RoleOut
from provisioner.resources.schedules import StopCall, input_of
from provisioner.resources.topics import TopicOut
from tests.resources.contract import covers
from tests.resources.recorded import ACCOUNT, RecordedAws, example, lose_answer, tags
from tests.resources.test_lifecycle_verbs import CLUSTER, _ctx, _tags

NAME = f"fmctl-{CLUSTER}-budget-stop"
ARN = f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:{NAME}"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/fmctl-{CLUSTER}-us-east-1-budget-stop"
TOPIC = f"arn:aws:sns:us-east-1:{ACCOUNT}:fmctl-{CLUSTER}-budget"
OURS = {t["Key"]: t["Value"] for t in tags(CLUSTER, "budget/stop", team="ml")}


def _wired(aws: RecordedAws) -> tuple[Context, FunctionParams]:
    ctx = _ctx(aws)
    ctx.record("iam/budget-stop", RoleOut(ROLE.rsplit("/", 1)[-1], ROLE))
    ctx.record("budget/topic", TopicOut(TOPIC, TOPIC))
    call = StopCall(
        "gpu",
        "eks:updateNodegroupConfig",
        input_of({"clusterName": CLUSTER, "nodegroupName": "gpu", "scalingConfig": {}}),
    )
    params = FunctionParams(
        NAME,
        Ref("iam/budget-stop", RoleOut),
        Ref("budget/topic", TopicOut),
        (call,),
        _tags("budget/stop"),
    )
    return ctx, params


def _function(owner: dict[str, str] | None = None) -> dict[str, object]:
    found = example("lambda", "GetFunction")
    found["Configuration"].update(FunctionName=NAME, FunctionArn=ARN, Role=ROLE, State="Active")
    found["Tags"] = OURS if owner is None else owner
    return found


def _log_group_made(aws: RecordedAws) -> None:
    aws.answer("logs", "CreateLogGroup", {})
    aws.answer(
        "logs", "PutRetentionPolicy", {}, {"logGroupName": log_group(NAME), "retentionInDays": 30}
    )


@covers("function", "create-adopts")
def test_a_function_whose_create_answer_was_lost_is_adopted_then_wired_to_its_topic() -> None:
    aws = RecordedAws()
    ctx, params = _wired(aws)
    _log_group_made(aws)
    lose_answer(aws, "lambda", "CreateFunction", _function()["Configuration"])
    with pytest.raises(Exception, match="Connection was closed"):
        Function().create(Request(ctx, "budget/stop", params))
    # The next run: its log group is there already (ours), the function's name is taken.
    aws.fail("logs", "CreateLogGroup", "ResourceAlreadyExistsException")
    aws.answer("logs", "ListTagsLogGroup", {"tags": OURS}, {"logGroupName": log_group(NAME)})
    aws.answer("logs", "PutRetentionPolicy", {})
    aws.fail("lambda", "CreateFunction", "ResourceConflictException", 409)
    aws.answer("lambda", "GetFunction", _function(), {"FunctionName": NAME})
    aws.answer("lambda", "GetFunctionConfiguration", dict(_function()["Configuration"]))
    aws.fail("lambda", "AddPermission", "ResourceConflictException", 409)  # granted before
    aws.answer(
        "sns",
        "Subscribe",
        {"SubscriptionArn": f"{TOPIC}:0b1c2d3e"},
        {"TopicArn": TOPIC, "Protocol": "lambda", "Endpoint": ARN},
    )
    assert Function().create(Request(ctx, "budget/stop", params)) == FunctionOut(NAME, ARN)
    aws.done()
    theirs = RecordedAws()
    ctx, params = _wired(theirs)
    _log_group_made(theirs)
    theirs.fail("lambda", "CreateFunction", "ResourceConflictException", 409)
    theirs.answer("lambda", "GetFunction", _function(owner={"team": "someone"}))
    with pytest.raises(Foreign, match="is not fmctl cluster llm's"):
        Function().create(Request(ctx, "budget/stop", params))
    theirs.done()


def test_a_function_lambda_could_not_start_says_why() -> None:
    aws = RecordedAws()
    ctx, params = _wired(aws)
    _log_group_made(aws)
    aws.answer("lambda", "CreateFunction", dict(_function()["Configuration"]))
    failed = dict(_function()["Configuration"], State="Failed", StateReason="The role is invalid")
    aws.answer("lambda", "GetFunctionConfiguration", failed)
    with pytest.raises(ResourceError, match="failed: The role is invalid"):
        Function().create(Request(ctx, "budget/stop", params))
    assert json.loads(params.calls[0].input)["nodegroupName"] == "gpu"


@covers("function", "delete")
def test_a_function_is_unsubscribed_deleted_with_its_log_group_and_gone_is_deleted() -> None:
    owned = Owned("function", "budget/stop", NAME)
    aws = RecordedAws()
    aws.answer("lambda", "GetFunction", _function())
    mine = {
        "SubscriptionArn": f"{TOPIC}:0b1c2d3e",
        "Protocol": "lambda",
        "Endpoint": ARN,
        "TopicArn": TOPIC,
    }
    other = {
        "SubscriptionArn": f"{TOPIC}:9f8e7d6c",
        "Protocol": "email",
        "Endpoint": "ops@example.com",
        "TopicArn": TOPIC,
    }
    aws.answer("sns", "ListSubscriptions", {"Subscriptions": [other, mine]})
    aws.answer("sns", "Unsubscribe", {}, {"SubscriptionArn": f"{TOPIC}:0b1c2d3e"})
    aws.answer("lambda", "DeleteFunction", {}, {"FunctionName": NAME})
    aws.answer("logs", "ListTagsLogGroup", {"tags": OURS})
    aws.answer("logs", "DeleteLogGroup", {}, {"logGroupName": log_group(NAME)})
    Function().delete(_ctx(aws), owned)
    aws.fail("lambda", "GetFunction", "ResourceNotFoundException", 404)
    aws.fail("logs", "ListTagsLogGroup", "ResourceNotFoundException")
    Function().delete(_ctx(aws), owned)
    aws.done()
