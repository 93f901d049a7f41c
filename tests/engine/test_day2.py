"""Day 2 on EKS: a changed spec and `up` again — the real `fmctl` against the emulator. Each
change is planned first (and `plan` writes nothing), then applied; what cannot change in
place is refused on the spec's line, or replaced blue/green with --allow-replace."""

from __future__ import annotations

import calendar
import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.catalog.eks_repair import overrides
from provisioner.resources.tags import CREATED_TAG, EXPIRES_TAG, stamp
from tests.engine.harness import (
    ROOT,
    Sandbox,
    fmctl_calls,
    kube_client,
    owned,
    raw_leftovers,
)

NAME = "e2e-day2"
REGION = "us-west-2"
#: What only reads: an AWS operation by name, an S3 or Kubernetes call by HTTP method.
READS = ("Describe", "List", "Get", "Head", "GET ", "HEAD ")


def _repair_config(budget: int, repair: str) -> dict[str, Any]:
    """A GPU node group's nodeRepairConfig as EKS keeps it: on, the budget, and the
    overrides fmctl's fault table asks for under ``health.repair`` (catalog.eks_repair)."""
    return {
        "enabled": True,
        "maxParallelNodesRepairedCount": budget,
        "nodeRepairConfigOverrides": [
            {
                "nodeMonitoringCondition": o.condition,
                "nodeUnhealthyReason": o.reason,
                "minRepairWaitTimeMins": o.wait_minutes,
                "repairAction": o.action,
            }
            for o in overrides(repair)
        ],
    }


def _base(name: str) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "examples" / "p5en-eks-fsx-s3.yaml").read_text())
    data["metadata"]["name"] = name
    data["metadata"]["ttl"] = "1h"
    # A cluster made a while ago: upgrades have minor versions to go through.
    data["kubernetes"]["version"] = "1.33"
    data["compute"]["gpuPools"][0]["count"] = 2
    data["storage"]["fsxLustre"].update(capacityGiB=1200, throughputPerTiB=250)
    return data


class Cluster:
    """One sandbox cluster whose spec a test changes step by step."""

    def __init__(self, sandbox: Sandbox, folder: Path, name: str = NAME) -> None:
        self.sandbox, self.path, self.name = sandbox, folder / "spec.yaml", name
        self.spec = _base(name)

    def write(self) -> None:
        self.path.write_text(yaml.safe_dump(self.spec, sort_keys=False))

    def plan(self) -> dict[str, dict[str, Any]]:
        """The plan's changes by resource (deletes keyed ``delete:ID``); asserts that
        planning made no write call."""
        self.write()
        before = len(self.sandbox.requests())
        done = self.sandbox.fmctl("plan", "-f", str(self.path), "--sandbox", "-o", "json")
        assert done.returncode == 0, done.stdout + done.stderr
        assert writes(self.sandbox.requests()[before:], done.stderr) == []
        return {
            (f"delete:{c['resource']}" if c["action"] == "delete" else c["resource"]): c
            for c in json.loads(done.stdout)["changes"]
        }

    def up(self, *extra: str, ok: bool = True) -> tuple[str, list[dict[str, Any]]]:
        """Run `up`; its output and the calls it made."""
        self.write()
        before = len(self.sandbox.requests())
        done = self.sandbox.fmctl("up", "-f", str(self.path), "--sandbox", "--yes", *extra)
        assert (done.returncode == 0) == ok, done.stdout + done.stderr
        return done.stdout + done.stderr, self.sandbox.requests()[before:]

    def ids(self) -> dict[str, str]:
        return {logical: aws_id for _, logical, aws_id in owned(self.sandbox, self.name, REGION)}


def writes(calls: list[dict[str, Any]], said: str = "") -> list[str]:
    """fmctl's calls (``fmctl_calls``: not the cluster's programs') among ``calls`` that are
    not reads, but for the one `--sandbox` makes before planning and says so (in ``said``):
    the stand-in for the user's data bucket."""
    seeded = {
        f"PUT /{line.split('created data bucket ', 1)[1].split()[0]}"
        for line in said.splitlines()
        if "sandbox: created data bucket " in line
    }
    return [
        f"{c['service']}:{c['action']}"
        for c in fmctl_calls(calls)
        if not c["action"].startswith(READS) and c["action"] not in seeded
    ]


