"""The ttl kept by AWS: `up` of a spec with metadata.ttl makes an EventBridge Scheduler group
whose one-time schedules scale every node group to zero at the cluster's expiry; the
sandbox runs them when its clock passes that time, as the role they run as, and `down`
removes them. The sandbox's own rules (who may run what) are checked apart."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from botocore.exceptions import ClientError

from provisioner.resources.base import Request
from provisioner.resources.tags import EXPIRES_TAG, OWNER_TAG, parse_stamp
from tests.engine.harness import Sandbox, raw_leftovers, spec_file
from tests.engine.test_pcs import pcs_spec


def _group(sandbox: Sandbox, region: str, name: str) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The cluster's schedule group's tags, and its schedules as GetSchedule describes them."""
    scheduler = sandbox.aws(region).client("scheduler")
    group = scheduler.get_schedule_group(Name=f"fmctl-{name}")
    tags = {
        t["Key"]: t["Value"]
        for t in scheduler.list_tags_for_resource(ResourceArn=group["Arn"])["Tags"]
    }
    listed = scheduler.list_schedules(GroupName=f"fmctl-{name}")["Schedules"]
    schedules = [scheduler.get_schedule(GroupName=f"fmctl-{name}", Name=s["Name"]) for s in listed]
    return tags, sorted(schedules, key=lambda s: str(s["Name"]))


def _expires(tags: dict[str, str]) -> float:
    found = parse_stamp(tags[EXPIRES_TAG])
    assert found is not None
    return found


