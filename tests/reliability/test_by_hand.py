"""Changes made by hand between runs: `down` after a resource was deleted by hand, `up` after
one was deleted or changed by hand. fmctl converges and says what it did; it never fights a
change silently."""

from __future__ import annotations

import json
from pathlib import Path

from tests.engine.harness import Sandbox, owned, raw_leftovers, region_of, spec_file
from tests.reliability.campaign import tally


def _ids(sandbox: Sandbox, name: str, region: str) -> dict[str, str]:
    return {logical: aws_id for _, logical, aws_id in owned(sandbox, name, region)}


def test_deleted_and_changed_by_hand(sandbox: Sandbox, tmp_path: Path) -> None:
    name = "by-hand"
    spec = spec_file(tmp_path, name)
    region = region_of(spec)
    assert sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes").returncode == 0
    ids = _ids(sandbox, name, region)
    ec2 = sandbox.aws(region).client("ec2")

    # Changed by hand: the EFA group's self-referencing rule removed. `plan` shows it as
    # drift and leaves it; `up` restores it and says so.
    (group,) = ec2.describe_security_groups(GroupIds=[ids["sg/efa"]])["SecurityGroups"]
    ec2.revoke_security_group_ingress(GroupId=ids["sg/efa"], IpPermissions=group["IpPermissions"])
    # Deleted by hand: the S3 endpoint. `up` makes it again and leaves the rest alone.
    ec2.delete_vpc_endpoints(VpcEndpointIds=[ids["s3-endpoint"]])
    planned = sandbox.fmctl("plan", "-f", str(spec), "--sandbox", "-o", "json")
    assert planned.returncode == 0, planned.stderr
    changes = {c["resource"]: c for c in json.loads(planned.stdout)["changes"]}
    assert changes["sg/efa"]["action"] == "drift"
    assert [f["path"] for f in changes["sg/efa"]["fields"]] == ["ingress"]
    assert changes["s3-endpoint"]["action"] == "create"
    (group,) = ec2.describe_security_groups(GroupIds=[ids["sg/efa"]])["SecurityGroups"]
    assert group["IpPermissions"] == [], "plan put nothing back"
    again = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"{ids['sg/efa']}: restored what was changed outside fmctl: ingress" in again.stdout
    assert "1 created" in again.stdout
    now = _ids(sandbox, name, region)
    assert now["s3-endpoint"] != ids["s3-endpoint"]
    assert {k: v for k, v in now.items() if k != "s3-endpoint"} == {
        k: v for k, v in ids.items() if k != "s3-endpoint"
    }
    (group,) = ec2.describe_security_groups(GroupIds=[ids["sg/efa"]])["SecurityGroups"]
    assert group["IpPermissions"], "the rule is back"

    # Deleted by hand before `down`: the NAT gateway (and its address goes on being freed).
    ec2.delete_nat_gateway(NatGatewayId=now["natgw"])
    down = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    left = raw_leftovers(sandbox, name, region)
    tally.add(orphans_found=len(left))
    assert left == []
