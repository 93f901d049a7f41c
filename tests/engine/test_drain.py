"""Capacity taken away drains first (issue: day 2 that a team can trust): on EKS, `up` picks
the nodes that go, cordons them, evicts their pods through the Eviction API (disruption
budgets respected) within compute.drain.timeout, and only then ends exactly those
instances through the node group's Auto Scaling group; a pool removed is drained before
EKS deletes it; `plan` says how many pods move. In the sandbox: its Eviction API and
PodDisruptionBudgets (``sandbox.kube_evict``) and the node groups' Auto Scaling groups
(``sandbox.eks_asg``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from provisioner.resources.eks_drain import LEAVING
from tests.engine.harness import ROOT, Sandbox, kube_client, raw_leftovers

NAME, REGION = "e2e-drain", "us-west-2"


def _spec(tmp_path: Path, count: int, extra: bool = False, timeout: str = "30m") -> Path:
    data = yaml.safe_load((ROOT / "examples" / "p5en-eks-fsx-s3.yaml").read_text())
    data["metadata"]["name"] = NAME
    pools = data["compute"]["gpuPools"]
    pools[0]["count"] = count
    if extra:
        pools.append({**pools[0], "name": "extra", "count": 1})
    data["compute"]["drain"] = {"timeout": timeout}
    # No verify gate: its Jobs' pods on a new node would be among the pods drained.
    data.setdefault("health", {})["verify"] = {"kubernetesGate": False}
    data["storage"]["fsxLustre"].update(capacityGiB=1200, throughputPerTiB=250)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _nodes(sandbox: Sandbox, pool: str) -> list[dict[str, Any]]:
    api = kube_client(sandbox, NAME, REGION)
    try:
        return sorted(
            api.list("v1", "Node", selector=f"fmctl.dev/pool={pool}"),
            key=lambda n: n["metadata"]["name"],
        )
    finally:
        api.close()


def _trainer(name: str, node: str) -> dict[str, Any]:
    """A training pod already placed on ``node`` (a Job's would run to its end at once in the
    sandbox; this one keeps running, as a training run does)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "train", "labels": {"app": "trainer"}},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "train",
                    "image": "public.ecr.aws/docker/library/busybox:1.36",
                    "resources": {"requests": {"nvidia.com/gpu": "8"}},
                }
            ],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _budget(min_available: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "trainer", "namespace": "train"},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "trainer"}}},
    }


def _up(sandbox: Sandbox, spec: Path, ok: bool = True) -> str:
    done = sandbox.fmctl("up", "-f", str(spec), "--sandbox", "--yes", timeout=300)
    assert (done.returncode == 0) == ok, done.stdout + done.stderr
    return done.stdout + done.stderr


def _actions(sandbox: Sandbox, since: int) -> list[str]:
    return [str(r["action"]) for r in sandbox.requests()[since:]]


def test_scale_in_and_pool_removal_drain_first(sandbox: Sandbox, tmp_path: Path) -> None:
    _up(sandbox, _spec(tmp_path, 3, extra=True))
    gpu = [n["metadata"]["name"] for n in _nodes(sandbox, "gpu")]
    assert len(gpu) == 3
    api = kube_client(sandbox, NAME, REGION, manager="kubectl")
    try:
        api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "train"}})
        api.apply(_budget(2))
        for name, node in (("trainer-a", gpu[0]), ("trainer-b", gpu[1])):
            api.apply(_trainer(name, node))
        (extra,) = [n["metadata"]["name"] for n in _nodes(sandbox, "extra")]
        api.apply(
            _trainer("trainer-extra", extra)
            | {
                "metadata": {
                    "name": "trainer-extra",
                    "namespace": "train",
                    "labels": {"app": "other"},
                }
            }
        )
    finally:
        api.close()

    # 3 -> 2: the empty node goes, the trainers' stay; exactly that instance is ended.
    spec = _spec(tmp_path, 2, extra=True)
    planned = sandbox.fmctl("plan", "-f", str(spec), "--sandbox", "-o", "json")
    (scaling,) = [
        f
        for c in json.loads(planned.stdout)["changes"]
        if c["resource"] == "nodegroup/gpu"
        for f in c["fields"]
        if f["path"] == "scaling.desired_size"
    ]
    assert (
        "up first drains the 1 node(s) that go (0 pod(s) on 1 node(s) to move" in (scaling["note"])
    ), scaling
    seen = len(sandbox.requests())
    _up(sandbox, spec)
    assert [n["metadata"]["name"] for n in _nodes(sandbox, "gpu")] == gpu[:2]
    calls = _actions(sandbox, seen)
    assert calls.count("TerminateInstanceInAutoScalingGroup") == 1
    # The group's minimum lowered first (a decrement may not go below it), the instance
    # ended, then EKS told the new size.
    configs = [i for i, c in enumerate(calls) if c == "UpdateNodegroupConfig"]
    ended = calls.index("TerminateInstanceInAutoScalingGroup")
    assert len(configs) == 2 and configs[0] < ended < configs[1], calls

    # 2 -> 1 while the budget wants both trainers: nothing is ended, the node that would go
    # stays cordoned and named, and up says what holds it.
    spec = _spec(tmp_path, 1, extra=True, timeout="1m")
    planned = sandbox.fmctl("plan", "-f", str(spec), "--sandbox")
    assert "1 pod(s) on 1 node(s) to move" in planned.stdout, planned.stdout
    seen = len(sandbox.requests())
    said = _up(sandbox, spec, ok=False)
    assert "1 pod(s) still on the nodes being taken out" in said, said
    assert "their disruption budgets refuse: train/trainer-" in said
    assert "TerminateInstanceInAutoScalingGroup" not in _actions(sandbox, seen)
    nodes = _nodes(sandbox, "gpu")
    assert len(nodes) == 2
    leaving = [n for n in nodes if n["metadata"]["labels"].get(LEAVING) == "true"]
    assert len(leaving) == 1 and leaving[0]["spec"]["unschedulable"] is True

    # The budget lets one go: the same node is drained (its trainer evicted), then ended.
    api = kube_client(sandbox, NAME, REGION, manager="kubectl")
    try:
        api.apply(_budget(1))
    finally:
        api.close()
    _up(sandbox, spec)
    (left,) = _nodes(sandbox, "gpu")
    assert left["metadata"]["name"] != leaving[0]["metadata"]["name"]
    api = kube_client(sandbox, NAME, REGION)
    try:
        trainers = [p["metadata"]["name"] for p in api.list("v1", "Pod", "train")]
    finally:
        api.close()
    assert len([t for t in trainers if t.startswith("trainer-") and t != "trainer-extra"]) == 1

    # The extra pool removed: its pod is evicted before EKS deletes the group.
    spec = _spec(tmp_path, 1)
    planned = sandbox.fmctl("plan", "-f", str(spec), "--sandbox")
    assert "up first drains its 1 node(s) (1 pod(s) to move" in planned.stdout, planned.stdout
    seen = len(sandbox.requests())
    _up(sandbox, spec)
    calls = _actions(sandbox, seen)
    evicted = [i for i, c in enumerate(calls) if c.endswith("/pods/trainer-extra/eviction")]
    assert evicted and evicted[0] < calls.index("DeleteNodegroup"), calls

    down = sandbox.fmctl("down", NAME, "--region", REGION, "--sandbox", "--yes")
    assert down.returncode == 0, down.stdout + down.stderr
    assert raw_leftovers(sandbox, NAME, REGION) == []