def test_an_eks_cluster_past_its_ttl_is_scaled_to_zero_by_aws(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    name, region = "ttl-eks", "us-west-2"
    spec = spec_file(tmp_path, name, storage={})
    data = yaml.safe_load(spec.read_text())
    # Days, not hours: the sandbox's clock is the session's, and other tests move it on by
    # hours (the Capacity Block tests' T-60 and T-40).
    data["metadata"]["ttl"] = "3d"
    data["kubernetes"] = {**data.get("kubernetes", {}), "queueing": "none"}
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        tags, schedules = _group(sandbox, region, name)
        assert tags[OWNER_TAG] == name
        expires = _expires(tags)
        assert abs(expires - (time.time() + 3 * 86400)) < 600
        eks = sandbox.aws(region).client("eks")
        groups = eks.list_nodegroups(clusterName=name)["nodegroups"]
        assert {s["Name"] for s in schedules} == set(groups)
        for schedule in schedules:
            assert schedule["ScheduleExpression"] == time.strftime(
                "at(%Y-%m-%dT%H:%M:%S)", time.gmtime(expires)
            )
            assert schedule["ScheduleExpressionTimezone"] == "UTC"
            target = schedule["Target"]
            assert target["Arn"] == "arn:aws:scheduler:::aws-sdk:eks:updateNodegroupConfig"
            assert json.loads(target["Input"])["nodegroupName"] == schedule["Name"]
            assert target["RoleArn"].endswith(f"fmctl-{name}-{region}-ttl-scheduler")

        # Nothing runs before the expiry; everything once, after it. (The sandbox's clock is
        # the session's: other tests may have moved it on, so the advance counts from it.)
        lead = expires - sandbox.clock()
        assert lead > 600, "another test moved the sandbox's clock past this ttl"
        assert [r for r in sandbox.advance(lead - 600) if name in r.get("schedule", "")] == []
        runs = [r for r in sandbox.advance(1200) if name in r.get("schedule", "")]
        assert sorted(r["outcome"] for r in runs) == ["succeeded"] * len(groups), runs
        for group in groups:
            # The update lands as EKS's updates do, after a while on the sandbox's clock.
            deadline = time.monotonic() + 60
            while True:
                described = eks.describe_nodegroup(clusterName=name, nodegroupName=group)
                scaling = described["nodegroup"]["scalingConfig"]
                if (scaling["minSize"], scaling["desiredSize"]) == (0, 0):
                    break
                assert time.monotonic() < deadline, (group, scaling)
                time.sleep(0.5)
        assert [r for r in sandbox.advance(3600) if name in r.get("schedule", "")] == []

        # A longer ttl moves the schedules (the group's expiry tag, and each expression).
        data["metadata"]["ttl"] = "3d2h"
        spec.write_text(yaml.safe_dump(data, sort_keys=False))
        plan = sandbox.fmctl("plan", "-f", str(spec), "--sandbox", "-o", "json")
        change = {c["resource"]: c for c in json.loads(plan.stdout)["changes"]}["expiry"]
        assert change["action"] == "update", change
        assert any(f["path"] == "at" for f in change["fields"]), change
        again = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
        assert again.returncode == 0, again.stdout + again.stderr
        tags, schedules = _group(sandbox, region, name)
        assert {s["ScheduleExpression"] for s in schedules} == {
            time.strftime("at(%Y-%m-%dT%H:%M:%S)", time.gmtime(_expires(tags)))
        }
        assert _expires(tags) - expires == pytest.approx(2 * 3600, abs=5)
    finally:
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []


def test_a_pcs_cluster_past_its_ttl_has_every_node_group_at_zero(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    name, region = "ttl-pcs", "us-east-2"
    spec = pcs_spec(tmp_path, name, region)
    data = yaml.safe_load(spec.read_text())
    data["metadata"]["ttl"] = "1h"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        runs = [r for r in sandbox.advance(2 * 3600) if name in r.get("schedule", "")]
        assert sorted(r["schedule"].rsplit("/", 1)[-1] for r in runs) == ["login", "train"]
        assert {r["outcome"] for r in runs} == {"succeeded"}, runs
        pcs = sandbox.aws(region).client("pcs")
        (cluster,) = [c for c in pcs.list_clusters()["clusters"] if c["name"] == name]
        for group in pcs.list_compute_node_groups(clusterIdentifier=cluster["id"])[
            "computeNodeGroups"
        ]:
            deadline = time.monotonic() + 60  # PCS updates land a while later too
            while True:
                described = pcs.get_compute_node_group(
                    clusterIdentifier=cluster["id"], computeNodeGroupIdentifier=group["id"]
                )["computeNodeGroup"]
                scaling = described["scalingConfiguration"]
                if (scaling["minInstanceCount"], scaling["maxInstanceCount"]) == (0, 0):
                    break
                assert time.monotonic() < deadline, (group["name"], described)
                time.sleep(0.5)
    finally:
        down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, name, region) == []


def _role(sandbox: Sandbox, name: str, principal: str, actions: list[str]) -> str:
    iam = sandbox.aws("us-east-1").client("iam")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": principal}, "Action": "sts:AssumeRole"}
        ],
    }
    arn = str(
        iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    )
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": actions,
                "Resource": "arn:aws:eks:us-east-1:*:nodegroup/nowhere/*",
            }
        ],
    }
    iam.put_role_policy(RoleName=name, PolicyName="p", PolicyDocument=json.dumps(policy))
    return arn


def test_the_scheduler_runs_a_call_only_as_a_role_allowed_to_make_it(sandbox: Sandbox) -> None:
    scheduler = sandbox.aws("us-east-1").client("scheduler")
    group = "sandbox-rules"
    scheduler.create_schedule_group(Name=group)
    with pytest.raises(ClientError) as twice:
        scheduler.create_schedule_group(Name=group)
    assert twice.value.response["Error"]["Code"] == "ConflictException"
    due = time.strftime("at(%Y-%m-%dT%H:%M:%S)", time.gmtime(time.time() - 60))
    good = {"clusterName": "nowhere", "nodegroupName": "gpu", "scalingConfig": {"minSize": 0}}
    cases = {
        "untrusted": (_role(sandbox, "sched-untrusted", "ec2.amazonaws.com", ["eks:*"]), good),
        "not-allowed": (
            _role(sandbox, "sched-narrow", "scheduler.amazonaws.com", ["eks:DescribeNodegroup"]),
            good,
        ),
        "bad-input": (
            _role(sandbox, "sched-ok", "scheduler.amazonaws.com", ["eks:UpdateNodegroupConfig"]),
            {"clusterName": "nowhere", "nodegroupName": "gpu", "scalingConfig": {"MinSize": 0}},
        ),
    }
    for schedule, (role, document) in cases.items():
        scheduler.create_schedule(
            Name=schedule,
            GroupName=group,
            ScheduleExpression=due,
            ScheduleExpressionTimezone="UTC",
            FlexibleTimeWindow={"Mode": "OFF"},
            Target={
                "Arn": "arn:aws:scheduler:::aws-sdk:eks:updateNodegroupConfig",
                "RoleArn": role,
                "Input": json.dumps(document),
            },
        )
    runs = {
        r["schedule"].rsplit("/", 1)[-1]: r
        for r in sandbox.advance(0)
        if group in r.get("schedule", "")
    }
    assert set(runs) == set(cases)
    assert {r["outcome"] for r in runs.values()} == {"failed"}
    assert "does not trust scheduler.amazonaws.com" in runs["untrusted"]["error"]
    assert "not allowed eks:updateNodegroupConfig" in runs["not-allowed"]["error"]
    # Allowed, but its Input is not the API's parameters: the call itself is refused.
    assert "MinSize" in runs["bad-input"]["error"], runs["bad-input"]
    scheduler.delete_schedule_group(Name=group)
    with pytest.raises(ClientError) as gone:
        scheduler.delete_schedule_group(Name=group)
    assert gone.value.response["Error"]["Code"] == "ResourceNotFoundException"


