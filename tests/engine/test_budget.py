"""Caps AWS enforces: `up` of a spec with cost.budget makes an AWS Budgets budget over the
cluster's tag that tells the spec's addresses at 80% and 100%; with actions: stop, also the
chain that scales the cluster to zero at the limit with no fmctl running (the budget tells an
encrypted SNS topic only Budgets may publish to, whose Lambda function makes the scheduler's
own calls, as a role allowed only those). The sandbox sends the notifications when a test
sets the spend, and runs the function as Lambda would; `down` removes every part."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.resources.base import Request
from provisioner.resources.tags import OWNER_TAG
from tests.engine.harness import Sandbox, raw_leftovers, spec_file
from tests.engine.test_pcs import pcs_spec


def _budget_spec(path: Path, **budget: Any) -> None:
    data = yaml.safe_load(path.read_text())
    data["cost"] = {"budget": budget}
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _account(sandbox: Sandbox, region: str) -> str:
    return str(sandbox.aws(region).client("sts").get_caller_identity()["Account"])


def _notices(sandbox: Sandbox, region: str, name: str) -> dict[float, set[tuple[str, str]]]:
    """The budget's notifications: threshold -> subscribers."""
    budgets, account = sandbox.aws(region).client("budgets"), _account(sandbox, region)
    out = {}
    listed = budgets.describe_notifications_for_budget(
        AccountId=account, BudgetName=f"fmctl-{name}-{region}"
    )
    for notification in listed["Notifications"]:
        subscribers = budgets.describe_subscribers_for_notification(
            AccountId=account, BudgetName=f"fmctl-{name}-{region}", Notification=notification
        )["Subscribers"]
        out[notification["Threshold"]] = {
            (s["SubscriptionType"], s["Address"]) for s in subscribers
        }
    return out


