"""Ownership: what fmctl did not create is never modified or deleted, by `up`, `down`, `gc`
or a crash, even when it looks like fmctl's (a tag value one character off, another fmctl
cluster of a similar name, a VPC with no tags at all)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from provisioner.resources.tags import OWNER_TAG, RESOURCE_TAG
from tests.engine.harness import Sandbox, kill_after, raw_leftovers, region_of, spec_file
from tests.reliability.campaign import tally

NAME = "own-test"
#: Tag values that must not be mistaken for NAME's.
NEAR_MISSES = ["own-tes", "own-test-", "own-testx", "Own-test", "own-test ", "own-test-2"]


def _foreign(sandbox: Sandbox, region: str) -> dict[str, dict[str, Any]]:
    """Create look-alikes in the cluster's region; return {kind:id: tags}."""
    aws = sandbox.aws(region)
    ec2, fsx = aws.client("ec2"), aws.client("fsx")
    made: dict[str, dict[str, Any]] = {}
    untagged = ec2.create_vpc(CidrBlock="10.90.0.0/16")["Vpc"]["VpcId"]
    made[f"vpc:{untagged}"] = {}
    for i, value in enumerate(NEAR_MISSES):
        tags = {OWNER_TAG: value, RESOURCE_TAG: "vpc"}
        spec = [{"ResourceType": "vpc", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
        vpc = ec2.create_vpc(CidrBlock=f"10.{91 + i}.0.0/16", TagSpecifications=spec)["Vpc"]
        made[f"vpc:{vpc['VpcId']}"] = tags
        sg_tags = {OWNER_TAG: value, RESOURCE_TAG: "sg/efa"}
        group = ec2.create_security_group(
            GroupName=f"{value.strip() or 'x'}-efa-{i}",
            Description="look-alike",
            VpcId=vpc["VpcId"],
            TagSpecifications=[
                {
                    "ResourceType": "security-group",
                    "Tags": [{"Key": k, "Value": v} for k, v in sg_tags.items()],
                }
            ],
        )["GroupId"]
        made[f"sg:{group}"] = sg_tags
        key_tags = {OWNER_TAG: value, RESOURCE_TAG: "kms/secrets"}
        key = aws.client("kms").create_key(
            Tags=[{"TagKey": k, "TagValue": v} for k, v in key_tags.items()]
        )["KeyMetadata"]["KeyId"]
        made[f"kms:{key}"] = key_tags
        lt_tags = {OWNER_TAG: value, RESOURCE_TAG: "launch-template/gpu"}
        lt = ec2.create_launch_template(
            LaunchTemplateName=f"look-alike-{i}",
            LaunchTemplateData={"InstanceType": "p5en.48xlarge"},
            TagSpecifications=[
                {
                    "ResourceType": "launch-template",
                    "Tags": [{"Key": k, "Value": v} for k, v in lt_tags.items()],
                }
            ],
        )["LaunchTemplate"]["LaunchTemplateId"]
        made[f"lt:{lt}"] = lt_tags
        # Under the cluster's own /aws/eks/NAME/ prefix, tagged for a near miss: not its own.
        log_tags = {OWNER_TAG: value, RESOURCE_TAG: "log-group/control-plane"}
        group = f"/aws/eks/{NAME}/look-alike-{i}"
        aws.client("logs").create_log_group(logGroupName=group, tags=log_tags)
        made[f"logs:{group}"] = log_tags
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    fs_tags = {OWNER_TAG: "own-testx", RESOURCE_TAG: "fsx"}
    fs = fsx.create_file_system(
        FileSystemType="LUSTRE",
        StorageCapacity=1200,
        SubnetIds=[subnet],
        LustreConfiguration={"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 125},
        Tags=[{"Key": k, "Value": v} for k, v in fs_tags.items()],
    )["FileSystem"]["FileSystemId"]
    made[f"fsx:{fs}"] = fs_tags
    return made


def _still_there(sandbox: Sandbox, region: str, made: dict[str, dict[str, Any]]) -> list[str]:
    """What of ``made`` is gone or changed (counted for the campaign's report)."""
    wrong = _changed(sandbox, region, made)
    tally.add(foreign_resources_touched=len(wrong))
    return wrong


def _changed(sandbox: Sandbox, region: str, made: dict[str, dict[str, Any]]) -> list[str]:
    aws = sandbox.aws(region)
    ec2, fsx = aws.client("ec2"), aws.client("fsx")
    wrong = []
    for key, tags in made.items():
        kind, ident = key.split(":", 1)
        if kind == "vpc":
            found = ec2.describe_vpcs(Filters=[{"Name": "vpc-id", "Values": [ident]}])["Vpcs"]
        elif kind == "kms":
            kms = aws.client("kms")
            meta = kms.describe_key(KeyId=ident)["KeyMetadata"]
            found = (
                [
                    {
                        "Tags": [
                            {"Key": t["TagKey"], "Value": t["TagValue"]}
                            for t in kms.list_resource_tags(KeyId=ident)["Tags"]
                        ]
                    }
                ]
                if meta["KeyState"] == "Enabled"
                else []
            )
        elif kind == "lt":
            found = ec2.describe_launch_templates(LaunchTemplateIds=[ident])["LaunchTemplates"]
        elif kind == "logs":
            logs = aws.client("logs")
            groups = logs.describe_log_groups(logGroupNamePrefix=ident)["logGroups"]
            found = [
                {"Tags": [{"Key": k, "Value": v} for k, v in tags_of.items()]}
                for g in groups
                if g["logGroupName"] == ident
                for tags_of in [logs.list_tags_for_resource(resourceArn=g["logGroupArn"])["tags"]]
            ]
        elif kind == "sg":
            found = ec2.describe_security_groups(Filters=[{"Name": "group-id", "Values": [ident]}])[
                "SecurityGroups"
            ]
        else:
            found = [
                f
                for f in fsx.describe_file_systems()["FileSystems"]
                if f["FileSystemId"] == ident and f["Lifecycle"] != "DELETING"
            ]
        if not found:
            wrong.append(f"{key} is gone")
            continue
        now = {t["Key"]: t["Value"] for t in found[0].get("Tags", [])}
        if now != tags:
            wrong.append(f"{key} tags changed: {now} != {tags}")
    return wrong


def test_look_alikes_survive_up_down_gc_and_a_crash(sandbox: Sandbox, tmp_path: Path) -> None:
    spec = spec_file(tmp_path, NAME)
    region = region_of(spec)
    made = _foreign(sandbox, region)
    assert len(made) == 2 + 5 * len(NEAR_MISSES)

    up = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert up.returncode == 0, up.stdout + up.stderr
    assert _still_there(sandbox, region, made) == []
    down = sandbox.fmctl("down", NAME, "--region", region, "--sandbox", "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, NAME, region) == []
    assert _still_there(sandbox, region, made) == []

    # gc over everything older than a minute: only fmctl clusters it can name, and none of
    # the look-alikes belongs to one with a creation time.
    gc = sandbox.fmctl("gc", "--region", region, "--older-than", "1m", "--sandbox", "--yes")
    assert gc.returncode == 0, gc.stdout + gc.stderr
    assert _still_there(sandbox, region, made) == []

    proc = sandbox.spawn("up", "-f", str(spec), "--sandbox", "--yes")
    kill_after(proc, " creating", 6)
    tally.add(crashes_tried=1)
    again = sandbox.fmctl("down", NAME, "--region", region, "--sandbox", "--yes")
    assert again.returncode == 0, again.stdout + again.stderr
    assert raw_leftovers(sandbox, NAME, region) == []
    assert _still_there(sandbox, region, made) == []