def test_sandbox_advance_says_what_ran_and_refuses_a_bad_duration(sandbox: Sandbox) -> None:
    done = sandbox.fmctl("sandbox", "advance", "1m")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no schedule or event was due" or ": " in done.stdout
    bad = sandbox.fmctl("sandbox", "advance", "soon")
    assert bad.returncode == 1
    assert "'soon' is not a duration" in bad.stderr + bad.stdout
    assert "Traceback" not in bad.stderr


def test_a_create_that_lost_its_answer_adopts_what_it_made(sandbox: Sandbox) -> None:
    """`up` killed after CreateScheduleGroup (or a CreateSchedule) went through: the next
    create finds the group by its tags and the schedules by name, and makes no second of
    either; a group of that name not the cluster's is refused."""
    from provisioner.graph.ref import Ref
    from provisioner.resources.context import Context
    from provisioner.resources.errors import Foreign
    from provisioner.resources.iam import RoleOut
    from provisioner.resources.schedules import Expiry, ExpiryParams, StopCall, input_of
    from provisioner.resources.tags import DesiredTags

    region, name = "eu-west-1", "lost-answer"
    aws = sandbox.aws(region)
    ctx = Context(aws=aws, cluster=name, region=region)
    role = f"arn:aws:iam::123456789012:role/fmctl-{name}-{region}-ttl-scheduler"
    ctx.record("iam/ttl-scheduler", RoleOut(role.rsplit("/", 1)[-1], role))
    call = StopCall(
        "gpu",
        "eks:updateNodegroupConfig",
        input_of({"clusterName": name, "nodegroupName": "gpu", "scalingConfig": {"minSize": 0}}),
    )
    params = ExpiryParams(
        f"fmctl-{name}",
        Ref("iam/ttl-scheduler", RoleOut),
        (call,),
        DesiredTags((), name, "expiry", ttl_seconds=3600),
    )
    kind = Expiry()
    kind.create(Request(ctx, "expiry", params))
    kind.create(Request(ctx, "expiry", params))  # the answer to the first was "lost"
    scheduler = aws.client("scheduler")
    groups = scheduler.list_schedule_groups(NamePrefix=f"fmctl-{name}")["ScheduleGroups"]
    assert [g["Name"] for g in groups] == [f"fmctl-{name}"]
    schedules = scheduler.list_schedules(GroupName=f"fmctl-{name}")["Schedules"]
    assert [s["Name"] for s in schedules] == ["gpu"]
    observed = kind.read(Request(ctx, "expiry", params))
    assert observed is not None and kind.diff(Request(ctx, "expiry", params), observed) == []
    (owned,) = kind.find_owned(ctx)
    kind.delete(ctx, owned)
    assert kind.read(Request(ctx, "expiry", params)) is None
    scheduler.create_schedule_group(Name=f"fmctl-{name}", Tags=[{"Key": "team", "Value": "x"}])
    with pytest.raises(Foreign):
        kind.create(Request(ctx, "expiry", params))
    scheduler.delete_schedule_group(Name=f"fmctl-{name}")