def _wait(what: str, probe: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def test_an_eks_cluster_over_its_budget_is_scaled_to_zero_by_aws(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    name, region = "budget-eks", "us-west-2"
    spec = spec_file(tmp_path, name, storage={})
    data = yaml.safe_load(spec.read_text())
    data["kubernetes"] = {**data.get("kubernetes", {}), "queueing": "none"}
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    _budget_spec(spec, monthly=1000, actions="stop", notify=["ops@example.com"])
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        aws = sandbox.aws(region)
        account = _account(sandbox, region)
        budget = aws.client("budgets").describe_budget(
            AccountId=account, BudgetName=f"fmctl-{name}-{region}"
        )["Budget"]
        assert budget["BudgetLimit"] == {"Amount": "1000.00", "Unit": "USD"}
        assert budget["TimeUnit"] == "MONTHLY" and budget["BudgetType"] == "COST"
        assert budget["CostFilters"] == {"TagKeyValue": [f"user:{OWNER_TAG}${name}"]}
        topic = f"arn:aws:sns:{region}:{account}:fmctl-{name}-budget"
        assert _notices(sandbox, region, name) == {
            80.0: {("EMAIL", "ops@example.com")},
            100.0: {("EMAIL", "ops@example.com"), ("SNS", topic)},
        }
        sns = aws.client("sns")
        attributes = sns.get_topic_attributes(TopicArn=topic)["Attributes"]
        key = attributes["KmsMasterKeyId"]
        assert key.startswith("arn:aws:kms:"), attributes  # encrypted at rest, with our key
        statement = json.loads(attributes["Policy"])["Statement"]
        assert [s["Principal"] for s in statement] == [{"Service": "budgets.amazonaws.com"}]
        key_policy = json.loads(
            aws.client("kms").get_key_policy(KeyId=key, PolicyName="default")["Policy"]
        )
        assert any(
            s.get("Principal") == {"Service": "budgets.amazonaws.com"}
            for s in key_policy["Statement"]
        ), key_policy
        plan = sandbox.fmctl("plan", "-f", str(spec), "--sandbox", "-o", "json")
        changes = json.loads(plan.stdout)["changes"]
        assert [c for c in changes if c["action"] != "unchanged"] == [], plan.stdout

        eks = aws.client("eks")
        groups = eks.list_nodegroups(clusterName=name)["nodegroups"]

        def sizes() -> dict[str, tuple[int, int]]:
            out = {}
            for group in groups:
                scaling = eks.describe_nodegroup(clusterName=name, nodegroupName=group)[
                    "nodegroup"
                ]["scalingConfig"]
                out[group] = (scaling["minSize"], scaling["desiredSize"])
            return out

        before = sizes()
        # 80%: the warning goes to the address, nothing stops.
        assert sandbox.spend(name, region, 850) == [
            {"threshold": 80.0, "to": "ops@example.com", "outcome": "delivered"}
        ]
        assert sandbox.spend(name, region, 900) == []  # sent once, not on every change
        time.sleep(1)
        assert sizes() == before
        # 100%: the address and the topic; the function scales every node group to zero.
        sent = sandbox.spend(name, region, 1001)
        assert sorted((s["to"], s["outcome"]) for s in sent) == [
            (topic, "delivered"),
            ("ops@example.com", "delivered"),
        ], sent
        _wait("node groups at zero", lambda: set(sizes().values()) == {(0, 0)})
        logs = aws.client("logs")
        group = f"/aws/lambda/fmctl-{name}-budget-stop"

        def said() -> list[str]:
            streams = logs.describe_log_streams(logGroupName=group)["logStreams"]
            return [
                e["message"]
                for s in streams
                for e in logs.get_log_events(logGroupName=group, logStreamName=s["logStreamName"])[
                    "events"
                ]
            ]

        # The function reports once its last call has returned: the node groups can be at
        # zero a moment before its report is in the log group.
        _wait("the function's report", lambda: any('"failed": []' in x for x in said()), 30)
        plan = sandbox.fmctl("plan", "-f", str(spec), "--sandbox")
        assert "the budget is spent: 1001.00 USD of 1000.00" in plan.stdout, plan.stdout
        # `fmctl cost` says where the budget stands, as AWS Budgets counts it.
        cost = sandbox.fmctl(
            "cost", name, "--region", region, "--sandbox", "--no-cost-explorer", "-o", "json"
        )
        assert cost.returncode == 0, cost.stdout + cost.stderr
        assert json.loads(cost.stdout)["budget"] == {
            "name": f"fmctl-{name}-{region}",
            "limit": 1000.0,
            "period": "monthly",
            "spent": 1001.0,
            "alarms": [80.0, 100.0],
        }
        text = sandbox.fmctl("cost", name, "--region", region, "--sandbox", "--no-cost-explorer")
        assert "$1,001.00 of $1,000.00 this month" in text.stdout, text.stdout
        assert "notifications sent: 80%, 100%" in text.stdout, text.stdout
        seen = sandbox.fmctl("status", name, "--region", region, "--sandbox", "-o", "json")
        assert json.loads(seen.stdout)["budget"]["spent"] == 1001.0, seen.stdout
        # The stop holds: `up` of the same spec refuses to bring the nodes back, and
        # changes nothing; a limit above what is spent lifts it in the same run.
        held = sandbox.fmctl("plan", "-f", str(spec), "--sandbox", "-o", "json")
        refused = json.loads(held.stdout)["refusals"]
        assert {r["resource"] for r in refused} == {f"nodegroup/{g}" for g in groups}, refused
        assert {r["reason"] for r in refused} == {"the budget is spent"}, refused
        again = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
        assert again.returncode == 1, again.stdout + again.stderr
        assert "raise cost.budget above 1001.00 USD" in again.stdout + again.stderr
        assert set(sizes().values()) == {(0, 0)}
        _budget_spec(spec, monthly=5000, actions="stop", notify=["ops@example.com"])
        raised = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
        assert raised.returncode == 0, raised.stdout + raised.stderr
        assert sizes() == before
    finally:
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []


def test_a_pcs_cluster_over_its_total_budget_has_every_node_group_at_zero(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    name, region = "budget-pcs", "us-east-2"
    spec = pcs_spec(tmp_path, name, region)
    _budget_spec(spec, total=5000, actions="stop")
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        aws = sandbox.aws(region)
        budget = aws.client("budgets").describe_budget(
            AccountId=_account(sandbox, region), BudgetName=f"fmctl-{name}-{region}"
        )["Budget"]
        assert budget["TimeUnit"] == "ANNUALLY"
        # Counted from the day it was made, not January 1.
        assert abs(budget["TimePeriod"]["Start"].timestamp() - time.time()) < 2 * 86400
        # No address: only the stop topic hears the limit, and nothing hears 80%.
        assert set(_notices(sandbox, region, name)) == {100.0}
        assert [s["outcome"] for s in sandbox.spend(name, region, 5000.01)] == ["delivered"]
        pcs = aws.client("pcs")
        (cluster,) = [c for c in pcs.list_clusters()["clusters"] if c["name"] == name]

        def stopped() -> bool:
            listed = pcs.list_compute_node_groups(clusterIdentifier=cluster["id"])
            for group in listed["computeNodeGroups"]:
                scaling = pcs.get_compute_node_group(
                    clusterIdentifier=cluster["id"], computeNodeGroupIdentifier=group["id"]
                )["computeNodeGroup"]["scalingConfiguration"]
                if (scaling["minInstanceCount"], scaling["maxInstanceCount"]) != (0, 0):
                    return False
            return True

        _wait("PCS node groups at zero", stopped)
        # The stop holds on PCS too: every node group's growth back is refused.
        held = sandbox.fmctl("plan", "-f", str(spec), "--sandbox", "-o", "json")
        refused = json.loads(held.stdout)["refusals"]
        assert {r["resource"] for r in refused} == {
            "pcs/node-group/train",
            "pcs/node-group/login",
        }, refused
    finally:
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []


def test_a_budget_changes_in_place_and_goes_with_alert_only(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """A new limit is UpdateBudget, a new address a subscriber added; `actions: alert`
    makes no stop chain; `sandbox spend` says who was told; a budget of the name that is
    not the cluster's is refused."""
    name, region = "budget-alert", "us-west-2"
    spec = spec_file(tmp_path, name, storage={})
    data = yaml.safe_load(spec.read_text())
    data["kubernetes"] = {**data.get("kubernetes", {}), "queueing": "none"}
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    _budget_spec(spec, monthly=500, notify=["ops@example.com"])
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        aws = sandbox.aws(region)
        functions = aws.client("lambda").list_functions()["Functions"]
        assert not [f for f in functions if f["FunctionName"].startswith(f"fmctl-{name}-")]
        _budget_spec(spec, monthly=750.5, notify=["ops@example.com", "lead@example.com"])
        plan = sandbox.fmctl("plan", "-f", str(spec), "--sandbox", "-o", "json")
        (change,) = [c for c in json.loads(plan.stdout)["changes"] if c["action"] != "unchanged"]
        assert change["resource"] == "budget" and change["action"] == "update", change
        assert {f["path"] for f in change["fields"]} == {"limit", "notices"}, change
        again = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
        assert again.returncode == 0, again.stdout + again.stderr
        budget = aws.client("budgets").describe_budget(
            AccountId=_account(sandbox, region), BudgetName=f"fmctl-{name}-{region}"
        )["Budget"]
        assert budget["BudgetLimit"]["Amount"] == "750.50"
        both = {("EMAIL", "ops@example.com"), ("EMAIL", "lead@example.com")}
        assert _notices(sandbox, region, name) == {80.0: both, 100.0: both}
        said = sandbox.fmctl("sandbox", "spend", name, "800")
        assert said.returncode == 0, said.stdout + said.stderr
        assert said.stdout.count("delivered") == 4, said.stdout
        bad = sandbox.fmctl("sandbox", "spend", "Not_A_Name", "1")
        assert bad.returncode == 1 and "not a cluster name" in bad.stderr, bad.stderr
    finally:
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []
    # Someone else's budget of the name: `up` refuses it, and `down` leaves it.
    account = _account(sandbox, region)
    budgets = sandbox.aws(region).client("budgets")
    budgets.create_budget(
        AccountId=account,
        Budget={
            "BudgetName": f"fmctl-{name}-{region}",
            "BudgetLimit": {"Amount": "10", "Unit": "USD"},
            "TimeUnit": "MONTHLY",
            "BudgetType": "COST",
        },
    )
    try:
        refused = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert f"budget fmctl-{name}-{region} exists and is not fmctl cluster" in (
            refused.stdout + refused.stderr
        )
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
        budgets.describe_budget(AccountId=account, BudgetName=f"fmctl-{name}-{region}")
    finally:
        budgets.delete_budget(AccountId=account, BudgetName=f"fmctl-{name}-{region}")


def test_budgets_publishes_only_where_policies_let_it(sandbox: Sandbox) -> None:
    """A topic whose policy does not let budgets.amazonaws.com publish loses the
    notification, as in AWS; SNS invokes a function only if its policy lets SNS; a function
    whose role does not allow a call gets AccessDenied for it."""
    from fmctl_sandbox import budgets, iam_eval, lambda_run

    open_topic = {"Policy": json.dumps({"Statement": []})}
    assert "does not let budgets.amazonaws.com sns:Publish" in str(
        budgets.publish_refused(open_topic, None)
    )
    allowed = {
        "Effect": "Allow",
        "Principal": {"Service": "budgets.amazonaws.com"},
        "Action": "SNS:Publish",
        "Resource": "*",
    }
    topic = {"Policy": json.dumps({"Statement": [allowed]})}
    assert budgets.publish_refused(topic, None) is None
    managed = {**topic, "KmsMasterKeyId": "alias/aws/sns"}
    assert "AWS managed key" in str(budgets.publish_refused(managed, None))
    keyed = {**topic, "KmsMasterKeyId": "arn:aws:kms:us-east-1:123456789012:key/k"}
    bare_key = json.dumps({"Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}}]})
    assert "kms:GenerateDataKey" in str(budgets.publish_refused(keyed, bare_key))

    arn = "arn:aws:sns:us-east-1:123456789012:t"
    grant = {
        "Effect": "Allow",
        "Principal": {"Service": "sns.amazonaws.com"},
        "Action": "lambda:InvokeFunction",
        "Condition": {"ArnLike": {"AWS:SourceArn": arn}},
    }
    assert lambda_run._not_permitted({"Statement": [grant]}, arn) is None
    assert lambda_run._not_permitted({"Statement": [grant]}, arn + "-other") is not None
    assert lambda_run._not_permitted({"Statement": []}, arn) is not None

    documents = [
        {
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": ["eks:UpdateNodegroupConfig"],
                    "Resource": ["arn:aws:eks:us-east-1:*:nodegroup/c/gpu/*"],
                }
            ]
        }
    ]
    call = ("eks", "updateNodegroupConfig", "us-east-1", "123456789012")
    assert (
        iam_eval.refused(documents, "r", *call, {"clusterName": "c", "nodegroupName": "gpu"})
        is None
    )
    assert "not allowed" in str(
        iam_eval.refused(documents, "r", *call, {"clusterName": "c", "nodegroupName": "sys"})
    )
    assert "does not judge" in str(
        iam_eval.refused(documents, "r", "ec2", "terminateInstances", "us-east-1", "1", {})
    )


def test_a_role_with_confused_deputy_conditions_is_assumed_only_for_its_own_sources() -> None:
    """The trust fmctl's Scheduler and EventBridge roles carry: the caller's account and
    the cluster's schedule group or rule (the services' "Confused deputy prevention"); the
    sandbox refuses another account's, another group's, and a service passing no source."""
    from fmctl_sandbox import iam_eval

    group = "arn:aws:scheduler:us-east-1:123456789012:schedule-group/fmctl-c-blocks"
    statement = {
        "Effect": "Allow",
        "Principal": {"Service": ["scheduler.amazonaws.com", "events.amazonaws.com"]},
        "Action": "sts:AssumeRole",
        "Condition": {
            "StringEquals": {"aws:SourceAccount": "123456789012"},
            "ArnLike": {"aws:SourceArn": [group, "arn:aws:events:*:123456789012:rule/fmctl-c-0a"]},
        },
    }
    scheduler = "scheduler.amazonaws.com"
    assert iam_eval.trusts(statement, scheduler, "123456789012", group)
    rule = "arn:aws:events:us-east-1:123456789012:rule/fmctl-c-0a"
    assert iam_eval.trusts(statement, "events.amazonaws.com", "123456789012", rule)
    assert not iam_eval.trusts(statement, scheduler, "999999999999", group)
    assert not iam_eval.trusts(statement, scheduler, "123456789012", group + "-x")
    assert not iam_eval.trusts(statement, scheduler, "123456789012", None)
    assert not iam_eval.trusts(statement, "lambda.amazonaws.com", "123456789012", group)
    other = {**statement, "Condition": {"DateLessThan": {"aws:CurrentTime": "2100-01-01"}}}
    assert not iam_eval.trusts(other, scheduler, "123456789012", group)  # not judged: refused


@pytest.mark.parametrize("calls", [[], [{"action": "eks:updateNodegroupConfig", "input": {}}]])
def test_the_stop_package_is_the_same_bytes_for_the_same_calls(calls: list[Any]) -> None:
    """Lambda's CodeSha256 is what `plan` compares: a package built twice hashes the same,
    and a changed call changes it."""
    from provisioner.resources.functions import code_sha, package

    assert code_sha(package(calls)) == code_sha(package(list(calls)))
    other = [*calls, {"action": "pcs:updateComputeNodeGroup", "input": {"x": 1}}]
    assert code_sha(package(other)) != code_sha(package(calls))


def test_a_budget_is_its_regions_clusters_and_adopts_after_a_lost_answer(
    sandbox: Sandbox,
) -> None:
    """Budgets are the account's: two clusters of one name in two regions each have their
    own (named and tagged by region), and neither's find_owned or read takes the other's;
    a create whose answer was lost finds the budget it made and makes no second."""
    from provisioner.resources.budgets import Budget, BudgetParams, budget_name
    from provisioner.resources.context import Context
    from provisioner.resources.errors import Foreign
    from provisioner.resources.tags import DesiredTags

    name, kind = "twin", Budget()
    made = {}
    for region in ("us-east-1", "eu-west-1"):
        ctx = Context(aws=sandbox.aws(region), cluster=name, region=region)
        params = BudgetParams(
            budget_name(name, region),
            100.0,
            "monthly",
            ("ops@example.com",),
            None,
            DesiredTags((), name, "budget", region=region),
        )
        kind.create(Request(ctx, "budget", params))
        kind.create(Request(ctx, "budget", params))  # the answer to the first was "lost"
        made[region] = (ctx, params)
    for region, (ctx, params) in made.items():
        (owned,) = kind.find_owned(ctx)
        assert owned.id == f"fmctl-{name}-{region}"
        observed = kind.read(Request(ctx, "budget", params))
        assert observed is not None and kind.diff(Request(ctx, "budget", params), observed) == []
    # The other region's budget, asked for by this region's name, is not taken for ours.
    ctx, _ = made["us-east-1"]
    _, theirs = made["eu-west-1"]
    with pytest.raises(Foreign):
        kind.read(Request(ctx, "budget", theirs))
    for ctx, params in made.values():
        (owned,) = kind.find_owned(ctx)
        kind.delete(ctx, owned)
        assert kind.read(Request(ctx, "budget", params)) is None


def test_gc_finds_a_cluster_whose_only_leftover_is_its_budget(sandbox: Sandbox) -> None:
    """A `down` cut short can leave only what guards the money: `gc` finds the cluster by
    its budget (in the region the budget's tags name) and collects it."""
    from provisioner.resources.budgets import Budget, BudgetParams, budget_name
    from provisioner.resources.context import Context
    from provisioner.resources.tags import CREATED_TAG, DesiredTags

    name, region = "budget-left", "ap-south-1"
    aws = sandbox.aws(region)
    ctx = Context(aws=aws, cluster=name, region=region)
    params = BudgetParams(
        budget_name(name, region),
        100.0,
        "monthly",
        ("ops@example.com",),
        None,
        DesiredTags((), name, "budget", region=region),
    )
    Budget().create(Request(ctx, "budget", params))
    arn = f"arn:aws:budgets::{_account(sandbox, region)}:budget/{params.name}"
    before = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 600))
    aws.client("budgets").tag_resource(
        ResourceARN=arn, ResourceTags=[{"Key": CREATED_TAG, "Value": before}]
    )
    elsewhere = sandbox.fmctl(
        "gc", "--older-than", "5m", "--dry-run", "--region", "us-east-1", "--sandbox"
    )
    assert name not in elsewhere.stdout, elsewhere.stdout
    listed = sandbox.fmctl("gc", "--older-than", "5m", "--dry-run", "--region", region, "--sandbox")
    assert f"collect  {name}" in listed.stdout, listed.stdout + listed.stderr
    done = sandbox.fmctl("gc", "--older-than", "5m", "--region", region, "--sandbox", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert Budget().read(Request(ctx, "budget", params)) is None
    assert raw_leftovers(sandbox, name, region) == []


def test_online_checks_say_what_would_keep_a_budget_from_working(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """The cluster's tag must be an active cost allocation tag (else the budget counts
    nothing: a warning, since a new tag can be activated only once it is in use), and an SNS
    topic to notify must exist and let AWS Budgets publish (errors, located on the entry)."""
    from provisioner.catalog import load_catalog
    from provisioner.ops.validate import load_and_validate
    from provisioner.validate.online import online_problems

    name, region = "budget-online", "us-west-2"
    aws = sandbox.aws(region)
    sns = aws.client("sns")
    closed = sns.create_topic(Name="budget-online-closed")["TopicArn"]
    statement = {
        "Effect": "Allow",
        "Principal": {"Service": "budgets.amazonaws.com"},
        "Action": "SNS:Publish",
        "Resource": "*",
    }
    opened = sns.create_topic(
        Name="budget-online-open",
        Attributes={"Policy": json.dumps({"Version": "2012-10-17", "Statement": [statement]})},
    )["TopicArn"]
    missing = opened.replace("budget-online-open", "budget-online-missing")
    spec = spec_file(tmp_path, name, storage={})

    def problems(topic: str) -> dict[tuple[str, str], str]:
        _budget_spec(spec, monthly=100, notify=["ops@example.com", topic])
        validation = load_and_validate(str(spec))
        assert validation.resolved is not None
        found = online_problems(aws, validation.resolved, load_catalog())
        return {(p.code, p.dotted_path): p.level for p in found if p.code.startswith("budget-")}

    ce = sandbox.aws("us-east-1").client("ce")
    ce.update_cost_allocation_tags_status(
        CostAllocationTagsStatus=[{"TagKey": OWNER_TAG, "Status": "Inactive"}]
    )
    inactive = ("budget-tag-inactive", "cost.budget")
    refused = ("budget-topic", "cost.budget.notify[1]")
    assert problems(closed) == {inactive: "warning", refused: "error"}
    assert problems(missing) == {inactive: "warning", refused: "error"}
    assert problems(opened) == {inactive: "warning"}
    ce.update_cost_allocation_tags_status(
        CostAllocationTagsStatus=[{"TagKey": OWNER_TAG, "Status": "Active"}]
    )
    try:
        assert problems(opened) == {}
    finally:
        ce.update_cost_allocation_tags_status(
            CostAllocationTagsStatus=[{"TagKey": OWNER_TAG, "Status": "Inactive"}]
        )
        sns.delete_topic(TopicArn=closed)
        sns.delete_topic(TopicArn=opened)
