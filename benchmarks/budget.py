"""A budget's stop in the sandbox (issue 37): an EKS cluster with ``cost.budget: {monthly,
actions: stop}``; the spend set past the limit (what AWS Budgets would see), then the time
until the cluster runs no instance at all: AWS Budgets' notification, the SNS topic, the
Lambda function's calls and EKS's node group updates, with no fmctl running. Against the
node group update's own duration in the sandbox (its critical path: the updates run side by
side). AWS Budgets' own lag (it reads billing data, hours late) is not in it: that is the
same for every tool.

    python benchmarks/budget.py          # make bench
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import yaml
from table import Row, machine
from up_sandbox import ROOT, SCALE, run


def collect() -> tuple[list[Row], str]:
    """Up, spend past the limit, wait for zero instances: the row and a line of detail."""
    sys.path.insert(0, str(ROOT))
    from fmctl_sandbox import daemon
    from fmctl_sandbox.eks_model import DURATIONS
    from tests.tools import sandbox_doubles as doubles

    home = Path(tempfile.mkdtemp(prefix="fmctl-bench-budget-"))
    doubles.start(home, SCALE)
    data = yaml.safe_load((ROOT / "examples" / "p5en-eks-fsx-s3.yaml").read_text())
    data["metadata"]["name"] = "bench-budget"
    data["compute"]["gpuPools"][0]["count"] = 2
    data["cost"] = {"budget": {"monthly": 1000, "actions": "stop"}}
    spec = home / "budget.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    name, region = data["metadata"]["name"], data["metadata"]["region"]
    try:
        run(home, "up", "-f", str(spec), "--sandbox", "--yes")
        info = daemon.running(home)
        assert info is not None
        creds = daemon.credentials(home)
        from provisioner.drivers.aws import Aws

        aws = Aws(
            region,
            f"https://127.0.0.1:{info['port']}",
            sandbox=True,
            ca_bundle=info["ca"],
            credentials=(creds.access_key, creds.secret_key),
        )
        eks, scaling = aws.client("eks"), aws.client("autoscaling")
        groups = [
            eks.describe_nodegroup(clusterName=name, nodegroupName=g)["nodegroup"]
            for g in eks.list_nodegroups(clusterName=name)["nodegroups"]
        ]
        asgs = [a["name"] for g in groups for a in g["resources"]["autoScalingGroups"]]

        def running() -> int:
            """The instances of the node groups' Auto Scaling groups (what EC2 bills)."""
            found = scaling.describe_auto_scaling_groups(AutoScalingGroupNames=asgs)
            return sum(len(g.get("Instances", [])) for g in found["AutoScalingGroups"])

        before = running()
        start = time.perf_counter()
        daemon.call(
            info, creds, "SetBudgetSpend", {"BudgetName": f"fmctl-{name}-{region}", "Amount": 1001}
        )
        while running() > 0:
            if time.perf_counter() - start > 600:
                raise SystemExit("the cluster was not at zero instances after 600 s")
            time.sleep(0.05)
        wall = time.perf_counter() - start
        run(home, "down", name, "--region", region, "--sandbox", "--yes")
    finally:
        daemon.stop(home)
    update_s = DURATIONS["nodegroup-config"] * SCALE
    detail = (
        f"budget past its limit -> 0 instances (from {before}): {wall:.2f} s; the node group "
        f"update takes {update_s:.2f} s in the sandbox ({DURATIONS['nodegroup-config']:.0f} s "
        f"x {SCALE})"
    )
    row = Row(
        "money",
        "budget limit -> zero instances, s",
        round(wall, 2),
        "node group update s",
        update_s,
        "<=",
        1.5,
    )
    return [row], detail


def main() -> None:
    print(machine())
    print(collect()[1])


if __name__ == "__main__":
    main()
