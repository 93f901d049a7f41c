"""An EKS upgrade over two minor versions (1.33 -> 1.35) with one `up`, as EKS allows it:
the sandbox refuses UpdateClusterVersion while a node group lags the control plane and a
node group newer than it (both EKS's rules, botocore's documentation of the two calls), so
the upgrade must interleave: control plane, node groups and add-ons at each minor. A SIGKILL
after each step the upgrade takes, then `up` again, converges to the same cluster."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from tests.engine.harness import ROOT, Sandbox, raw_leftovers

NAME = "e2e-eks-upgrade"
REGION = "us-east-2"


def _spec(folder: Path, version: str) -> Path:
    data = yaml.safe_load((ROOT / "examples" / "p5en-eks-fsx-s3.yaml").read_text())
    data["metadata"]["name"] = NAME
    data["metadata"]["region"] = REGION
    data["network"]["availabilityZone"] = f"{REGION}a"
    data["kubernetes"]["version"] = version
    data["compute"]["gpuPools"][0]["count"] = 1
    # Storage and the in-cluster stack are not what an upgrade is about: fewer steps.
    data["storage"].pop("fsxLustre", None)
    data["storage"].pop("s3", None)
    path = folder / f"spec-{version}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _versions(sandbox: Sandbox) -> dict[str, str]:
    eks = sandbox.aws(REGION).client("eks")
    out = {"eks": eks.describe_cluster(name=NAME)["cluster"]["version"]}
    for group in eks.list_nodegroups(clusterName=NAME)["nodegroups"]:
        ng = eks.describe_nodegroup(clusterName=NAME, nodegroupName=group)["nodegroup"]
        out[f"nodegroup/{group}"] = ng["version"]
    proxy = eks.describe_addon(clusterName=NAME, addonName="kube-proxy")["addon"]
    out["kube-proxy"] = proxy["addonVersion"]
    return out


#: The calls that take a step of an upgrade.
STEPS = ("UpdateClusterVersion", "UpdateNodegroupVersion", "UpdateAddon")


def _kill_after_a_step(sandbox: Sandbox, spec: Path) -> int:
    """Run `up` and SIGKILL it once EKS has accepted one step of it; its exit code (-9 when
    killed, 0 when it finished without taking a step the kill could follow)."""
    seen = len(sandbox.requests())
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "provisioner", "up", "-f", str(spec), "--sandbox", "--yes"],
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
            env=sandbox.env(),
        )
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            new = sandbox.requests()[seen:]
            if any(r["action"] in STEPS and r["status"] == 200 for r in new):
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.05)
        code = proc.wait(timeout=60)
        out.seek(0)
        text = out.read()
    assert code in (0, -9), text
    return code


def test_two_minors_in_one_up_interleaved_and_converging_after_each_kill(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    made = sandbox.fmctl("up", "-f", str(_spec(tmp_path, "1.33")), "--sandbox", "--yes")
    assert made.returncode == 0, made.stdout + made.stderr
    start = _versions(sandbox)
    assert set(start.values()) - {start["kube-proxy"]} == {"1.33"}
    target = _spec(tmp_path, "1.35")

    plan = sandbox.fmctl("plan", "-f", str(target), "--sandbox", "-o", "json")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    (eks,) = [c for c in json.loads(plan.stdout)["changes"] if c["resource"] == "eks"]
    (field,) = eks["fields"]
    assert "1.33 -> 1.34 -> 1.35" in field["reason"] and "node groups" in field["reason"]

    # Kill `up` as soon as EKS has taken one more step of it, again and again, until a run
    # finishes by itself: every step the upgrade takes is a place a run dies (with that
    # step still in flight), and the next run goes on from there.
    kills, before = 0, len(sandbox.requests())
    while True:
        code = _kill_after_a_step(sandbox, target)
        if code == 0:
            break
        assert code == -9, code
        kills += 1
        assert kills < 20, "the upgrade does not converge"
    assert kills >= 4, f"only {kills} kills: the upgrade had fewer steps than expected"
    finish = sandbox.fmctl("up", "-f", str(target), "--sandbox", "--yes")
    assert finish.returncode == 0, finish.stdout + finish.stderr

    end = _versions(sandbox)
    assert {k: v for k, v in end.items() if k != "kube-proxy"} == {
        k: "1.35" for k in end if k != "kube-proxy"
    }
    assert end["kube-proxy"].startswith("v1.35."), end
    calls = [r for r in sandbox.requests()[before:] if r["service"] == "eks"]
    steps = [
        r["action"]
        for r in calls
        if r["action"] in ("UpdateClusterVersion", "UpdateNodegroupVersion") and r["status"] == 200
    ]
    # Two control-plane steps, the node groups moved between them (to 1.34) and after.
    assert steps.count("UpdateClusterVersion") == 2, steps
    first_ng = steps.index("UpdateNodegroupVersion")
    last_cp = max(i for i, a in enumerate(steps) if a == "UpdateClusterVersion")
    assert first_ng < last_cp, steps
    refused = [r for r in calls if r["action"].startswith("Update") and r["status"] == 400]
    assert refused == [], "fmctl asked EKS for a step EKS refuses"

    again = sandbox.fmctl("up", "-f", str(target), "--sandbox", "--yes")
    assert again.returncode == 0 and "0 updated, 0 replaced, 0 deleted" in again.stdout, (
        again.stdout
    )
    down = sandbox.fmctl("down", NAME, "--region", REGION, "--sandbox", "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, NAME, REGION) == []


def test_the_sandbox_refuses_what_eks_refuses(sandbox: Sandbox, tmp_path: Path) -> None:
    """Without fmctl: a control-plane step while a node group lags, and a node group asked
    for a version newer than its control plane."""
    import botocore.exceptions

    from tests.engine.harness import subnets

    aws = sandbox.aws("eu-west-3")
    eks = aws.client("eks")
    role = "arn:aws:iam::123456789012:role/eks"
    where = subnets(sandbox, "eu-west-3", 71)
    eks.create_cluster(
        name="bare", version="1.33", roleArn=role, resourcesVpcConfig={"subnetIds": where}
    )
    waiter = eks.get_waiter("cluster_active")
    waiter.wait(name="bare", WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    eks.create_nodegroup(
        clusterName="bare",
        nodegroupName="ng",
        nodeRole=role,
        subnets=where,
        scalingConfig={"minSize": 1, "maxSize": 1, "desiredSize": 1},
    )
    eks.get_waiter("nodegroup_active").wait(
        clusterName="bare", nodegroupName="ng", WaiterConfig={"Delay": 1, "MaxAttempts": 60}
    )
    try:
        eks.update_nodegroup_version(clusterName="bare", nodegroupName="ng", version="1.34")
        raise AssertionError("a node group newer than its control plane")
    except botocore.exceptions.ClientError as err:
        assert err.response["Error"]["Code"] == "InvalidParameterException"
    eks.update_cluster_version(name="bare", version="1.34")
    waiter.wait(name="bare", WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    try:
        eks.update_cluster_version(name="bare", version="1.35")
        raise AssertionError("the control plane moved past a node group")
    except botocore.exceptions.ClientError as err:
        assert err.response["Error"]["Code"] == "InvalidRequestException"
        assert "ng (1.33)" in err.response["Error"]["Message"]
    eks.delete_nodegroup(clusterName="bare", nodegroupName="ng")
    eks.get_waiter("nodegroup_deleted").wait(
        clusterName="bare", nodegroupName="ng", WaiterConfig={"Delay": 1, "MaxAttempts": 60}
    )
    eks.delete_cluster(name="bare")


def test_a_full_ultraserver_block_is_stopped_not_rolled(sandbox: Sandbox, tmp_path: Path) -> None:
    """18 GB200 on their UltraServer Capacity Block (the block is the pool): the sandbox
    fails a rolling update there, as EKS does when it cannot launch the update's new node;
    fmctl plans the version change as [stop], refuses it without --allow-replace, and with
    it scales the node group to 0, updates it and scales it back."""
    name, region = "e2e-gb200-eks", "us-east-1"
    data = yaml.safe_load((ROOT / "examples" / "p6-b300-eks-capacity-block.yaml").read_text())
    data["metadata"]["name"] = name
    data["metadata"].pop("ttl", None)
    data["compute"]["gpuPools"] = [
        {
            "name": "nvl72",
            "instanceType": "p6e-gb200.36xlarge",
            "count": 18,
            "capacity": {"type": "capacity-block", "reservationId": "cr-0b200b200b200b200"},
        }
    ]
    data["storage"] = {}
    data["observability"] = {"prometheus": False, "grafana": False}

    def at(version: str) -> Path:
        data["kubernetes"] = {"version": version}
        path = tmp_path / f"gb200-{version}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    made = sandbox.fmctl("up", "-f", str(at("1.34")), "--sandbox", "--yes")
    assert made.returncode == 0, made.stdout + made.stderr
    eks = sandbox.aws(region).client("eks")
    (group,) = [g for g in eks.list_nodegroups(clusterName=name)["nodegroups"] if "nvl72" in g]
    try:
        # The sandbox's rule, without fmctl: a rolling update of the full block fails.
        update = eks.update_nodegroup_version(clusterName=name, nodegroupName=group)["update"]
        eks.get_waiter("nodegroup_active").wait(
            clusterName=name, nodegroupName=group, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
        )
        seen = eks.describe_update(name=name, nodegroupName=group, updateId=update["id"])
        assert seen["update"]["status"] == "Failed", seen
        assert "InsufficientInstanceCapacity" in seen["update"]["errors"][0]["errorMessage"]

        plan = sandbox.fmctl("plan", "-f", str(at("1.35")), "--sandbox", "-o", "json")
        assert plan.returncode == 0, plan.stdout + plan.stderr
        hows = {
            (c["resource"], f["path"]): f["how"]
            for c in json.loads(plan.stdout)["changes"]
            for f in c.get("fields", [])
        }
        assert hows[("nodegroup/nvl72", "version")] == "stop", hows
        refused = sandbox.fmctl("up", "-f", str(at("1.35")), "--sandbox", "--yes")
        assert refused.returncode == 1 and "stops every node of nodegroup/nvl72" in refused.stderr
        before = len(sandbox.requests())
        done = sandbox.fmctl("up", "-f", str(at("1.35")), "--sandbox", "--yes", "--allow-replace")
        assert done.returncode == 0, done.stdout + done.stderr
        ng = eks.describe_nodegroup(clusterName=name, nodegroupName=group)["nodegroup"]
        assert ng["version"] == "1.35" and ng["scalingConfig"]["desiredSize"] == 18
        steps = [
            r["action"]
            for r in sandbox.requests()[before:]
            if r["action"] in ("UpdateNodegroupConfig", "UpdateNodegroupVersion")
            and r["status"] == 200
        ]
        # The GB200 group: scaled to 0, updated, scaled back; the system group rolls.
        configs = [i for i, a in enumerate(steps) if a == "UpdateNodegroupConfig"]
        assert len(configs) == 2 and steps.count("UpdateNodegroupVersion") == 2, steps
        assert "UpdateNodegroupVersion" in steps[configs[0] : configs[1]], steps
    finally:
        gone = sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes")
        assert gone.returncode == 0, gone.stdout + gone.stderr
    assert raw_leftovers(sandbox, name, region) == []
