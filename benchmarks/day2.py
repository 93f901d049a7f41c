"""Day 2 in the sandbox: `plan` on a cluster that is what its spec says (the read calls it
makes, per resource kind, and that it writes nothing), and a pool scaled out (the apply's wall
against the node group update's own duration, and the calls it makes to anything else).
Prints ratios; not a test.

    python benchmarks/day2.py            # make bench
"""

from __future__ import annotations

import collections
import re
import sys
import tempfile
import time
from pathlib import Path

import yaml
from table import Row, machine
from up_sandbox import ROOT, SCALE, run

READS = ("Describe", "List", "Get", "Head", "GET ", "HEAD ")
#: Which kind an AWS read belongs to (the operations fmctl's kinds call to read).
KIND_OF = {
    "DescribeVpcs": "vpc",
    "DescribeVpcAttribute": "vpc",
    "DescribeSubnets": "subnet",
    "DescribeInternetGateways": "igw",
    "DescribeAddresses": "eip",
    "DescribeNatGateways": "natgw",
    "DescribeRouteTables": "route-table",
    "DescribeVpcEndpoints": "s3-endpoint",
    "DescribeSecurityGroups": "sg",
    "DescribePlacementGroups": "placement-group",
    "DescribeLaunchTemplates": "launch-template",
    "DescribeLaunchTemplateVersions": "launch-template",
    "DescribeFileSystems": "fsx",
    "DescribeDataRepositoryAssociations": "dra",
    "ListRoles": "iam-role",
    "GetRole": "iam-role",
    "ListRoleTags": "iam-role",
    "ListAttachedRolePolicies": "iam-role",
    "ListRolePolicies": "iam-role",
    "GetRolePolicy": "iam-role",
    "GetInstanceProfile": "iam-role",
    "ListInstanceProfiles": "iam-role",
    "ListPolicies": "iam-policy",
    "GetResources": "kms-key",
    "DescribeKey": "kms-key",
    "GetKeyRotationStatus": "kms-key",
    "DescribeCluster": "eks-cluster",
    "ListAccessEntries": "eks-access-entry",
    "DescribeAccessEntry": "eks-access-entry",
    "ListAssociatedAccessPolicies": "eks-access-entry",
    "ListNodegroups": "eks-nodegroup",
    "DescribeNodegroup": "eks-nodegroup",
    "ListAddons": "eks-addon",
    "DescribeAddon": "eks-addon",
    "DescribeAddonVersions": "eks-addon",
    "ListPodIdentityAssociations": "eks-pod-identity",
}


def _kind(call: dict[str, str]) -> str:
    if call["service"] == "kubernetes":
        return "kube-stack"
    if call["service"] == "s3":
        return "bucket"
    return KIND_OF.get(call["action"], f"({call['service']} {call['action']}: checks)")


def collect() -> tuple[list[Row], str]:
    """Plan an unchanged cluster, then scale a pool out: rows and the detailed table."""
    sys.path.insert(0, str(ROOT))
    from fmctl_sandbox import daemon
    from fmctl_sandbox.eks_model import DURATIONS

    home = Path(tempfile.mkdtemp(prefix="fmctl-bench-day2-"))
    from tests.tools import sandbox_doubles as doubles

    # The tests' double of the emulator: the product's, with the request log counted here.
    doubles.start(home, SCALE)
    spec = home / "day2.yaml"
    data = yaml.safe_load((ROOT / "examples" / "p5en-eks-fsx-s3.yaml").read_text())
    data["compute"]["gpuPools"][0]["count"] = 2
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    name, region = data["metadata"]["name"], data["metadata"]["region"]
    lines = []
    try:
        run(home, "up", "-f", str(spec), "--sandbox", "--yes")
        before = len(doubles.control(home, "/_fmctl/requests"))
        start = time.perf_counter()
        run(home, "plan", "-f", str(spec), "--sandbox")
        plan_wall = time.perf_counter() - start
        calls = doubles.control(home, "/_fmctl/requests")[before:]
        writes = [c for c in calls if not c["action"].startswith(READS)]
        per_kind = collections.Counter(_kind(c) for c in calls if c["service"] != "kubernetes")
        kinds = [k for k in per_kind if not k.startswith("(")]
        one_call = [k for k in kinds if per_kind[k] == 1]
        lines.append("plan of an unchanged cluster: AWS read calls per kind")
        lines += [f"  {k:<44} {n:>3}" for k, n in sorted(per_kind.items())]
        kube = sum(1 for c in calls if c["service"] == "kubernetes")
        lines.append(f"  {'kube-stack (Kubernetes API: discovery and lists)':<44} {kube:>3}")

        data["compute"]["gpuPools"][0]["count"] = 4
        spec.write_text(yaml.safe_dump(data, sort_keys=False))
        before = len(doubles.control(home, "/_fmctl/requests"))
        _, done = run(home, "up", "-f", str(spec), "--sandbox", "--yes")
        found = re.search(r" in ([0-9.]+)s", done.stdout)
        assert found is not None, done.stdout
        scale_wall = float(found.group(1))
        scaled = doubles.control(home, "/_fmctl/requests")[before:]
        others = [
            c["action"]
            for c in scaled
            if not c["action"].startswith(READS)
            and c["service"] != "kubernetes"
            and c["action"] != "UpdateNodegroupConfig"
        ]
        update_s = DURATIONS["nodegroup-config"] * SCALE
        lines.append(
            f"pool scale-out 2 -> 4: apply {scale_wall:.2f} s; the node group update takes "
            f"{update_s:.2f} s in the sandbox ({DURATIONS['nodegroup-config']:.0f} s x {SCALE}); "
            f"write calls to anything else: {others or 'none'}"
        )
        run(home, "down", name, "--region", region, "--sandbox", "--yes")
    finally:
        daemon.stop(home)
    rows = [
        Row("day 2", "plan, unchanged EKS cluster: write calls", len(writes), bound="<=", limit=0),
        Row("day 2", "plan, unchanged EKS cluster: wall s", round(plan_wall, 2)),
        Row(
            "day 2",
            "plan, unchanged: kinds read in one call",
            len(one_call),
            "kinds read",
            len(kinds),
        ),
        Row(
            "day 2",
            "plan, unchanged: AWS read calls",
            sum(per_kind.values()),
            "resource kinds",
            len(kinds),
        ),
        Row(
            "day 2",
            "pool scale-out 2 -> 4: apply s",
            scale_wall,
            "node group update s",
            update_s,
            "<=",
            1.05,
        ),
        Row(
            "day 2",
            "pool scale-out: writes to unchanged resources",
            len(others),
            bound="<=",
            limit=0,
        ),
    ]
    return rows, "\n".join(lines)


def main() -> None:
    print(machine())
    print(collect()[1])


if __name__ == "__main__":
    main()