def acting(plan: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Resource -> action, for what `up` will change."""
    return {k: c["action"] for k, c in plan.items() if c["action"] not in ("unchanged", "use")}


def paths(change: dict[str, Any]) -> set[str]:
    return {f["path"] for f in change["fields"]}


def _ready_nodes(sandbox: Sandbox, pool: str, name: str = NAME) -> list[dict[str, Any]]:
    api = kube_client(sandbox, name, REGION)
    try:
        nodes = api.list("v1", "Node", selector=f"fmctl.dev/pool={pool}")
    finally:
        api.close()
    return [
        n
        for n in nodes
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
    ]


# Eleven steps on one cluster, each an `up` with its node group waits: several minutes on
# this 2-core machine under the suite's load (263 to 467 s in three runs of `make test`; the
# default 300 s is for one step's hang).
@pytest.mark.timeout(900)
def test_scale_add_remove_a_pool_and_upgrade(sandbox: Sandbox, tmp_path: Path) -> None:
    cluster = Cluster(sandbox, tmp_path)
    assert acting(cluster.plan()) == {k: "create" for k in acting(cluster.plan())}
    out, _ = cluster.up()
    assert "40 created" in out  # with the ttl's expiry schedules and the role they run as
    assert acting(cluster.plan()) == {}, "nothing to do once up"

    # A hand edit that takes a field over (kubectl apply --server-side --force-conflicts on
    # Prometheus's config): plan shows it by content, as the lines that changed, names who
    # changed it, and up puts fmctl's back.
    api = kube_client(sandbox, NAME, REGION, manager="kubectl")
    try:
        mine = api.get("v1", "ConfigMap", "prometheus-config", "monitoring")
        assert mine is not None
        config = mine["data"]["prometheus.yml"]
        edited = config.replace("scrape_interval: 15s", "scrape_interval: 60s")
        assert edited != config
        api.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "prometheus-config", "namespace": "monitoring"},
                "data": {"prometheus.yml": edited},
            },
            force=True,
        )
    finally:
        api.close()
    drifted = cluster.plan()
    assert acting(drifted) == {"kube-stack": "drift"}
    (field,) = drifted["kube-stack"]["fields"]
    assert field["path"] == "objects.ConfigMap/monitoring/prometheus-config"
    assert field["drift"] and "kubectl" in field["reason"]
    assert field["from"] == {"data.prometheus.yml": edited}
    assert field["to"] == {"data.prometheus.yml": config}
    text = sandbox.fmctl("plan", "-f", str(cluster.path), "--sandbox", "--detailed-exitcode")
    assert text.returncode == 2, text.stdout + text.stderr
    assert "data.prometheus.yml: 2 lines change" in text.stdout, text.stdout
    assert "-  scrape_interval: 60s\n" in text.stdout, text.stdout
    assert "+  scrape_interval: 15s\n" in text.stdout
    assert "changed in the cluster by kubectl" in text.stdout
    assert "resources unchanged; --show-unchanged lists them" in text.stdout
    assert " vpc " not in text.stdout
    listed = sandbox.fmctl("plan", "-f", str(cluster.path), "--sandbox", "--show-unchanged")
    assert " vpc " in listed.stdout
    out, calls = cluster.up()
    assert [w for w in writes(calls) if not w.startswith("kubernetes:")] == [], out
    api = kube_client(sandbox, NAME, REGION)
    try:
        back = api.get("v1", "ConfigMap", "prometheus-config", "monitoring")
    finally:
        api.close()
    assert back is not None and back["data"]["prometheus.yml"] == config
    assert acting(cluster.plan()) == {}, "fmctl's fields are its own again"

    # Scale a pool 2 -> 4: the node group's scaling, in place; nothing else is called.
    cluster.spec["compute"]["gpuPools"][0]["count"] = 4
    plan = cluster.plan()
    assert acting(plan) == {"nodegroup/gpu": "update", "kube-stack": "update"}
    assert paths(plan["nodegroup/gpu"]) == {
        "scaling.min_size",
        "scaling.max_size",
        "scaling.desired_size",
    }
    # In the spec's own terms, and never drift: the change is the spec's.
    assert {f["spec"] for f in plan["nodegroup/gpu"]["fields"]} == {"compute.gpuPools[0].count"}
    assert not any(f.get("drift") for c in plan.values() for f in c["fields"])
    out, calls = cluster.up()
    assert "2 updated" in out
    assert [w for w in writes(calls) if not w.startswith("kubernetes:")] == [
        "eks:UpdateNodegroupConfig"
    ]
    assert len(_ready_nodes(sandbox, "gpu")) == 4
    status = sandbox.fmctl("status", NAME, "--region", REGION, "--sandbox")
    assert "pool gpu: 4 nodes" in status.stdout

    # A wider repair budget (health.maxInRepair): EKS node auto repair's parallel count on
    # the GPU node group, in place; the system group has no auto repair to change.
    cluster.spec["health"] = {"maxInRepair": 2}
    plan = cluster.plan()
    # (The stack waits on the node group's nodes, as after any node group update; fmctl's
    # node agent's controller, on by default, has the budget in its ConfigMap.)
    assert acting(plan) == {"nodegroup/gpu": "update", "kube-stack": "update"}
    assert paths(plan["kube-stack"]) == {
        "nodes",
        "objects.ConfigMap/fmctl-system/fmctl-verify-controller",
    }
    assert paths(plan["nodegroup/gpu"]) == {"repair.max_parallel"}
    assert {f["spec"] for f in plan["nodegroup/gpu"]["fields"]} == {"health.maxInRepair"}
    out, calls = cluster.up()
    assert [w for w in writes(calls) if not w.startswith("kubernetes:")] == [
        "eks:UpdateNodegroupConfig"
    ], out
    eks = sandbox.aws(REGION).client("eks")
    repair = eks.describe_nodegroup(clusterName=NAME, nodegroupName="gpu")["nodegroup"]
    assert repair["nodeRepairConfig"] == _repair_config(2, "replace")
    assert acting(cluster.plan()) == {}
    # health.repair: reboot: EKS told to reboot for the faults a reboot cures, in place.
    cluster.spec["health"]["repair"] = "reboot"
    plan = cluster.plan()
    assert acting(plan) == {"nodegroup/gpu": "update", "kube-stack": "update"}
    assert paths(plan["nodegroup/gpu"]) == {"repair.overrides"}
    assert {f["spec"] for f in plan["nodegroup/gpu"]["fields"]} == {"health.repair"}
    out, calls = cluster.up()
    assert [w for w in writes(calls) if not w.startswith("kubernetes:")] == [
        "eks:UpdateNodegroupConfig"
    ], out
    repair = eks.describe_nodegroup(clusterName=NAME, nodegroupName="gpu")["nodegroup"]
    assert repair["nodeRepairConfig"] == _repair_config(2, "reboot")
    assert acting(cluster.plan()) == {}

    # Add a pool: its placement group, launch template and node group are made.
    cluster.spec["compute"]["gpuPools"].append(
        {"name": "extra", "instanceType": "p5.48xlarge", "count": 1}
    )
    plan = cluster.plan()
    assert {k: v for k, v in acting(plan).items() if v == "create"} == {
        "placement-group/extra": "create",
        "launch-template/extra": "create",
        "nodegroup/extra": "create",
    }
    cluster.up()
    assert {"placement-group/extra", "launch-template/extra", "nodegroup/extra"} <= set(
        cluster.ids()
    )
    assert len(_ready_nodes(sandbox, "extra")) == 1

    # Remove it again: plan says delete; up deletes all three (nothing left running).
    cluster.spec["compute"]["gpuPools"].pop()
    plan = cluster.plan()
    deleted = {k for k, v in acting(plan).items() if v == "delete"}
    assert deleted == {
        "delete:placement-group/extra",
        "delete:launch-template/extra",
        "delete:nodegroup/extra",
    }
    out, calls = cluster.up()
    assert "3 deleted" in out
    left = cluster.ids()
    assert not {"placement-group/extra", "launch-template/extra", "nodegroup/extra"} & set(left)
    eks = sandbox.aws(REGION).client("eks")
    assert "extra" not in eks.list_nodegroups(clusterName=NAME)["nodegroups"]

    # Kubernetes 1.33 -> 1.34 and an add-on pin: the control plane first, then the node
    # groups, then the add-ons (kube-proxy to 1.34's default, coredns to the pin).
    cluster.spec["kubernetes"] = {
        "version": "1.34",
        "addonVersions": {"coredns": "v1.11.4-eksbuild.14"},
    }
    plan = cluster.plan()
    assert plan["eks"]["fields"][0]["to"] == "1.34"
    assert not any(f.get("drift") for c in plan.values() for f in c["fields"])
    assert {"nodegroup/system", "nodegroup/gpu", "addon/kube-proxy", "addon/coredns"} <= set(
        acting(plan)
    )
    assert plan["addon/kube-proxy"]["fields"][0]["to"].startswith("v1.34.")
    out, calls = cluster.up()
    order = [c["action"] for c in calls]
    assert order.index("UpdateClusterVersion") < order.index("UpdateNodegroupVersion")
    assert max(i for i, a in enumerate(order) if a == "UpdateNodegroupVersion") < order.index(
        "UpdateAddon"
    )
    assert eks.describe_cluster(name=NAME)["cluster"]["version"] == "1.34"
    for group in ("system", "gpu"):
        assert (
            eks.describe_nodegroup(clusterName=NAME, nodegroupName=group)["nodegroup"]["version"]
            == "1.34"
        )
    assert (
        eks.describe_addon(clusterName=NAME, addonName="coredns")["addon"]["addonVersion"]
        == "v1.11.4-eksbuild.14"
    )
    assert eks.describe_addon(clusterName=NAME, addonName="kube-proxy")["addon"][
        "addonVersion"
    ].startswith("v1.34.")
    assert len(_ready_nodes(sandbox, "gpu")) == 4  # rolled, and every node Ready again

    # Two minor versions at once go one at a time.
    cluster.spec["kubernetes"]["version"] = "1.36"
    plan = cluster.plan()
    assert "1.34 -> 1.35 -> 1.36" in plan["eks"]["fields"][0]["reason"]
    _, calls = cluster.up()
    assert [c["action"] for c in calls].count("UpdateClusterVersion") == 2

    down = sandbox.fmctl("down", NAME, "--region", REGION, "--sandbox", "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, NAME, REGION) == []


# Several `up`s, a blue/green pool's new group verified through the gate: 184 s on CI and
# 339 s here under the suite's load, past the default 300 s.
@pytest.mark.timeout(600)
def test_ttl_fsx_refusals_and_a_blue_green_pool(sandbox: Sandbox, tmp_path: Path) -> None:
    global_name = NAME + "-b"
    cluster = Cluster(sandbox, tmp_path, global_name)
    cluster.up()
    ids = cluster.ids()
    ec2 = sandbox.aws(REGION).client("ec2")

    # The cluster looks two hours old: its one-hour ttl has passed, `gc --expired` takes it.
    vpc = ids["vpc"]
    born = time.time() - 7200
    ec2.create_tags(
        Resources=[vpc],
        Tags=[
            {"Key": CREATED_TAG, "Value": stamp(born)},
            {"Key": EXPIRES_TAG, "Value": stamp(born + 3600)},
        ],
    )
    dry = sandbox.fmctl("gc", "--expired", "--dry-run", "--region", REGION, "--sandbox")
    assert f"collect  {global_name}" in dry.stdout, dry.stdout
    # A longer ttl rewrites every expiry (counted from each resource's creation); gc spares it.
    cluster.spec["metadata"]["ttl"] = "30d"
    plan = cluster.plan()
    assert plan["vpc"]["fields"] == [
        {
            "path": "tags",
            "from": {EXPIRES_TAG: stamp(born + 3600)},
            "to": {EXPIRES_TAG: stamp(born + 30 * 86400)},
            "how": "update",
            "reason": "tags change in place",
        }
    ]
    # The expiry schedules move with the ttl: each one's at() is the new expiry.
    # (Counted from the schedule group's own creation, a few seconds ago.)
    (moved,) = [f["to"] for f in plan["expiry"]["fields"] if f["path"] == "at"]
    at = calendar.timegm(time.strptime(moved[0], "at(%Y-%m-%dT%H:%M:%S)"))
    assert abs(at - (time.time() + 30 * 86400)) < 600, moved
    assert all(
        paths(plan[k]) == ({"tags", "at"} if k == "expiry" else {"tags"}) for k in acting(plan)
    ), acting(plan)
    cluster.up()
    (tagged,) = ec2.describe_vpcs(VpcIds=[vpc])["Vpcs"]
    assert {t["Key"]: t["Value"] for t in tagged["Tags"]}[EXPIRES_TAG] == stamp(born + 30 * 86400)
    kept = sandbox.fmctl("gc", "--expired", "--dry-run", "--region", REGION, "--sandbox")
    assert f"keep     {global_name}" in kept.stdout, kept.stdout

    # FSx 1200 -> 2400 GiB on PERSISTENT_2: in place.
    cluster.spec["storage"]["fsxLustre"]["capacityGiB"] = 2400
    plan = cluster.plan()
    assert [(f["path"], f["from"], f["to"], f["how"]) for f in plan["fsx"]["fields"]] == [
        ("capacity_gib", 1200, 2400, "update")
    ]
    cluster.up()
    fsx = sandbox.aws(REGION).client("fsx")
    (fs,) = fsx.describe_file_systems(FileSystemIds=[ids["fsx"]])["FileSystems"]
    assert fs["StorageCapacity"] == 2400 and fs["Lifecycle"] == "AVAILABLE"

    # Shrinking is refused on the spec's line, before any call.
    cluster.spec["storage"]["fsxLustre"]["capacityGiB"] = 1200
    out, calls = cluster.up(ok=False)
    assert "capacityGiB" in out and "cannot shrink" in out and "Traceback" not in out
    assert writes(calls) == []
    cluster.spec["storage"]["fsxLustre"]["capacityGiB"] = 2400

    # Another increase so soon is refused before any call: FSx takes the next one 6 hours
    # after the last was requested, and the way out says when. The plan says so first, and
    # fails as a plan that cannot be applied (JSON and text; --detailed-exitcode too).
    cluster.spec["storage"]["fsxLustre"]["capacityGiB"] = 4800
    cluster.write()
    planned = sandbox.fmctl("plan", "-f", str(cluster.path), "--sandbox", "-o", "json")
    assert planned.returncode == 1, planned.stdout + planned.stderr
    data = json.loads(planned.stdout)
    (fsx_change,) = [c for c in data["changes"] if c["resource"] == "fsx"]
    assert fsx_change["action"] == "refuse", fsx_change
    assert fsx_change["reason"].startswith("up will refuse this: capacity_gib")
    assert [(r["resource"], r["spec"]) for r in data["refusals"]] == [
        ("fsx", "storage.fsxLustre.capacityGiB")
    ]
    text = sandbox.fmctl("plan", "-f", str(cluster.path), "--sandbox", "--detailed-exitcode")
    assert text.returncode == 1 and "up will refuse this: capacity_gib" in text.stdout
    assert "up will refuse this plan and change nothing" in text.stdout
    assert "nothing to do" not in text.stdout
    out, calls = cluster.up(ok=False)
    assert "capacityGiB" in out and "6 hours after the last" in out, out
    assert "hint: keep capacityGiB at 2400 for now" in out and writes(calls) == []
    cluster.spec["storage"]["fsxLustre"]["capacityGiB"] = 2400

    # A run that fails part way: the pool scales, FSx refuses every try of its throughput
    # change. `up` says what is still to change, keeps the last applied spec, and the next
    # `up` finishes the job.
    (recorded,) = sandbox.home.glob(f"**/clusters/{global_name}/spec.yaml")
    applied = recorded.read_text()
    cluster.spec["storage"]["fsxLustre"]["throughputPerTiB"] = 500
    cluster.spec["compute"]["gpuPools"][0]["count"] = 3
    refuse = {"kind": "error", "status": 400, "code": "BadRequest"}
    sandbox.faults([{"action": "UpdateFileSystem", "times": 100, **refuse}])
    try:
        out, calls = cluster.up(ok=False)
    finally:
        sandbox.faults([])
    assert "still to change: fsx" in out and "Traceback" not in out, out
    assert "UpdateNodegroupConfig" in [c["action"] for c in calls]
    assert recorded.read_text() == applied, "a failed run records nothing as applied"
    # The stack waits on the file system, and its Kueue quota follows the pool's new count.
    assert acting(cluster.plan()) == {"fsx": "update", "kube-stack": "update"}
    assert "kube-stack" in out.split("still to change:", 1)[1].splitlines()[0]
    cluster.up()
    assert yaml.safe_load(recorded.read_text()) == cluster.spec
    (fs,) = fsx.describe_file_systems(FileSystemIds=[ids["fsx"]])["FileSystems"]
    lustre = fs["LustreConfiguration"]
    assert lustre["PerUnitStorageThroughput"] == 500 and fs["Lifecycle"] == "AVAILABLE"

    # Another AZ replaces the subnets and all in them: refused without --allow-replace,
    # located on network.availabilityZone, naming what is lost; nothing is called.
    cluster.spec["network"]["availabilityZone"] = "us-west-2c"
    out, calls = cluster.up(ok=False)
    assert "availabilityZone: us-west-2c" in out
    assert "--allow-replace" in out and "every file on it" in out
    assert writes(calls) == []
    cluster.spec["network"]["availabilityZone"] = "us-west-2a"

    # A scheduler switch on a live cluster: the plan names the EKS cluster as going, and
    # up refuses it without --allow-replace, on the spec's scheduler line; nothing is called.
    cluster.spec["scheduler"] = "slurm"
    switch = cluster.plan()
    assert switch["delete:eks"]["kind"] == "eks-cluster", sorted(switch)
    out, calls = cluster.up(ok=False)
    assert "deletes the EKS cluster" in out and "every node goes" in out, out
    assert "scheduler:" in out and "--allow-replace" in out
    assert writes(calls) == []
    cluster.spec["scheduler"] = "kubernetes"

    # Another instance type for a pool: blue/green with --allow-replace. The new node group
    # is made and ACTIVE before the old one is deleted.
    cluster.spec["compute"]["gpuPools"][0]["instanceType"] = "p5.48xlarge"
    plan = cluster.plan()
    assert plan["nodegroup/gpu"]["action"] == "replace"
    refused, calls = cluster.up(ok=False)
    assert "instanceType" in refused and writes(calls) == []
    out, calls = cluster.up("--allow-replace")
    order = [c["action"] for c in calls]
    assert order.index("CreateNodegroup") < order.index("DeleteNodegroup")
    eks = sandbox.aws(REGION).client("eks")
    groups = eks.list_nodegroups(clusterName=global_name)["nodegroups"]
    assert "gpu" not in groups and len(groups) == 2
    api = kube_client(sandbox, global_name, REGION)
    try:
        nodes = api.list("v1", "Node", selector="fmctl.dev/pool=gpu")
    finally:
        api.close()
    assert {n["metadata"]["labels"]["node.kubernetes.io/instance-type"] for n in nodes} == {
        "p5.48xlarge"
    }
    assert {n["status"]["allocatable"]["vpc.amazonaws.com/efa"] for n in nodes} == {"32"}
    # EKS labels each node with its 3 network layers (p5: the catalog's depth).
    layers = {k for n in nodes for k in n["metadata"]["labels"] if "network-node-layer" in k}
    assert layers == {f"topology.k8s.aws/network-node-layer-{i}" for i in (1, 2, 3)}
    assert acting(cluster.plan()) == {}

    down = sandbox.fmctl("down", global_name, "--region", REGION, "--sandbox", "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, global_name, REGION) == []


def test_plan_makes_no_write_call_for_any_example(sandbox: Sandbox, tmp_path: Path) -> None:
    """Every example, planned against nothing and against itself once up: reads only."""
    from tests.engine.harness import spec_file

    for example in sorted((ROOT / "examples").glob("*.yaml")):
        name = f"e2e-nowrite-{example.stem[:12]}".rstrip("-")
        spec = spec_file(tmp_path, name, example=example.name)
        before = len(sandbox.requests())
        done = sandbox.fmctl("plan", "-f", str(spec), "--sandbox", "-o", "json")
        assert writes(sandbox.requests()[before:], done.stderr) == [], example.name
        answer = json.loads(done.stdout)
        if "error" in answer:
            # What the spec names and the emulator lacks (an existing VPC or file system)
            # is refused by the online checks, located, before any plan.
            missing = {
                p["path"] for p in answer["error"]["problems"] if p["code"] == "existing-missing"
            }
            assert missing and done.returncode == 1, done.stdout + done.stderr
            named = yaml.safe_load(example.read_text())
            assert ("vpcId" in named["network"]) == ("network.vpcId" in missing)
            continue
        assert done.returncode == 0, done.stdout + done.stderr
        assert {c["action"] for c in answer["changes"]} == {"create"}
    # And against a cluster that exists: the EKS example, up once.
    spec = spec_file(tmp_path, "e2e-nowrite-up")
    assert sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes").returncode == 0
    before = len(sandbox.requests())
    done = sandbox.fmctl("plan", "-f", str(spec), "--sandbox", "--detailed-exitcode")
    assert done.returncode == 0, done.stdout + done.stderr  # nothing to change
    assert writes(sandbox.requests()[before:]) == []
    data = yaml.safe_load(spec.read_text())
    changed = copy.deepcopy(data)
    changed["compute"]["gpuPools"][0]["count"] = 3
    spec.write_text(yaml.safe_dump(changed, sort_keys=False))
    detailed = sandbox.fmctl("plan", "-f", str(spec), "--sandbox", "--detailed-exitcode")
    assert detailed.returncode == 2, detailed.stdout + detailed.stderr
    assert (
        sandbox.fmctl(
            "down", "e2e-nowrite-up", "--region", data["metadata"]["region"], "--sandbox", "--yes"
        ).returncode
        == 0
    )


def test_a_denied_read_is_reported_against_its_resource(sandbox: Sandbox, tmp_path: Path) -> None:
    """A 403 on one read: plan still shows the rest, names the resource and the permission,
    exits 1, and prints no traceback; up refuses to act on a plan it could not make."""
    from tests.engine.harness import spec_file

    name = "e2e-denied"
    spec = spec_file(tmp_path, name, example="p5-slurm-capacity-block.yaml")
    data = yaml.safe_load(spec.read_text())
    assert sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes").returncode == 0
    sandbox.faults(
        [
            {
                "action": "DescribeNatGateways",
                "kind": "error",
                "status": 403,
                "code": "UnauthorizedOperation",
            }
        ]
    )
    done = sandbox.fmctl("plan", "-f", str(spec), "--sandbox", "--show-unchanged")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "natgw" in done.stdout and "unreadable" in done.stdout
    assert "UnauthorizedOperation" in done.stdout and "Traceback" not in done.stdout + done.stderr
    assert "vpc " in done.stdout and "please report" not in done.stdout + done.stderr
    before = len(sandbox.requests())
    refused = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes")
    assert refused.returncode == 1 and "natgw" in refused.stderr
    assert writes(sandbox.requests()[before:]) == []
    sandbox.faults([])
    region = data["metadata"]["region"]
    assert sandbox.fmctl("down", name, "--region", region, "--sandbox", "--yes").returncode == 0
